#include "src/control/nccl_epochs.h"

#include <utility>

#include "weightcast/control.pb.h"

namespace weightcast {

std::string nccl_descriptor(uint64_t epoch) {
  proto::NcclDescriptor d;
  d.set_epoch(epoch);
  return d.SerializeAsString();
}

std::optional<uint64_t> nccl_descriptor_epoch(const std::string& descriptor) {
  proto::NcclDescriptor d;
  if (!d.ParseFromString(descriptor) || d.epoch() == 0) return std::nullopt;
  return d.epoch();
}

std::optional<int> NcclEpoch::nccl_rank(uint32_t rank) const {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) return static_cast<int>(i);
  }
  return std::nullopt;
}

std::optional<NcclEpoch> NcclEpochs::end_if_member(uint32_t rank) {
  if (!current_ || !current_->nccl_rank(rank)) return std::nullopt;
  return end(false);
}

std::optional<NcclEpoch> NcclEpochs::joined(uint32_t rank, bool publisher) {
  auto ended = end_if_member(rank);
  auto [it, inserted] = members_.try_emplace(rank, publisher);
  if (inserted || it->second != publisher || ended) {
    changed_ = true;
    failures_in_a_row_ = 0;  // new membership: worth trying again
  }
  it->second = publisher;
  return ended;
}

std::optional<NcclEpoch> NcclEpochs::left(uint32_t rank) {
  auto ended = end_if_member(rank);
  if (members_.erase(rank) > 0) {
    changed_ = true;
    failures_in_a_row_ = 0;
  }
  return ended;
}

std::optional<NcclEpoch> NcclEpochs::end(bool failure) {
  if (!current_) return std::nullopt;
  changed_ = true;
  if (failure) ++failures_in_a_row_;
  return std::exchange(current_, std::nullopt);
}

void NcclEpochs::carried() {
  failures_in_a_row_ = 0;
}

std::optional<NcclEpoch> NcclEpochs::begin_version(uint64_t version) {
  if (!changed_ || suspended()) return std::nullopt;
  changed_ = false;
  NcclEpoch e;
  for (const auto& [rank, publisher] : members_) {
    if (publisher) {
      e.ranks.push_back(rank);
      break;  // one root: see the header
    }
  }
  e.publishers = static_cast<uint32_t>(e.ranks.size());
  for (const auto& [rank, publisher] : members_) {
    if (!publisher) e.ranks.push_back(rank);
  }
  if (e.publishers == 0 || e.ranks.size() == e.publishers) {
    current_.reset();  // nobody to broadcast from, or to
    return std::nullopt;
  }
  e.epoch = next_epoch_++;
  e.from_version = version;
  current_ = e;
  return e;
}

bool NcclEpochs::set_group_id(uint64_t epoch, const std::string& group_id) {
  if (!current_ || current_->epoch != epoch || !current_->group_id.empty()) return false;
  current_->group_id = group_id;
  return true;
}

bool NcclEpochs::member_joined(uint64_t epoch, uint32_t rank) {
  if (!current_ || current_->epoch != epoch || current_->ready) return false;
  if (!current_->nccl_rank(rank)) return false;
  current_->joined.insert(rank);
  current_->ready = current_->joined.size() == current_->ranks.size();
  return current_->ready;
}

bool NcclEpochs::over_nccl(uint32_t rank, uint64_t epoch) const {
  if (!current_ || !current_->ready || epoch == 0 || current_->epoch != epoch) return false;
  const std::optional<int> r = current_->nccl_rank(rank);
  return r.has_value() && static_cast<uint32_t>(*r) >= current_->publishers;
}

}  // namespace weightcast
