// Subscriber::register_from_journal: a rank without an engine (weightcastd) takes its
// tensors from the journal's head manifest, waiting for one to exist.
#include <filesystem>
#include <thread>

#include "codec/base/allocation.h"
#include "codec/delta_manifest.h"
#include "src/control/wait_reporter.h"
#include "src/endpoint/subscriber.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"
#include "transport/fs/step_commit.h"
#include "transport/tensor_staging.h"

namespace weightcast {

Status Subscriber::register_from_journal(EndpointDeadline deadline,
                                         const std::function<bool()>& cancelled) {
  if (config_.journal_root().empty()) {
    return invalid_argument("journal.root of the group config is empty: rank " +
                            std::to_string(options_.rank) +
                            " has no journal to take its tensors from");
  }
  const JournalLayout layout(config_.journal_root());
  WaitReporter waiting(options_.log);
  std::optional<proto::JournalHead> head;
  while (true) {
    auto read = read_journal_head(layout);
    if (read.ok() && *read) {
      head = std::move(**read);
      break;
    }
    std::error_code ec;
    const std::string why = !read.ok() ? read.status().message()
                            : !std::filesystem::is_directory(config_.journal_root(), ec)
                                ? "the directory does not exist (journal.root of the config)"
                                : "nothing published yet";
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded("no version in journal '" + layout.root() +
                               "' before the deadline: " + why);
    }
    if (cancelled && cancelled()) {
      return failed_precondition("stopped while waiting for journal '" + layout.root() + "'");
    }
    waiting.report("subscriber rank " + std::to_string(options_.rank) +
                   ": waiting for a version in journal '" + layout.root() + "': " + why);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSIGN_OR_RETURN(proto::StepManifest manifest,
                   read_manifest_file(layout.manifest(head->version())));
  for (const auto& t : manifest.tensors()) {
    ASSIGN_OR_RETURN(DType dtype, dtype_from_proto(t.dtype()));
    TensorRef ref;
    ref.name = t.name();
    ref.dtype = dtype;
    ref.shape.assign(t.shape().begin(), t.shape().end());
    // A rank of a layout holds only its slice of each tensor.
    ASSIGN_OR_RETURN(const TensorSlice slice, slice_of(ref.name, ref.shape));
    const std::vector<int64_t> global = ref.shape;
    const uint64_t held = slice_elements(global, slice);
    if (held != ref.numel()) ref.shape = {static_cast<int64_t>(held)};
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                     allocate_bytes(ref.numel() * ref.element_size(),
                                    "the subscriber's copy of tensor '" + ref.name + "'"));
    owned_.push_back(std::move(bytes));
    ref.data = owned_.back().data();
    RETURN_IF_ERROR(layout_rules_ ? register_slice(ref, global) : register_tensor(ref));
  }
  return ok_status();
}

Result<TensorSlice> Subscriber::slice_of(const std::string& name,
                                         const std::vector<int64_t>& shape) const {
  if (!layout_rules_) return TensorSlice::whole(shape);
  return layout_rules_->slice(rank_config_->layout(), name, shape, rank_config_->part());
}

Status Subscriber::register_slice(const TensorRef& destination,
                                  const std::vector<int64_t>& global_shape) {
  if (!layout_rules_) {
    return failed_precondition("tensor '" + destination.name + "': rank " +
                               std::to_string(options_.rank) +
                               " names no layout in the group config, so it holds whole "
                               "tensors (register_tensor)");
  }
  ASSIGN_OR_RETURN(const TensorSlice slice, slice_of(destination.name, global_shape));
  if (slice == TensorSlice::whole(global_shape)) {
    TensorRef whole = destination;
    if (destination.shape != global_shape) {
      if (!destination.is_contiguous() ||
          destination.numel() != slice_elements(global_shape, slice)) {
        return invalid_argument("tensor '" + destination.name + "': layout '" +
                                rank_config_->layout() +
                                "' holds it whole, and the destination is not the whole tensor");
      }
      whole.shape = global_shape;
      whole.strides.clear();
    }
    return register_tensor(whole);
  }
  if (destination.memory == MemoryKind::kCuda) {
    return invalid_argument("tensor '" + destination.name +
                            "': slices are held in host memory for now, not CUDA memory");
  }
  if (destination.numel() != slice_elements(global_shape, slice)) {
    return invalid_argument(
        "tensor '" + destination.name + "': the destination has " +
        std::to_string(destination.numel()) + " elements but slice " + describe_slice(slice) +
        " (part " + std::to_string(rank_config_->part()) + " of layout '" + rank_config_->layout() +
        "') holds " + std::to_string(slice_elements(global_shape, slice)));
  }
  return add_destination(destination, SliceDestination{global_shape, slice});
}

}  // namespace weightcast
