#include "tests/support/broadcast_transport.h"

#include <xxhash.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <set>

namespace weightcast::nccl {

// The last `keep` rounds a member received, and whether one is under way. Thread-safe; shared
// by a BroadcastTransport, its receive thread and its reader()s.
class HeldRounds {
 public:
  HeldRounds(std::string who, uint32_t keep) : who_(std::move(who)), keep_(keep) {}

  const std::string& who() const { return who_; }

  void begin_round() {
    std::lock_guard lock(mu_);
    in_flight_ = true;
  }

  // Ends the round under way; keeps `round` when there is one.
  void end_round(std::optional<ReceivedRound> round) {
    std::lock_guard lock(mu_);
    in_flight_ = false;
    if (round) {
      rounds_.push_back(std::move(*round));
      while (rounds_.size() > keep_) rounds_.pop_front();
    }
    cv_.notify_all();
  }

  Result<VersionDescriptor> latest(Deadline deadline) {
    std::unique_lock lock(mu_);
    RETURN_IF_ERROR(settle(lock, deadline));
    if (rounds_.empty()) return not_found(who_ + " holds no version");
    return describe_round(rounds_.back());
  }

  Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) {
    std::unique_lock lock(mu_);
    RETURN_IF_ERROR(settle(lock, deadline));
    ASSIGN_OR_RETURN(const ReceivedRound* round, find(version));
    return describe_round(*round);
  }

  Status fetch(uint64_t version, const std::string& name, std::span<uint8_t> dest,
               Deadline deadline) {
    std::unique_lock lock(mu_);
    RETURN_IF_ERROR(settle(lock, deadline));
    ASSIGN_OR_RETURN(const ReceivedPart* part, find_part(version, name));
    if (dest.size() != part->bytes.size()) {
      return invalid_argument("part '" + name + "' of version " + std::to_string(version) +
                              " has " + std::to_string(part->bytes.size()) +
                              " bytes, the destination " + std::to_string(dest.size()));
    }
    if (!dest.empty()) std::memcpy(dest.data(), part->bytes.data(), dest.size());
    lock.unlock();
    if (XXH3_64bits(dest.data(), dest.size()) != part->xxh3) {
      return data_loss("part '" + name + "' of version " + std::to_string(version) + " held by " +
                       who_ + " does not match its XXH3");
    }
    return ok_status();
  }

  // The receive loop's end (`why`), and rounds it dropped.
  void finish(Status why) {
    std::lock_guard lock(mu_);
    ended_ = std::move(why);
  }
  Status ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }
  void note_dropped() {
    std::lock_guard lock(mu_);
    ++dropped_;
  }
  uint64_t dropped() const {
    std::lock_guard lock(mu_);
    return dropped_;
  }

  Status corrupt(uint64_t version, const std::string& name) {
    std::lock_guard lock(mu_);
    ASSIGN_OR_RETURN(const ReceivedPart* part, find_part(version, name));
    if (part->bytes.empty()) return invalid_argument("part '" + name + "' is empty");
    const_cast<ReceivedPart*>(part)->bytes[part->bytes.size() / 2] ^= 0x40;
    return ok_status();
  }

 private:
  // Waits for a round under way to end; the reads then answer from what is held.
  Status settle(std::unique_lock<std::mutex>& lock, Deadline deadline) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded(who_ + ": the read's deadline passed before it started");
    }
    if (!cv_.wait_until(lock, deadline, [&] { return !in_flight_; })) {
      return deadline_exceeded(who_ + ": a round was still arriving at the read's deadline");
    }
    return ok_status();
  }

  Result<const ReceivedRound*> find(uint64_t version) const {
    for (const ReceivedRound& r : rounds_) {
      if (r.version == version) return &r;
    }
    std::string held = rounds_.empty() ? "none"
                                       : std::to_string(rounds_.front().version) + ".." +
                                             std::to_string(rounds_.back().version);
    return not_found("version " + std::to_string(version) + " is not held by " + who_ +
                     " (held: " + held + ")");
  }

  Result<const ReceivedPart*> find_part(uint64_t version, const std::string& name) const {
    ASSIGN_OR_RETURN(const ReceivedRound* round, find(version));
    for (const ReceivedPart& p : round->parts) {
      if (p.name == name) return &p;
    }
    return not_found("version " + std::to_string(version) + " has no part '" + name + "'");
  }

  static VersionDescriptor describe_round(const ReceivedRound& round) {
    VersionDescriptor d;
    d.version = round.version;
    for (const ReceivedPart& p : round.parts) d.parts.push_back({p.name, p.bytes.size(), p.xxh3});
    return d;
  }

  const std::string who_;
  const uint32_t keep_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ReceivedRound> rounds_;  // ascending versions
  bool in_flight_ = false;
  Status ended_;
  uint64_t dropped_ = 0;
};

namespace {

// A subscriber's view of held rounds (reader()): reads only.
class HeldRoundsReader final : public PartReader {
 public:
  HeldRoundsReader(std::shared_ptr<HeldRounds> held, TransportInfo info)
      : held_(std::move(held)), info_(std::move(info)) {}
  TransportInfo info() const override { return info_; }
  Result<VersionDescriptor> latest(Deadline deadline) override { return held_->latest(deadline); }
  Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) override {
    return held_->describe(version, deadline);
  }
  Status fetch(uint64_t version, const PartDescriptor& part, std::span<uint8_t> dest,
               Deadline deadline) override {
    return held_->fetch(version, part.name, dest, deadline);
  }

