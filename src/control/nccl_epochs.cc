#include "src/control/nccl_epochs.h"

namespace weightcast {

std::optional<int> NcclEpoch::nccl_rank(uint32_t rank) const {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) return static_cast<int>(i);
  }
  return std::nullopt;
}

void NcclEpochs::joined(uint32_t rank, bool publisher) {
  auto [it, inserted] = members_.try_emplace(rank, publisher);
  if (!inserted && it->second == publisher) return;  // a repeated Hello changes nothing
  it->second = publisher;
  changed_ = true;
}

void NcclEpochs::left(uint32_t rank) {
  if (members_.erase(rank) > 0) changed_ = true;
}

std::optional<NcclEpoch> NcclEpochs::begin_version(uint64_t version) {
  if (!changed_) return std::nullopt;
  changed_ = false;
  NcclEpoch e;
  for (const auto& [rank, publisher] : members_) {
    if (publisher) e.ranks.push_back(rank);
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

bool NcclEpochs::over_nccl(uint32_t rank, uint64_t version) const {
  if (!current_ || changed_ || version < current_->from_version) return false;
  const std::optional<int> r = current_->nccl_rank(rank);
  return r.has_value() && static_cast<uint32_t>(*r) >= current_->publishers;
}

}  // namespace weightcast
