#include "tests/support/loopback_broadcast_group.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

namespace weightcast::nccl {
namespace {

// What one member brings to a broadcast; lives on its stack while it waits in broadcast().
struct Arrival {
  std::span<const SchedulePart> parts;
  std::span<const std::span<const uint8_t>> sources;
  std::span<const std::span<uint8_t>> destinations;
};

std::string part_label(size_t i, const SchedulePart& p) {
  return "part " + std::to_string(i) + " '" + p.name + "'";
}

// The state every member of one group shares: the current rendezvous and the group's error.
class GroupCore {
 public:
  GroupCore(std::string id, int size) : id_(std::move(id)), size_(size), arrivals_(size) {}

  Status broadcast(int rank, const Arrival& mine, Deadline deadline) {
    std::unique_lock lock(mu_);
    if (!broken_.ok()) return unavailable(broken_for(rank).message());
    if (arrivals_[rank] != nullptr) {
      return invalid_argument("loopback group '" + id_ + "': rank " + std::to_string(rank) +
                              " called broadcast() again while its previous call waits");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      break_locked(deadline_exceeded("rank " + std::to_string(rank) + " called broadcast #" +
                                     std::to_string(round_) + " with its deadline already past"));
      return broken_for(rank);
    }
    arrivals_[rank] = &mine;
    ++arrived_;
    const uint64_t round = round_;
    if (arrived_ == size_) {
      Status valid = validate_locked();
      if (!valid.ok()) {
        break_locked(valid);
        withdraw_locked(rank);
        return broken_for(rank);
      }
      copy_locked();
      ++round_;
      arrived_ = 0;
      std::fill(arrivals_.begin(), arrivals_.end(), nullptr);
      cv_.notify_all();
      return ok_status();
    }
    while (round_ == round && broken_.ok()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && round_ == round &&
          broken_.ok()) {
        break_locked(deadline_exceeded("rank " + std::to_string(rank) +
                                       " waited past its deadline in broadcast #" +
                                       std::to_string(round) + " for " + missing_locked()));
      }
    }
    if (round_ != round) return ok_status();  // completed (a later break does not undo it)
    withdraw_locked(rank);
    return broken_for(rank);
  }

  int waiting() {
    std::lock_guard lock(mu_);
    return arrived_;
  }

  // Breaks the group with `cause` unless it is broken already.
  void fail(Status cause) {
    std::lock_guard lock(mu_);
    break_locked(std::move(cause));
  }

 private:
  Status broken_for(int rank) const {
    return broken_.with_context("rank " + std::to_string(rank) + " of " + std::to_string(size_));
  }

  void break_locked(Status cause) {
    if (!broken_.ok()) return;
    broken_ = Status(cause.code(), "loopback group '" + id_ + "' of " + std::to_string(size_) +
                                       " is broken: " + cause.message());
    cv_.notify_all();
  }

  void withdraw_locked(int rank) {
    if (arrivals_[rank] == nullptr) return;
    arrivals_[rank] = nullptr;
    --arrived_;
  }

  std::string missing_locked() const {
    std::string out = "rank(s)";
    for (int r = 0; r < size_; ++r) {
      if (arrivals_[r] == nullptr) out += " " + std::to_string(r);
    }
    return out;
  }

  // Every member passes rank 0's parts; spans are one per part (or none) of the parts' sizes.
  Status validate_locked() const {
    const auto& ref = arrivals_[0]->parts;
    for (int r = 0; r < size_; ++r) {
      const Arrival& a = *arrivals_[r];
      const std::string who = "rank " + std::to_string(r);
      if (a.parts.size() != ref.size()) {
        return invalid_argument(who + " passes " + std::to_string(a.parts.size()) +
                                " parts, rank 0 passes " + std::to_string(ref.size()));
      }
      if (!a.sources.empty() && a.sources.size() != ref.size()) {
        return invalid_argument(who + " passes " + std::to_string(a.sources.size()) +
                                " sources for " + std::to_string(ref.size()) + " parts");
      }
      if (!a.destinations.empty() && a.destinations.size() != ref.size()) {
        return invalid_argument(who + " passes " + std::to_string(a.destinations.size()) +
                                " destinations for " + std::to_string(ref.size()) + " parts");
      }
      for (size_t i = 0; i < ref.size(); ++i) {
        const SchedulePart& p = a.parts[i];
        if (p.bytes != ref[i].bytes || p.owner != ref[i].owner) {
          return invalid_argument(part_label(i, ref[i]) + ": " + who + " has " +
                                  std::to_string(p.bytes) + " bytes owned by rank " +
                                  std::to_string(p.owner) + ", rank 0 has " +
                                  std::to_string(ref[i].bytes) + " bytes owned by rank " +
                                  std::to_string(ref[i].owner));
        }
        if (p.owner < 0 || p.owner >= size_) {
          return invalid_argument(part_label(i, p) + ": owner rank " + std::to_string(p.owner) +
                                  " is outside the group of " + std::to_string(size_));
        }
        if (!a.destinations.empty() && !a.destinations[i].empty() &&
            a.destinations[i].size() != p.bytes) {
          return invalid_argument(part_label(i, p) + ": " + who + "'s destination has " +
                                  std::to_string(a.destinations[i].size()) + " bytes, the part " +
                                  std::to_string(p.bytes));
        }
        const size_t source = (r == p.owner && !a.sources.empty()) ? a.sources[i].size() : 0;
        if (r == p.owner && source != p.bytes) {
          return invalid_argument(part_label(i, p) + ": the owner, " + who + ", has a source of " +
                                  std::to_string(source) + " bytes, the part " +
                                  std::to_string(p.bytes));
        }
      }
    }
    return ok_status();
  }