 private:
  std::shared_ptr<HeldRounds> held_;
  const TransportInfo info_;
};

}  // namespace

Result<std::unique_ptr<BroadcastTransport>> BroadcastTransport::create(
    std::unique_ptr<BroadcastGroup> group, BroadcastTransportOptions options) {
  if (!group) return invalid_argument("a broadcast transport needs a group");
  if (options.root < 0 || options.root >= group->size()) {
    return invalid_argument("root " + std::to_string(options.root) + " is outside the group of " +
                            std::to_string(group->size()));
  }
  if (options.keep_versions == 0) return invalid_argument("keep_versions must be at least 1");
  return std::unique_ptr<BroadcastTransport>(
      new BroadcastTransport(std::move(group), std::move(options)));
}

BroadcastTransport::BroadcastTransport(std::unique_ptr<BroadcastGroup> group,
                                       BroadcastTransportOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  held_ = std::make_shared<HeldRounds>(options_.name + " rank " + std::to_string(group_->rank()) +
                                           " of " + std::to_string(group_->size()),
                                       options_.keep_versions);
  if (group_->rank() != options_.root) receiver_ = std::thread([this] { receive_loop(); });
}

BroadcastTransport::~BroadcastTransport() {
  if (receiver_.joinable()) {
    stopping_ = true;
    group_->abort(held_->who() + ": transport closed");
    receiver_.join();
  }
}

TransportInfo BroadcastTransport::info() const {
  TransportInfo info;
  info.name = options_.name;
  info.memory_kinds = {MemoryKind::kHost};
  return info;
}

Status BroadcastTransport::publish(uint64_t version, std::span<const PartPayload> parts,
                                   Deadline deadline) {
  RETURN_IF_ERROR(sticky_.check());
  const std::string ctx = "publish of version " + std::to_string(version) + " by " + held_->who();
  if (std::chrono::steady_clock::now() >= deadline) {
    return deadline_exceeded(ctx + ": the deadline passed before it started");
  }
  if (group_->rank() != options_.root) {
    return failed_precondition(ctx + ": only the root, rank " + std::to_string(options_.root) +
                               ", publishes");
  }
  if (published_ && version <= last_published_) {
    return failed_precondition(ctx + ": version " + std::to_string(last_published_) +
                               " was published already");
  }
  std::set<std::string_view> names;
  std::vector<RoundPart> round_parts;
  for (const PartPayload& p : parts) {
    if (!names.insert(p.name).second)
      return invalid_argument(ctx + ": part '" + p.name + "' twice");
    round_parts.push_back({p.name, p.bytes});
  }
  const bool alone = group_->size() == 1;
  auto round =
      run_round(*group_, options_.root, version, round_parts, alone, options_.limits, deadline);
  if (!round.ok()) {
    // The group is down with the round (broadcast_round.h): every later publish fails.
    (void)sticky_.record(io_error(round.status().message()));
    return round.status();
  }
  published_ = true;
  last_published_ = version;
  if (alone) held_->end_round(std::move(round).value());
  return ok_status();
}

Result<VersionDescriptor> BroadcastTransport::latest(Deadline deadline) {
  return held_->latest(deadline);
}

Result<VersionDescriptor> BroadcastTransport::describe(uint64_t version, Deadline deadline) {
  return held_->describe(version, deadline);
}

Status BroadcastTransport::fetch(uint64_t version, const PartDescriptor& part,
                                 std::span<uint8_t> dest, Deadline deadline) {
  return held_->fetch(version, part.name, dest, deadline);
}

std::unique_ptr<PartReader> BroadcastTransport::reader() const {
  return std::make_unique<HeldRoundsReader>(held_, info());
}

Status BroadcastTransport::receive_status() const {
  return held_->ended();
}

uint64_t BroadcastTransport::dropped_rounds() const {
  return held_->dropped();
}

void BroadcastTransport::abort(const std::string& why) {
  group_->abort(why);
}

Status BroadcastTransport::corrupt_held_part(uint64_t version, const std::string& part) {
  return held_->corrupt(version, part);
}

void BroadcastTransport::receive_loop() {
  constexpr int kMaxFailedInARow = 3;
  int failed_in_a_row = 0;
  for (;;) {
    auto round =
        run_round(*group_, options_.root, 0, {}, true, options_.limits,
                  deadline_in(options_.idle_deadline), [this](uint64_t) { held_->begin_round(); });
    if (round.ok()) {
      failed_in_a_row = 0;
      held_->end_round(std::move(round).value());
      continue;
    }
    held_->end_round(std::nullopt);
    if (stopping_) {
      held_->finish(failed_precondition(held_->who() + ": transport closed"));
      return;
    }
    // A corrupt part fails this member's round only; anything else took the group down.
    if (round.status().code() == StatusCode::kDataLoss && ++failed_in_a_row < kMaxFailedInARow) {
      held_->note_dropped();
      continue;
    }
    held_->finish(round.status());
    return;
  }
}

}  // namespace weightcast::nccl
