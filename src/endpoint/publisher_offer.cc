// The publisher's last stage (publisher.h, step 4): a written version served on the live
// paths and offered to the coordinator with its checksums.
#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "codec/base/allocation.h"
#include "src/endpoint/publisher.h"

namespace weightcast {

Status Publisher::offer_version(PublishJob& job, PublishReport report,
                                std::chrono::steady_clock::time_point started,
                                uint64_t started_unix) {
  proto::Envelope e;
  proto::Offer& offer = *e.mutable_offer();
  offer.set_version(job.version);
  offer.set_anchor(report.anchor);
  if (!report.anchor) {
    offer.set_has_base(true);
    offer.set_base_version(job.version - 1);
  }
  for (const auto& t : writer_->head_manifest()->tensors()) {
    proto::TensorChecksum& c = *offer.add_checksums();
    c.set_name(t.name());
    c.set_checksum(t.checksum());
  }
  offer.set_stored_bytes(report.stored_bytes);
  offer.set_published_unix_us(started_unix);
  offer.set_journal_id(writer_->head()->journal_id());
  // For the benches: this process's peak RSS so far and the bytes of the registered tensors.
  uint64_t model_bytes = 0;
  for (const auto& t : tensors_) model_bytes += t.numel() * t.element_size();
  offer.set_model_bytes(model_bytes);
  offer.set_peak_rss_bytes(process_peak_rss_bytes());
  if (report.delta) {
    // Every path shares the one delta (never writing it) for as long as it serves it.
    const auto delta = std::make_shared<const DeltaInMemory>(std::move(*report.delta));
    report.delta.reset();
    for (const auto& path : live_) {
      auto descriptor = path->serve(job.version, delta);
      if (!descriptor.ok()) {
        if (options_.log) {
          options_.log("publisher: version " + std::to_string(job.version) + " not served over " +
                       path->name() + ": " + descriptor.status().message());
        }
      } else if (!descriptor->empty()) {
        (*offer.mutable_live_descriptors())[path->name()] = std::move(descriptor).value();
      }
    }
  }
  offer.set_publish_us(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                 std::chrono::steady_clock::now() - started)
                                                 .count()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    head_ = job.version;
    if (report.anchor) head_anchor_ = job.version;
  }
  credit_->offered(job.version);
  if (options_.before_offer) options_.before_offer(job.version);
  link_->send(std::move(e));
  job.report = std::move(report);
  return ok_status();
}

bool Publisher::serves(std::string_view path) const {
  return std::any_of(live_.begin(), live_.end(), [&](const auto& p) { return p->name() == path; });
}

void Publisher::close_live_path_for_test(std::string_view path) {
  for (const auto& p : live_) {
    if (p->name() == path) p->shutdown();  // set once in start(); each side serializes itself
  }
}

}  // namespace weightcast
