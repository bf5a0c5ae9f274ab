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
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                     allocate_bytes(ref.numel() * ref.element_size(),
                                    "the subscriber's copy of tensor '" + ref.name + "'"));
    owned_.push_back(std::move(bytes));
    ref.data = owned_.back().data();
    RETURN_IF_ERROR(register_tensor(ref));
  }
  return ok_status();
}

}  // namespace weightcast
