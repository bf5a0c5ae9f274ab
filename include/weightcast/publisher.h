// The publisher a trainer embeds: register the model's tensors once, then publish(version)
// after every optimizer step (or, for hooked tensors, begin_step / publish_step).
//
//   auto publisher = weightcast::api::Publisher::start("group.yaml", rank);
//   publisher->register_tensor(ref);                       // every published tensor, once
//   auto handle = publisher->publish(v);                   // returns at once
//   handle->wait_for_reads(deadline);                      // the trainer may change weights
//   handle->wait_committed(deadline);                      // every live subscriber acked v
//
// publish() queues the version; a worker waits for the group's back-pressure (at most the
// config's max_in_flight versions uncommitted), reads the tensors, writes the version to the
// journal (a delta against the previous version, or an anchor), serves it on the group's live
// paths and offers it to the coordinator. Versions must increase; an error leaves the journal
// on the previous version. A publisher restarted on an existing journal continues from its
// head (head()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "weightcast/deadline.h"
#include "weightcast/status.h"
#include "weightcast/step.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

struct PublisherOptions {
  size_t threads = 0;  // encode and write threads (0: the hardware's concurrency)
  // How long a publication waits for the group to commit older versions (0: twice the
  // config's ack timeout).
  std::chrono::milliseconds credit_timeout{0};
  LogCallback log;
};

// What a publication wrote to the journal.
struct PublishReport {
  uint64_t version = 0;
  bool anchor = false;     // a full snapshot (else a delta)
  std::string why_anchor;  // empty for a delta
  uint64_t changed_tensors = 0;
  uint64_t changed_elements = 0;
  uint64_t stored_bytes = 0;  // bytes of the files written
  double seconds = 0;
};

// One queued publication. Copyable; every copy waits on the same publication. A handle must
// not outlive its Publisher.
class PublishHandle {
 public:
  PublishHandle();
  PublishHandle(const PublishHandle& other);
  PublishHandle& operator=(const PublishHandle& other);
  PublishHandle(PublishHandle&&) noexcept;
  PublishHandle& operator=(PublishHandle&&) noexcept;
  ~PublishHandle();

  uint64_t version() const;  // 0 for an empty handle
  // The registered tensors have been read for the last time (or the publication failed
  // before): the trainer may change them again.
  Status wait_for_reads(Deadline deadline) const;
  // Written to the journal and offered to the group.
  Result<PublishReport> wait_published(Deadline deadline) const;
  // Committed by the group: every live subscriber acked it with matching checksums.
  Status wait_committed(Deadline deadline) const;

 private:
  friend class Publisher;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Publisher {
 public:
  // Loads the group config (YAML; docs/CONFIG.md) at `config_path`, checks that `rank` is one
  // of its publisher ranks, opens the journal and connects to the coordinator (in the
  // background: a coordinator not up yet is no error).
  static Result<std::unique_ptr<Publisher>> start(const std::string& config_path, uint32_t rank,
                                                  PublisherOptions options = {});
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;
  ~Publisher();  // stop()

  // Before the first publication; names unique; host memory, or CUDA memory in builds with the
  // CUDA toolkit. Hooked tensors are published only through steps.
  Status register_tensor(const TensorRef& ref, TensorUpdates updates = TensorUpdates::kSnapshot);

  // Snapshot mode: the registered tensors now hold `version`. Refused when a tensor is hooked.
  Result<PublishHandle> publish(uint64_t version, bool force_anchor = false);

  // Hooked mode (step.h): opens the step whose writes make `version`. Waits (up to the credit
  // timeout) until the previous publication has read the tensors. One step at a time.
  Result<Step> begin_step(uint64_t version, bool force_anchor = false);
  // Queues the step's version: the guard runs, then it is published as publish() does.
  Result<PublishHandle> publish_step(Step step);

  std::optional<uint64_t> head() const;       // the last version in the journal
  std::optional<uint64_t> committed() const;  // the last version the group committed
  Status wait_committed(uint64_t version, Deadline deadline) const;
  // Whether versions are served on live path `path` ("ucx", "nccl").
  bool serves(std::string_view path) const;
  // The group's journal root (the config's journal.root resolved against its directory).
  const std::string& journal_root() const;

  // Finishes queued publications, leaves the group and disconnects. Idempotent.
  void stop(const std::string& reason = "publisher stopping");

 private:
  struct Impl;
  explicit Publisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast::api
