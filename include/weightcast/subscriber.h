// The subscriber an inference engine embeds: register the engine's tensors (whole, or strided
// views of packed parameters; host or CUDA memory), connect, and versions arrive.
//
//   auto sub = weightcast::api::Subscriber::create("group.yaml", rank, options);
//   sub->register_tensor(ref);                  // every served tensor, before connect()
//   sub->connect();
//   sub->wait_for_version(v, deadline);
//
// Every version is applied in place in the engine's memory, only the changed elements written,
// and verified by checksum; a version is all or nothing (a tensor that fails after others were
// applied has them reverted). before_apply(v) and after_apply(held) bracket the only window in
// which the engine's memory differs from a verified version: an engine pauses generation
// there. after_apply names the version held when the window closes (v, or the previous one
// after a revert). A late or restarted engine catches up from the journal's newest anchor and
// the deltas since.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightcast/deadline.h"
#include "weightcast/status.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

struct SubscriberOptions {
  size_t threads = 0;  // apply threads (0: the hardware's concurrency)
  LogCallback log;
  // On the subscriber's worker thread, around every write into the engine's tensors:
  // before_apply(version being written), after_apply(version held now).
  std::function<void(uint64_t version)> before_apply;
  std::function<void(uint64_t held)> after_apply;
  // The version the engine's tensors already hold at connect() (loaded by the engine itself);
  // verified against the journal's checksums before it is trusted, else an anchor is loaded.
  std::optional<uint64_t> claimed_version;
};

struct SubscriberStats {
  uint64_t versions_applied = 0;
  uint64_t nacks = 0;
  uint64_t anchors_loaded = 0;
  uint64_t last_apply_us = 0;
  // Versions applied, by how they arrived: a live path's name ("ucx", "nccl") or "fs".
  std::map<std::string, uint64_t> versions_by_path;
  std::string last_transport;       // how the last applied version arrived
  uint64_t last_bytes_written = 0;  // into the engine's memory by the last attempt
  uint64_t bytes_written = 0;       // into the engine's memory in all (reverts included)
  bool claim_verified = false;      // claimed_version matched the journal's checksums
};

// A block of a tensor: an offset and a size along each dimension.
struct TensorBox {
  std::vector<int64_t> offsets, sizes;
};

class Subscriber {
 public:
  // Loads the group config (YAML; docs/CONFIG.md) at `config_path` and checks that `rank` is
  // one of its subscriber ranks. Nothing connects before connect().
  static Result<std::unique_ptr<Subscriber>> create(const std::string& config_path, uint32_t rank,
                                                    SubscriberOptions options = {});
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;
  ~Subscriber();  // stop()

  // Before connect(); names unique.
  Status register_tensor(const TensorRef& destination);
  // A rank whose group config names a layout (docs/CONFIG.md `layouts`) holds, of each tensor
  // that layout splits, only its part's slice: slice_of gives the box (offsets and sizes per
  // dimension of the tensor's global `shape`; the whole tensor when not split), and
  // register_slice registers a host destination holding that box's elements, row-major, with
  // the tensor's global shape. The rank then reads, applies and verifies only its slices.
  Result<TensorBox> slice_of(const std::string& name, const std::vector<int64_t>& shape) const;
  Status register_slice(const TensorRef& destination, const std::vector<int64_t>& global_shape);
  // For a rank without an engine: waits for the journal's head, then allocates and registers
  // a tensor for each of its tensors (tensors() lists them). `cancelled`, checked every
  // 100 ms, ends the wait early with kFailedPrecondition.
  Status register_from_journal(Deadline deadline, const std::function<bool()>& cancelled = {});

  // Starts the worker and joins the group.
  Status connect();

  std::optional<uint64_t> current_version() const;  // the verified version the tensors hold
  Status wait_for_version(uint64_t version, Deadline deadline) const;
  // The newest version the group committed to this rank: for a rank of an engine replica,
  // once every rank of its replica acked it (what the engine may serve).
  std::optional<uint64_t> committed_version() const;
  Status wait_committed(uint64_t version, Deadline deadline) const;
  SubscriberStats stats() const;
  // Set when the subscriber gave up for good (refused by the coordinator, say).
  std::optional<std::string> fatal_error() const;
  // The weightcast checksum of registered tensor i at current_version().
  uint64_t checksum(size_t i) const;
  std::vector<TensorRef> tensors() const;
  // The group's journal root (absolute; the config's journal.root resolved against the config
  // file's directory), for a reader of the same journal (journal.h).
  const std::string& journal_root() const;

  // Lets an apply in progress finish (it is then acked), leaves the group, disconnects.
  // Idempotent.
  void stop(const std::string& reason = "subscriber stopping");

 private:
  struct Impl;
  explicit Subscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast::api
