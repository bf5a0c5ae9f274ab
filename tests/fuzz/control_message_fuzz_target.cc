// libFuzzer target: decode one control frame (src/control/messages.h) under small limits.
// The invariants checked on every input: a refusal is kInvalidArgument with a message; a
// decoded envelope has a body and a protocol, every count and string is within the limits,
// it encodes into a frame that decodes to the same envelope, and describe_envelope and
// body_name name it. Anything else, or a crash, aborts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "src/control/messages.h"
#include "tests/fuzz/control_message_fuzz_seeds.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kNotEnvelope, kRefused, kDecoded };
}  // namespace

std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"not an Envelope (empty, too large, malformed protobuf)", 20},
      {"an Envelope refused by its body, protocol or limits", 1.5},
      {"decoded and encoded again", 3},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

using weightcast::MessageLimits;
namespace proto = weightcast::proto;

bool within(size_t count, size_t limit) {
  return count <= limit;
}
bool short_enough(const std::string& s, const MessageLimits& l) {
  return s.size() <= l.max_string_bytes;
}

template <typename Checksums>
bool checksums_ok(const Checksums& checksums, const MessageLimits& l) {
  if (!within(checksums.size(), l.max_checksums)) return false;
  for (const proto::TensorChecksum& c : checksums) {
    if (!short_enough(c.name(), l)) return false;
  }
  return true;
}

// An independent re-check of the limits decode_envelope promises.
bool limits_hold(const proto::Envelope& m, const MessageLimits& l) {
  switch (m.body_case()) {
    case proto::Envelope::kHello:
      if (!within(m.hello().transports_size(), l.max_transports)) return false;
      for (const std::string& t : m.hello().transports()) {
        if (!short_enough(t, l)) return false;
      }
      return short_enough(m.hello().host(), l);
    case proto::Envelope::kWelcome:
      if (!within(m.welcome().transports_size(), l.max_transports)) return false;
      for (const std::string& t : m.welcome().transports()) {
        if (!short_enough(t, l)) return false;
      }
      return short_enough(m.welcome().journal_root(), l) && short_enough(m.welcome().plan(), l);
    case proto::Envelope::kRefuse:
      return short_enough(m.refuse().reason(), l);
    case proto::Envelope::kOffer:
      if (!within(m.offer().live_descriptors_size(), l.max_transports)) return false;
      for (const auto& [path, descriptor] : m.offer().live_descriptors()) {
        if (!short_enough(path, l) || descriptor.size() > l.max_blob_bytes) return false;
      }
      return checksums_ok(m.offer().checksums(), l);
    case proto::Envelope::kAck:
      return checksums_ok(m.ack().checksums(), l) && short_enough(m.ack().transport(), l);
    case proto::Envelope::kNack:
      if (!within(m.nack().tensors_size(), l.max_checksums)) return false;
      for (const std::string& t : m.nack().tensors()) {
        if (!short_enough(t, l)) return false;
      }
      return short_enough(m.nack().reason(), l);
    case proto::Envelope::kRecover:
      return short_enough(m.recover().reason(), l);
    case proto::Envelope::kLeave:
      return short_enough(m.leave().reason(), l);
    case proto::Envelope::kStatusReply:
      if (!short_enough(m.status_reply().group_id(), l)) return false;
      if (!within(m.status_reply().members_size(), l.max_members)) return false;
      if (!within(m.status_reply().nccl_ranks_size(), l.max_members)) return false;
      for (const proto::MemberStatus& member : m.status_reply().members()) {
        if (!short_enough(member.state(), l) || !short_enough(member.transport(), l) ||
            !short_enough(member.host(), l)) {
          return false;
        }
      }
      return true;
    case proto::Envelope::kNcclEpoch: {
      const proto::NcclEpoch& e = m.nccl_epoch();
      return e.stage() >= proto::NCCL_MAKE_ID && e.stage() <= proto::NCCL_END && e.epoch() != 0 &&
             within(e.ranks_size(), l.max_members) &&
             e.publishers() <= static_cast<uint32_t>(e.ranks_size()) &&
             e.group_id().size() <= l.max_group_id_bytes && short_enough(e.reason(), l);
    }
    case proto::Envelope::kNcclReport: {
      const proto::NcclReport& r = m.nccl_report();
      return (r.stage() == proto::NCCL_MAKE_ID || r.stage() == proto::NCCL_JOIN ||
              r.stage() == proto::NCCL_ROUND) &&
             r.group_id().size() <= l.max_group_id_bytes && short_enough(r.reason(), l);
    }
    case proto::Envelope::kCommit:
    case proto::Envelope::kHeartbeat:
    case proto::Envelope::kStatusRequest:
      return true;
    case proto::Envelope::BODY_NOT_SET:
      break;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  // Invalid UTF-8 in a string field is a refusal like any other; protobuf's ERROR line for
  // it would only flood the run's output.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;

  const MessageLimits& limits = fuzzing::kControlFuzzLimits;
  auto decoded = decode_envelope(std::span<const uint8_t>(data, size), limits);
  if (!decoded.ok()) {
    if (decoded.status().message().empty()) std::abort();
    if (decoded.status().code() != StatusCode::kInvalidArgument) std::abort();
    // decode_envelope's first check, independently: a non-empty frame within the limit that
    // protobuf parses as an Envelope.
    proto::Envelope envelope;
    const bool is_envelope = size > 0 && size <= limits.max_bytes &&
                             envelope.ParseFromArray(data, static_cast<int>(size));
    fuzzing::fuzz_reached(is_envelope ? fuzzing::kRefused : fuzzing::kNotEnvelope);
    return 0;
  }
  const proto::Envelope& m = *decoded;
  if (m.body_case() == proto::Envelope::BODY_NOT_SET || m.protocol() == 0) std::abort();
  if (!limits_hold(m, limits)) std::abort();
  if (body_name(m) == "empty" || describe_envelope(m).empty()) std::abort();

  const std::string frame = encode_envelope(m);
  auto again = decode_envelope(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(frame.data()), frame.size()),
      limits);
  // Re-encoding never grows a frame (repeated submessages merge, overlong varints shrink),
  // so it decodes under the same limits, and encoding is stable from then on.
  if (!again.ok()) std::abort();
  if (encode_envelope(*again) != frame) std::abort();
  fuzzing::fuzz_reached(fuzzing::kDecoded);
  return 0;
}
