#include "transport/nccl/broadcast_round.h"

#include <xxhash.h>

#include <cstring>

#include "codec/base/byte_io.h"

namespace weightcast::nccl {
namespace {

constexpr char kMagic[4] = {'W', 'C', 'N', 'R'};
// The smallest descriptor entry: an empty name's length, size and XXH3.
constexpr uint64_t kMinEntryBytes = 4 + 8 + 8;

uint64_t xxh3(std::span<const uint8_t> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string who(const BroadcastGroup& g, int root) {
  return "rank " + std::to_string(g.rank()) + " of " + std::to_string(g.size()) + ", root " +
         std::to_string(root);
}

// Broadcasts one buffer of `bytes` from `root`: the root passes `source`, others `dest`.
Status broadcast_one(BroadcastGroup& g, int root, const char* what, uint64_t bytes,
                     std::span<const uint8_t> source, std::span<uint8_t> dest, Deadline deadline) {
  const SchedulePart part{what, bytes, root};
  const std::span<const uint8_t> sources[1] = {source};
  const std::span<uint8_t> dests[1] = {dest};
  const bool is_root = g.rank() == root;
  return g.broadcast(std::span(&part, 1),
                     is_root ? std::span(sources) : std::span(sources).first(0),
                     is_root ? std::span(dests).first(0) : std::span(dests), deadline);
}

// A framing error: the members are out of step, so the group goes down with it.
Status abort_with(BroadcastGroup& g, Status s) {
  g.abort(s.message());
  return s;
}

Result<ReceivedRound> run_as_root(BroadcastGroup& g, int root, uint64_t version,
                                  std::span<const RoundPart> parts, bool receive,
                                  const RoundLimits& limits, Deadline deadline) {
  const std::string ctx = "round of version " + std::to_string(version) + " (" + who(g, root) + ")";
  std::vector<PartDescriptor> described;
  described.reserve(parts.size());
  for (const RoundPart& p : parts) described.push_back({p.name, p.bytes.size(), xxh3(p.bytes)});
  auto descriptor = encode_round_descriptor(described, limits);
  if (!descriptor.ok()) return abort_with(g, descriptor.status().with_context(ctx));
  const auto header = encode_round_header({version, descriptor->size(), xxh3(*descriptor)});
  Status s = broadcast_one(g, root, "round header", header.size(), header, {}, deadline);
  if (s.ok()) {
    s = broadcast_one(g, root, "round descriptor", descriptor->size(), *descriptor, {}, deadline);
  }
  if (s.ok() && !parts.empty()) {
    std::vector<SchedulePart> schedule;
    std::vector<std::span<const uint8_t>> sources;
    for (const RoundPart& p : parts) {
      schedule.push_back({p.name, p.bytes.size(), root});
      sources.push_back(p.bytes);
    }
    s = g.broadcast(schedule, sources, {}, deadline);
  }
  if (!s.ok()) return s.with_context(ctx);
  ReceivedRound round;
  round.version = version;
  if (!receive) return round;
  for (size_t i = 0; i < parts.size(); ++i) {
    round.parts.push_back(
        {parts[i].name, {parts[i].bytes.begin(), parts[i].bytes.end()}, described[i].xxh3});
    round.bytes += parts[i].bytes.size();
  }
  return round;
}

Result<ReceivedRound> run_as_receiver(BroadcastGroup& g, int root, const RoundLimits& limits,
                                      Deadline deadline,
                                      const std::function<void(uint64_t)>& on_header) {
  std::string ctx = "round (" + who(g, root) + ")";
  std::array<uint8_t, kRoundHeaderBytes> header_bytes{};
  Status s =
      broadcast_one(g, root, "round header", header_bytes.size(), {}, header_bytes, deadline);
  if (!s.ok()) return s.with_context(ctx);
  auto header = parse_round_header(header_bytes, limits);
  if (!header.ok()) return abort_with(g, header.status().with_context(ctx));
  ctx = "round of version " + std::to_string(header->version) + " (" + who(g, root) + ")";
  if (on_header) on_header(header->version);

  std::vector<uint8_t> descriptor(header->descriptor_bytes);
  s = broadcast_one(g, root, "round descriptor", descriptor.size(), {}, descriptor, deadline);
  if (!s.ok()) return s.with_context(ctx);
  if (xxh3(descriptor) != header->descriptor_xxh3) {
    return abort_with(g, data_loss(ctx + ": the descriptor does not match the header's XXH3"));
  }
  auto described = parse_round_descriptor(descriptor, limits);
  if (!described.ok()) return abort_with(g, described.status().with_context(ctx));

  ReceivedRound round;
  round.version = header->version;
  if (described->empty()) return round;
  std::vector<SchedulePart> schedule;
  std::vector<std::span<uint8_t>> dests;
  round.parts.reserve(described->size());
  for (PartDescriptor& d : *described) {
    schedule.push_back({d.name, d.bytes, root});
    round.parts.push_back({std::move(d.name), std::vector<uint8_t>(d.bytes), d.xxh3});
    round.bytes += d.bytes;
  }
  for (ReceivedPart& p : round.parts) dests.push_back(p.bytes);
  s = g.broadcast(schedule, {}, dests, deadline);
  if (!s.ok()) return s.with_context(ctx);
  for (const ReceivedPart& p : round.parts) {
    if (xxh3(p.bytes) != p.xxh3) {
      return data_loss(ctx + ": part '" + p.name + "' (" + std::to_string(p.bytes.size()) +
                       " bytes) does not match its XXH3");
    }
  }
  return round;
}

}  // namespace

Result<ReceivedRound> run_round(BroadcastGroup& g, int root, uint64_t version,
                                std::span<const RoundPart> parts, bool receive,
                                const RoundLimits& limits, Deadline deadline,
                                const std::function<void(uint64_t version)>& on_header) {
  if (root < 0 || root >= g.size()) {
    return abort_with(g, invalid_argument("round of version " + std::to_string(version) +
                                          ": root " + std::to_string(root) +
                                          " is outside the group of " + std::to_string(g.size())));
  }
  if (g.rank() == root) return run_as_root(g, root, version, parts, receive, limits, deadline);
  if (!parts.empty()) {
    return abort_with(g, invalid_argument("round (" + who(g, root) + "): a receiver passes " +
                                          std::to_string(parts.size()) + " parts"));
  }
  return run_as_receiver(g, root, limits, deadline, on_header);
}

std::array<uint8_t, kRoundHeaderBytes> encode_round_header(const RoundHeader& header) {
  std::array<uint8_t, kRoundHeaderBytes> out{};
  std::memcpy(out.data(), kMagic, 4);
  store_le<uint32_t>(out.data() + 4, kRoundFormatVersion);
  store_le<uint64_t>(out.data() + 8, header.version);
  store_le<uint64_t>(out.data() + 16, header.descriptor_bytes);
  store_le<uint64_t>(out.data() + 24, header.descriptor_xxh3);
  return out;
}

Result<RoundHeader> parse_round_header(std::span<const uint8_t> bytes, const RoundLimits& limits) {
  if (bytes.size() != kRoundHeaderBytes) {
    return data_loss("round header: " + std::to_string(bytes.size()) + " bytes, not " +
                     std::to_string(kRoundHeaderBytes));
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return data_loss("round header: bad magic (not \"WCNR\")");
  }
  const uint32_t format = load_le<uint32_t>(bytes.data() + 4);
  if (format != kRoundFormatVersion) {
    return data_loss("round header: format version " + std::to_string(format) +
                     ", this build reads " + std::to_string(kRoundFormatVersion));
  }
  RoundHeader h;
  h.version = load_le<uint64_t>(bytes.data() + 8);
  h.descriptor_bytes = load_le<uint64_t>(bytes.data() + 16);
  h.descriptor_xxh3 = load_le<uint64_t>(bytes.data() + 24);
  if (h.descriptor_bytes < 4) {
    return data_loss("round header: a descriptor of " + std::to_string(h.descriptor_bytes) +
                     " bytes cannot hold its part count");
  }
  if (h.descriptor_bytes > limits.max_descriptor_bytes) {
    return out_of_range("round header: a descriptor of " + std::to_string(h.descriptor_bytes) +
                        " bytes exceeds the limit of " +
                        std::to_string(limits.max_descriptor_bytes));
  }
  return h;
}

Result<std::vector<uint8_t>> encode_round_descriptor(std::span<const PartDescriptor> parts,
                                                     const RoundLimits& limits) {
  if (parts.size() > limits.max_parts) {
    return out_of_range(std::to_string(parts.size()) + " parts exceed the limit of " +
                        std::to_string(limits.max_parts));
  }
  std::vector<uint8_t> out;
  append_le<uint32_t>(&out, static_cast<uint32_t>(parts.size()));
  uint64_t total = 0;
  for (const PartDescriptor& p : parts) {
    if (p.name.size() > limits.max_name_bytes) {
      return out_of_range("part '" + p.name.substr(0, 64) + "...': a name of " +
                          std::to_string(p.name.size()) + " bytes exceeds the limit of " +
                          std::to_string(limits.max_name_bytes));
    }
    if (p.bytes > limits.max_total_bytes - total) {
      return out_of_range("part '" + p.name + "': the round's parts exceed " +
                          std::to_string(limits.max_total_bytes) + " bytes");
    }
    total += p.bytes;
    append_le<uint32_t>(&out, static_cast<uint32_t>(p.name.size()));
    out.insert(out.end(), p.name.begin(), p.name.end());
    append_le<uint64_t>(&out, p.bytes);
    append_le<uint64_t>(&out, p.xxh3);
    if (out.size() > limits.max_descriptor_bytes) {
      return out_of_range("part '" + p.name + "': the descriptor exceeds " +
                          std::to_string(limits.max_descriptor_bytes) + " bytes");
    }
  }
  return out;
}

Result<std::vector<PartDescriptor>> parse_round_descriptor(std::span<const uint8_t> bytes,
                                                           const RoundLimits& limits) {
  if (bytes.size() > limits.max_descriptor_bytes) {
    return out_of_range("round descriptor: " + std::to_string(bytes.size()) +
                        " bytes exceed the limit of " +
                        std::to_string(limits.max_descriptor_bytes));
  }
  ByteCursor in(bytes);
  uint32_t count = 0;
  if (!in.read(&count)) return data_loss("round descriptor: truncated before the part count");
  if (count > limits.max_parts) {
    return out_of_range("round descriptor: " + std::to_string(count) +
                        " parts exceed the limit of " + std::to_string(limits.max_parts));
  }
  if (count > in.remaining() / kMinEntryBytes) {
    return data_loss("round descriptor: " + std::to_string(count) + " parts cannot fit in " +
                     std::to_string(in.remaining()) + " bytes");
  }
  std::vector<PartDescriptor> parts(count);
  uint64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const std::string at = "round descriptor: part " + std::to_string(i);
    PartDescriptor& p = parts[i];
    uint32_t name_bytes = 0;
    std::span<const uint8_t> name;
    if (!in.read(&name_bytes)) return data_loss(at + ": truncated in the name's length");
    if (name_bytes > limits.max_name_bytes) {
      return out_of_range(at + ": a name of " + std::to_string(name_bytes) +
                          " bytes exceeds the limit of " + std::to_string(limits.max_name_bytes));
    }
    if (!in.take(name_bytes, &name)) return data_loss(at + ": truncated in the name");
    p.name.assign(name.begin(), name.end());
    if (!in.read(&p.bytes) || !in.read(&p.xxh3)) {
      return data_loss(at + " '" + p.name + "': truncated in its size or XXH3");
    }
    if (p.bytes > limits.max_total_bytes - total) {
      return out_of_range(at + " '" + p.name + "': the round's parts exceed " +
                          std::to_string(limits.max_total_bytes) + " bytes");
    }
    total += p.bytes;
  }
  if (in.remaining() != 0) {
    return data_loss("round descriptor: " + std::to_string(in.remaining()) +
                     " bytes after the last part");
  }
  return parts;
}

}  // namespace weightcast::nccl
