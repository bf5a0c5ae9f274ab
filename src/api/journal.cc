// The public Journal over transport/fs (journal_layout.h, journal_files.h, catch_up_reader.h).
#include "weightcast/journal.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "codec/base/thread_pool.h"
#include "codec/delta_manifest.h"
#include "src/api/conversions.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast::api {

namespace in = ::weightcast;

struct Journal::Impl {
  std::string root;
  in::JournalLayout layout{""};
};

namespace {

// HEAD's version, or nullopt for a journal with nothing committed.
in::Result<std::optional<uint64_t>> read_head_version(const in::JournalLayout& layout) {
  auto head = in::read_head_file(layout.head());
  if (!head.ok()) return head.status();
  if (head->empty()) return std::optional<uint64_t>{};
  return std::optional<uint64_t>(head->version());
}

// `version`, or HEAD's; kNotFound when nothing is committed.
in::Result<uint64_t> resolve(const in::JournalLayout& layout, std::optional<uint64_t> version) {
  if (version) return *version;
  auto head = read_head_version(layout);
  if (!head.ok()) return head.status();
  if (!*head)
    return in::Status(in::StatusCode::kNotFound,
                      "journal '" + layout.root() + "' has no committed version yet");
  return **head;
}

}  // namespace

Journal::Journal(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Journal::~Journal() = default;

Result<std::unique_ptr<Journal>> Journal::open(const std::string& root) {
  auto impl = std::make_unique<Impl>();
  impl->root = root;
  impl->layout = in::JournalLayout(root);
  std::error_code ec;
  if (!std::filesystem::exists(impl->layout.head(), ec)) {
    return Status(StatusCode::kNotFound, "no journal at '" + root + "' (no HEAD file)");
  }
  auto head = in::read_head_file(impl->layout.head());
  if (!head.ok()) return from_internal(head.status());
  return std::unique_ptr<Journal>(new Journal(std::move(impl)));
}

const std::string& Journal::root() const {
  return impl_->root;
}

Result<std::optional<uint64_t>> Journal::head() const {
  auto head = read_head_version(impl_->layout);
  if (!head.ok()) return from_internal(head.status());
  return *head;
}

Result<std::vector<JournalVersion>> Journal::versions() const {
  auto head = read_head_version(impl_->layout);
  if (!head.ok()) return from_internal(head.status());
  std::vector<JournalVersion> out;
  if (!*head) return out;
  auto steps = impl_->layout.list_steps();
  if (!steps.ok()) return from_internal(steps.status());
  for (uint64_t v : *steps) {
    if (v > **head) break;  // written but not committed yet
    auto m = in::read_manifest_file(impl_->layout.manifest(v));
    // Retention may remove a step between the listing and the read.
    if (!m.ok() && m.status().code() == in::StatusCode::kNotFound) continue;
    if (!m.ok()) return from_internal(m.status());
    JournalVersion jv;
    jv.version = m->version();
    jv.anchor = m->kind() == proto::STEP_ANCHOR;
    jv.anchor_version = m->anchor_version();
    for (const auto& p : m->parts()) jv.stored_bytes += p.bytes();
    for (const auto& t : m->tensors()) jv.changed_tensors += jv.anchor || t.changed() ? 1 : 0;
    out.push_back(jv);
  }
  return out;
}

Result<std::vector<JournalTensor>> Journal::tensors(std::optional<uint64_t> version) const {
  auto v = resolve(impl_->layout, version);
  if (!v.ok()) return from_internal(v.status());
  auto m = in::read_manifest_file(impl_->layout.manifest(*v));
  if (!m.ok()) return from_internal(m.status());
  std::vector<JournalTensor> out;
  for (const auto& t : m->tensors()) {
    auto dtype = in::dtype_from_proto(t.dtype());
    if (!dtype.ok()) return from_internal(dtype.status());
    JournalTensor jt;
    jt.name = t.name();
    jt.dtype = static_cast<DType>(*dtype);
    jt.shape.assign(t.shape().begin(), t.shape().end());
    jt.checksum = t.checksum();
    out.push_back(std::move(jt));
  }
  return out;
}

Result<CatchUpResult> Journal::catch_up(const std::vector<TensorRef>& destinations,
                                        std::optional<uint64_t> version,
                                        std::optional<uint64_t> held, size_t threads) const {
  auto target = resolve(impl_->layout, version);
  if (!target.ok()) return from_internal(target.status());
  std::vector<in::ReaderDestination> dest;
  for (const auto& t : destinations) {
    if (t.memory == MemoryKind::kCuda) {
      return Status(StatusCode::kUnimplemented,
                    "tensor '" + t.name + "': Journal::catch_up writes host memory only");
    }
    in::ReaderDestination d;
    d.name = t.name;
    d.view = to_internal(t);
    d.dtype = d.view.dtype;
    d.shape = t.shape;
    dest.push_back(std::move(d));
  }
  in::ThreadPool pool(threads);
  in::CatchUpOptions options;
  options.pool = &pool;
  options.lease_holder = "journal-reader-" + std::to_string(::getpid());
  in::CatchUpReader reader(impl_->root, std::move(dest), options);
  if (held) (void)reader.adopt(*held);  // a mismatch leaves nothing held: an anchor is loaded
  auto report = reader.catch_up(*target);
  if (!report.ok()) return from_internal(report.status());
  CatchUpResult out;
  out.version = report->version;
  out.anchors_loaded = report->anchors_loaded;
  out.deltas_applied = report->deltas_applied;
  out.bytes_written = report->bytes_written;
  out.fallbacks = report->fallbacks;
  out.seconds = report->seconds;
  return out;
}

}  // namespace weightcast::api
