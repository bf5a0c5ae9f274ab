// The public Subscriber over src/endpoint/subscriber.h.
#include "weightcast/subscriber.h"

#include <utility>

#include "src/api/conversions.h"
#include "src/endpoint/subscriber.h"

namespace weightcast::api {

namespace in = ::weightcast;

struct Subscriber::Impl {
  std::unique_ptr<in::Subscriber> subscriber;
  std::string journal_root;
};

Subscriber::Subscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Subscriber::~Subscriber() = default;  // the internal subscriber stops itself

Result<std::unique_ptr<Subscriber>> Subscriber::create(const std::string& config_path,
                                                       uint32_t rank, SubscriberOptions options) {
  auto config = load_config_for_role(config_path, rank, proto::ROLE_SUBSCRIBER);
  if (!config.ok()) return from_internal(config.status());
  in::SubscriberOptions so;
  so.rank = rank;
  so.threads = options.threads;
  so.log = std::move(options.log);
  so.before_apply = std::move(options.before_apply);
  so.after_apply = std::move(options.after_apply);
  so.claimed_version = options.claimed_version;
  auto created = in::Subscriber::create(*config, std::move(so));
  if (!created.ok()) return from_internal(created.status());
  auto impl = std::make_unique<Impl>();
  impl->subscriber = std::move(created).value();
  impl->journal_root = config->journal_root();
  return std::unique_ptr<Subscriber>(new Subscriber(std::move(impl)));
}

Status Subscriber::register_tensor(const TensorRef& destination) {
  return from_internal(impl_->subscriber->register_tensor(to_internal(destination)));
}

Result<TensorBox> Subscriber::slice_of(const std::string& name,
                                       const std::vector<int64_t>& shape) const {
  auto slice = impl_->subscriber->slice_of(name, shape);
  if (!slice.ok()) return from_internal(slice.status());
  return TensorBox{slice->offsets, slice->sizes};
}

Status Subscriber::register_slice(const TensorRef& destination,
                                  const std::vector<int64_t>& global_shape) {
  return from_internal(impl_->subscriber->register_slice(to_internal(destination), global_shape));
}

Status Subscriber::register_from_journal(Deadline deadline,
                                         const std::function<bool()>& cancelled) {
  return from_internal(impl_->subscriber->register_from_journal(deadline, cancelled));
}

Status Subscriber::connect() {
  return from_internal(impl_->subscriber->connect());
}

std::optional<uint64_t> Subscriber::current_version() const {
  return impl_->subscriber->current_version();
}

Status Subscriber::wait_for_version(uint64_t version, Deadline deadline) const {
  return from_internal(impl_->subscriber->wait_for_version(version, deadline));
}

std::optional<uint64_t> Subscriber::committed_version() const {
  return impl_->subscriber->committed_version();
}

Status Subscriber::wait_committed(uint64_t version, Deadline deadline) const {
  return from_internal(impl_->subscriber->wait_committed(version, deadline));
}

SubscriberStats Subscriber::stats() const {
  const in::SubscriberStats s = impl_->subscriber->stats();
  SubscriberStats out;
  out.versions_applied = s.versions_applied;
  out.nacks = s.nacks;
  out.anchors_loaded = s.anchors_loaded;
  out.last_apply_us = s.last_apply_us;
  out.versions_by_path = s.versions_by_path;
  out.last_transport = s.last_transport;
  out.last_bytes_written = s.last_bytes_written;
  out.bytes_written = s.bytes_written;
  out.claim_verified = s.claim_verified;
  return out;
}

std::optional<std::string> Subscriber::fatal_error() const {
  return impl_->subscriber->fatal_error();
}

uint64_t Subscriber::checksum(size_t i) const {
  return impl_->subscriber->checksum(i);
}

std::vector<TensorRef> Subscriber::tensors() const {
  std::vector<TensorRef> out;
  for (const auto& t : impl_->subscriber->tensors()) out.push_back(from_internal(t));
  return out;
}

const std::string& Subscriber::journal_root() const {
  return impl_->journal_root;
}

void Subscriber::stop(const std::string& reason) {
  impl_->subscriber->stop(reason);
}

}  // namespace weightcast::api
