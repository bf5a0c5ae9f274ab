// The live paths of the subscriber (subscriber.h): deltas read over UCX from the publisher's
// memory, or received by an NCCL epoch's broadcast, applied with the same checks as the
// journal's (CatchUpReader::apply_delta_from).
#include <utility>

#include "src/endpoint/subscriber.h"
#include "transport/fs/catch_up_reader.h"

namespace weightcast {

std::optional<Status> Subscriber::apply_over_ucx(uint64_t target, uint64_t* bytes_read) {
  const std::optional<uint64_t> held = reader_->held();
  if (!ucx_ || !held || *held >= target) return std::nullopt;
  std::vector<std::pair<uint64_t, std::string>> blobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (transport_ != "ucx") return std::nullopt;
    for (uint64_t v = *held + 1; v <= target; ++v) {
      auto it = ucx_blobs_.find(v);
      if (it == ucx_blobs_.end()) return std::nullopt;
      blobs.emplace_back(v, it->second);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(config_.timeouts().ack_timeout_ms());
  for (auto& [v, blob] : blobs) {
    auto fetched = ucx_->fetch(v, blob, deadline);
    Status applied = fetched.ok() ? reader_->apply_delta_from(std::move(fetched->manifest),
                                                              std::move(fetched->parts),
                                                              "ucx version " + std::to_string(v))
                                  : fetched.status();
    if (!applied.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      ucx_blobs_.erase(ucx_blobs_.begin(), ucx_blobs_.upper_bound(target));  // next: the journal
      return Status(applied.code(), "over ucx: " + applied.message());
    }
    *bytes_read += fetched->bytes_read;
  }
  return ok_status();
}

std::optional<Status> Subscriber::apply_over_nccl(uint64_t target, uint64_t* bytes_read) {
  const std::optional<uint64_t> held = reader_->held();
  if (!nccl_ || !held || *held >= target) return std::nullopt;
  // A round has the NCCL deadline; the worker waits a little longer for its outcome.
  const auto deadline =
      std::chrono::steady_clock::now() + nccl_timeout(config_.nccl()) + std::chrono::seconds(1);
  for (uint64_t v = *held + 1; v <= target; ++v) {
    auto received = nccl_->take_received(v, deadline);
    if (!received) {
      if (v == *held + 1) return std::nullopt;
      // The rest was not broadcast: the journal from here.
      auto rest = reader_->catch_up(target);
      return rest.ok() ? ok_status() : Status(rest.status().code(), rest.status().message());
    }
    Status applied = received->ok() ? reader_->apply_delta_from(std::move((*received)->manifest),
                                                                std::move((*received)->parts),
                                                                "nccl version " + std::to_string(v))
                                    : received->status();
    if (!applied.ok()) {
      nccl_->forget_through(target);  // next: the journal
      return Status(applied.code(), "over nccl: " + applied.message());
    }
    *bytes_read += (*received)->bytes_read;
  }
  return ok_status();
}

}  // namespace weightcast
