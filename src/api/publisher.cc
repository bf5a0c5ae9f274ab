// The public Publisher, PublishHandle and Step over src/endpoint/publisher.h.
#include "weightcast/publisher.h"

#include <utility>

#include "src/api/conversions.h"
#include "src/endpoint/publish_step.h"
#include "src/endpoint/publisher.h"

namespace weightcast::api {

namespace in = ::weightcast;

struct Publisher::Impl {
  std::unique_ptr<in::Publisher> publisher;
  std::string journal_root;
};

struct PublishHandle::Impl {
  in::PublishHandle handle;
};

struct Step::Impl {
  std::shared_ptr<in::PublishStep> step;
};

namespace {

Status empty_handle() {
  return Status(StatusCode::kFailedPrecondition, "empty publish handle");
}

PublishReport report_from_internal(const in::PublishReport& r) {
  PublishReport out;
  out.version = r.version;
  out.anchor = r.anchor;
  out.why_anchor = r.why_anchor;
  out.changed_tensors = r.changed_tensors;
  out.changed_elements = r.changed_elements;
  out.stored_bytes = r.stored_bytes;
  out.seconds = r.seconds;
  return out;
}

}  // namespace

// PublishHandle

PublishHandle::PublishHandle() = default;
PublishHandle::PublishHandle(const PublishHandle& other)
    : impl_(other.impl_ ? std::make_unique<Impl>(*other.impl_) : nullptr) {}
PublishHandle& PublishHandle::operator=(const PublishHandle& other) {
  if (this != &other) impl_ = other.impl_ ? std::make_unique<Impl>(*other.impl_) : nullptr;
  return *this;
}
PublishHandle::PublishHandle(PublishHandle&&) noexcept = default;
PublishHandle& PublishHandle::operator=(PublishHandle&&) noexcept = default;
PublishHandle::~PublishHandle() = default;

uint64_t PublishHandle::version() const {
  return impl_ ? impl_->handle.version() : 0;
}

Status PublishHandle::wait_for_reads(Deadline deadline) const {
  if (!impl_) return empty_handle();
  return from_internal(impl_->handle.wait_for_reads(deadline));
}

Result<PublishReport> PublishHandle::wait_published(Deadline deadline) const {
  if (!impl_) return empty_handle();
  auto report = impl_->handle.wait_published(deadline);
  if (!report.ok()) return from_internal(report.status());
  return report_from_internal(*report);
}

Status PublishHandle::wait_committed(Deadline deadline) const {
  if (!impl_) return empty_handle();
  return from_internal(impl_->handle.wait_committed(deadline));
}

// Step

Step::Step(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Step::Step(Step&&) noexcept = default;
Step& Step::operator=(Step&&) noexcept = default;
Step::~Step() = default;

uint64_t Step::version() const {
  return impl_ && impl_->step ? impl_->step->version() : 0;
}

Status Step::write(const TensorRef& live_view, const TensorRef& new_values) {
  if (!impl_ || !impl_->step) {
    return Status(StatusCode::kFailedPrecondition,
                  "tensor '" + live_view.name + "': write to a step that was moved or published");
  }
  return from_internal(impl_->step->write(to_internal(live_view), to_internal(new_values)));
}

StepProgress Step::progress() const {
  if (!impl_ || !impl_->step) return {};
  const in::StepProgress p = impl_->step->progress();
  StepProgress out;
  out.elements_written = p.elements_written;
  out.elements_total = p.elements_total;
  out.changed_elements = p.changed_elements;
  out.pending_chunks = p.pending_chunks;
  return out;
}

// Publisher

Publisher::Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Publisher::~Publisher() = default;  // the internal publisher stops itself

Result<std::unique_ptr<Publisher>> Publisher::start(const std::string& config_path, uint32_t rank,
                                                    PublisherOptions options) {
  auto config = load_config_for_role(config_path, rank, proto::ROLE_PUBLISHER);
  if (!config.ok()) return from_internal(config.status());
  in::PublisherOptions po;
  po.rank = rank;
  po.threads = options.threads;
  po.credit_timeout = options.credit_timeout;
  po.log = std::move(options.log);
  auto started = in::Publisher::start(*config, std::move(po));
  if (!started.ok()) return from_internal(started.status());
  auto impl = std::make_unique<Impl>();
  impl->publisher = std::move(started).value();
  impl->journal_root = config->journal_root();
  return std::unique_ptr<Publisher>(new Publisher(std::move(impl)));
}

Status Publisher::register_tensor(const TensorRef& ref, TensorUpdates updates) {
  const auto mode =
      updates == TensorUpdates::kHooked ? in::TensorUpdates::kHooked : in::TensorUpdates::kSnapshot;
  return from_internal(impl_->publisher->register_tensor(to_internal(ref), mode));
}

Result<PublishHandle> Publisher::publish(uint64_t version, bool force_anchor) {
  auto queued = impl_->publisher->publish(version, force_anchor);
  if (!queued.ok()) return from_internal(queued.status());
  PublishHandle handle;
  handle.impl_ = std::make_unique<PublishHandle::Impl>(PublishHandle::Impl{*queued});
  return handle;
}

Result<Step> Publisher::begin_step(uint64_t version, bool force_anchor) {
  auto begun = impl_->publisher->begin_step(version, force_anchor);
  if (!begun.ok()) return from_internal(begun.status());
  return Step(std::make_unique<Step::Impl>(Step::Impl{std::move(begun).value()}));
}

Result<PublishHandle> Publisher::publish_step(Step step) {
  if (!step.impl_ || !step.impl_->step) {
    return Status(StatusCode::kFailedPrecondition, "publish_step of a moved or published step");
  }
  auto queued = impl_->publisher->publish_step(std::move(step.impl_->step));
  if (!queued.ok()) return from_internal(queued.status());
  PublishHandle handle;
  handle.impl_ = std::make_unique<PublishHandle::Impl>(PublishHandle::Impl{*queued});
  return handle;
}

std::optional<uint64_t> Publisher::head() const {
  return impl_->publisher->head();
}

std::optional<uint64_t> Publisher::committed() const {
  return impl_->publisher->committed();
}

Status Publisher::wait_committed(uint64_t version, Deadline deadline) const {
  return from_internal(impl_->publisher->wait_committed(version, deadline));
}

bool Publisher::serves(std::string_view path) const {
  return impl_->publisher->serves(path);
}

const std::string& Publisher::journal_root() const {
  return impl_->journal_root;
}

void Publisher::stop(const std::string& reason) {
  impl_->publisher->stop(reason);
}

}  // namespace weightcast::api