  void copy_locked() {
    const auto& parts = arrivals_[0]->parts;
    for (int r = 0; r < size_; ++r) {
      const Arrival& a = *arrivals_[r];
      if (a.destinations.empty()) continue;
      for (size_t i = 0; i < parts.size(); ++i) {
        const std::span<uint8_t> dst = a.destinations[i];
        if (dst.empty()) continue;
        const std::span<const uint8_t> src = arrivals_[parts[i].owner]->sources[i];
        if (dst.data() != src.data()) std::memmove(dst.data(), src.data(), dst.size());
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const std::string id_;
  const int size_;
  Status broken_;
  uint64_t round_ = 0;  // broadcasts completed
  int arrived_ = 0;
  std::vector<const Arrival*> arrivals_;  // per rank, while it waits in the current round
};

class LoopbackMember final : public BroadcastGroup {
 public:
  LoopbackMember(std::shared_ptr<GroupCore> core, int rank, int size)
      : core_(std::move(core)), rank_(rank), size_(size) {}
  ~LoopbackMember() override {
    core_->fail(io_error("member " + std::to_string(rank_) + " left the group"));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status broadcast(std::span<const SchedulePart> parts,
                   std::span<const std::span<const uint8_t>> sources,
                   std::span<const std::span<uint8_t>> destinations, Deadline deadline) override {
    return core_->broadcast(rank_, Arrival{parts, sources, destinations}, deadline);
  }

  void abort(const std::string& why) override { core_->fail(io_error(why)); }

  int waiting() const { return core_->waiting(); }

 private:
  std::shared_ptr<GroupCore> core_;
  const int rank_;
  const int size_;
};

// Members of one id joined so far.
struct PendingGroup {
  int size = 0;
  std::vector<bool> joined;
  int count = 0;
  bool complete = false;
  std::shared_ptr<GroupCore> core;
};

struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::shared_ptr<PendingGroup>> pending;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: a join may run during exit
  return *r;
}

}  // namespace

Result<std::string> LoopbackBroadcastGroupFactory::make_id() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const uint64_t random = (uint64_t{rd()} << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(random));
  return "loopback-" + std::to_string(++counter) + "-" + hex;
}

Result<std::unique_ptr<BroadcastGroup>> LoopbackBroadcastGroupFactory::join(const std::string& id,
                                                                            int ranks, int rank,
                                                                            Deadline deadline) {
  const std::string who =
      "loopback group '" + id + "': rank " + std::to_string(rank) + " of " + std::to_string(ranks);
  if (ranks < 1 || rank < 0 || rank >= ranks) return invalid_argument(who + ": no such rank");
  Registry& reg = registry();
  std::unique_lock lock(reg.mu);
  std::shared_ptr<PendingGroup>& slot = reg.pending[id];
  if (!slot) {
    slot = std::make_shared<PendingGroup>();
    slot->size = ranks;
    slot->joined.assign(ranks, false);
    slot->core = std::make_shared<GroupCore>(id, ranks);
  }
  const std::shared_ptr<PendingGroup> group = slot;
  if (group->size != ranks) {
    return invalid_argument(who + ": the group has size " + std::to_string(group->size));
  }
  if (group->joined[rank]) return invalid_argument(who + ": that rank joined already");
  group->joined[rank] = true;
  if (++group->count == ranks) {
    group->complete = true;
    reg.pending.erase(id);
    reg.cv.notify_all();
  }
  reg.cv.wait_until(lock, deadline, [&] { return group->complete; });
  if (!group->complete) {
    std::string missing;
    for (int r = 0; r < ranks; ++r) {
      if (!group->joined[r]) missing += " " + std::to_string(r);
    }
    group->joined[rank] = false;
    if (--group->count == 0) {
      auto it = reg.pending.find(id);
      if (it != reg.pending.end() && it->second == group) reg.pending.erase(it);
    }
    return deadline_exceeded(who + ": only " + std::to_string(group->count + 1) + " of " +
                             std::to_string(ranks) + " members joined by the deadline (missing" +
                             missing + ")");
  }
  return std::unique_ptr<BroadcastGroup>(
      std::make_unique<LoopbackMember>(group->core, rank, ranks));
}

Result<std::vector<std::unique_ptr<BroadcastGroup>>> make_loopback_group(int ranks) {
  if (ranks < 1)
    return invalid_argument("a loopback group needs at least one member, not " +
                            std::to_string(ranks));
  LoopbackBroadcastGroupFactory factory;
  ASSIGN_OR_RETURN(const std::string id, factory.make_id());
  auto core = std::make_shared<GroupCore>(id, ranks);
  std::vector<std::unique_ptr<BroadcastGroup>> members;
  for (int r = 0; r < ranks; ++r)
    members.push_back(std::make_unique<LoopbackMember>(core, r, ranks));
  return members;
}

int loopback_members_in_broadcast(const BroadcastGroup& member) {
  const auto* loopback = dynamic_cast<const LoopbackMember*>(&member);
  return loopback == nullptr ? 0 : loopback->waiting();
}

int loopback_members_joining(const std::string& id) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mu);
  const auto it = reg.pending.find(id);
  return it == reg.pending.end() ? 0 : it->second->count;
}

}  // namespace weightcast::nccl
