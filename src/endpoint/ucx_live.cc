#include "src/endpoint/ucx_live.h"

#include <utility>

#include "src/control/group_config.h"
#include "transport/fs/journal_files.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_UCX
#include "transport/ucx/rendezvous_store.h"
#include "transport/ucx/ucx_transport.h"
#endif

namespace weightcast {

bool ucx_built() {
  return WEIGHTCAST_HAVE_UCX != 0;
}

Status check_live_delta_parts(const std::string& what, uint64_t version,
                              const proto::StepManifest& manifest,
                              const std::vector<std::string>& served) {
  if (manifest.version() != version ||
      static_cast<size_t>(manifest.parts_size()) + 1 != served.size()) {
    return data_loss(what + ": its manifest (version " + std::to_string(manifest.version()) + ", " +
                     std::to_string(manifest.parts_size()) + " parts) disagrees with the " +
                     std::to_string(served.size()) + " parts served");
  }
  for (size_t i = 1; i < served.size(); ++i) {
    if (served[i] != manifest.parts(static_cast<int>(i - 1)).file()) {
      return data_loss(what + ": served part '" + served[i] + "' is not the manifest's '" +
                       manifest.parts(static_cast<int>(i - 1)).file() + "'");
    }
  }
  return ok_status();
}

#if WEIGHTCAST_HAVE_UCX
namespace {

std::string describe_info(const TransportInfo& info, const std::string& tls) {
  std::string kinds;
  for (MemoryKind k : info.memory_kinds) {
    kinds += kinds.empty() ? "" : ", ";
    kinds += k == MemoryKind::kCuda         ? "cuda"
             : k == MemoryKind::kHostPinned ? "host-pinned"
                                            : "host";
  }
  return "ucx (UCX_TLS " + (tls.empty() ? std::string("chosen by UCX") : tls) +
         "; memory kinds: " + (kinds.empty() ? std::string("none") : kinds) +
         (info.notes.empty() ? std::string() : "; " + info.notes) + ")";
}

}  // namespace

std::string UcxLiveServer::describe() const {
  std::string d = describe_info(transport_->info(), tls_);
  d.insert(d.size() - 1, copies_ ? "; serving copies in shared memory" : "; serving in place");
  return d;
}

std::string UcxLiveFetcher::describe() const {
  return transport_ ? describe_info(transport_->info(), tls_) : "ucx (not connected)";
}

UcxLiveServer::~UcxLiveServer() {
  // The transport unmaps every served buffer before the bytes it maps are freed.
  transport_.reset();
}

Result<std::unique_ptr<UcxLiveServer>> UcxLiveServer::create(const std::string& tls,
                                                             const std::string& publisher_memory,
                                                             size_t keep_versions) {
  std::unique_ptr<UcxLiveServer> s(new UcxLiveServer());
  s->store_ = std::make_shared<InMemoryStore>();
  s->keep_versions_ = std::max<size_t>(1, keep_versions);
  s->tls_ = tls;
  s->copies_ = ucx_live_serves_copies(publisher_memory);
  UcxPublisherOptions options;
  options.store = s->store_;
  options.tls = tls;
  options.keep_versions = s->keep_versions_;
  options.memory = s->copies_ ? UcxPublisherOptions::Memory::kCopyToSharedMemory
                              : UcxPublisherOptions::Memory::kInPlace;
  s->transport_ = std::make_unique<UcxPublisherTransport>(std::move(options));
  const TransportInfo info = s->transport_->info();
  if (!info.viable) return failed_precondition("ucx: " + info.why_not_viable);
  return s;
}

Result<std::string> UcxLiveServer::serve(uint64_t version, DeltaInMemory delta) {
  if (delta.parts.size() != static_cast<size_t>(delta.manifest.parts_size())) {
    return invalid_argument("ucx serve of version " + std::to_string(version) + ": " +
                            std::to_string(delta.parts.size()) + " parts for a manifest of " +
                            std::to_string(delta.manifest.parts_size()));
  }
  Served served;
  served.version = version;
  served.manifest = frame_journal_message(JournalFileKind::kManifest, delta.manifest);
  served.parts = std::move(delta.parts);
  std::vector<PartPayload> payload;
  payload.push_back({kUcxManifestPart, served.manifest});
  for (size_t i = 0; i < served.parts.size(); ++i) {
    payload.push_back({delta.manifest.parts(static_cast<int>(i)).file(), served.parts[i]});
  }
  RETURN_IF_ERROR(transport_->publish(version, payload, deadline_in(std::chrono::seconds(30))));
  // In place, the transport retired its oldest version when this one made keep_versions + 1;
  // only now may that version's bytes be freed (the vectors moved above keep their buffers).
  // Copies need nothing kept.
  if (!copies_) served_.push_back(std::move(served));
  while (served_.size() > keep_versions_) served_.pop_front();
  auto blob = store_->get(ucx_version_key(version));
  if (!blob.ok()) return blob.status();
  if (!*blob) return internal_error("ucx: version " + std::to_string(version) + " left no blob");
  return std::string((*blob)->begin(), (*blob)->end());
}

void UcxLiveServer::close_for_test() {
  transport_->close_worker();
}

UcxLiveFetcher::~UcxLiveFetcher() = default;

Result<std::unique_ptr<UcxLiveFetcher>> UcxLiveFetcher::create(const std::string& tls) {
  std::unique_ptr<UcxLiveFetcher> f(new UcxLiveFetcher());
  f->tls_ = tls;
  RETURN_IF_ERROR(f->ensure_transport());
  return f;
}

Status UcxLiveFetcher::ensure_transport() {
  if (transport_) return ok_status();
  store_ = std::make_shared<InMemoryStore>();
  UcxSubscriberOptions options;
  options.store = store_;
  options.tls = tls_;
  auto transport = std::make_unique<UcxSubscriberTransport>(std::move(options));
  const TransportInfo info = transport->info();
  if (!info.viable) return failed_precondition("ucx: " + info.why_not_viable);
  transport_ = std::move(transport);
  return ok_status();
}

Result<FetchedDelta> UcxLiveFetcher::fetch(uint64_t version, const std::string& blob,
                                           std::chrono::steady_clock::time_point deadline) {
  RETURN_IF_ERROR(ensure_transport());
  const std::string what = "ucx version " + std::to_string(version);
  RETURN_IF_ERROR(store_->put(ucx_version_key(version), {blob.begin(), blob.end()}));
  auto result = [&]() -> Result<FetchedDelta> {
    ASSIGN_OR_RETURN(VersionDescriptor d, transport_->describe(version, deadline));
    if (d.parts.empty() || d.parts[0].name != kUcxManifestPart) {
      return data_loss(what + ": the blob's first part is not its " + kUcxManifestPart);
    }
    FetchedDelta out;
    std::vector<uint8_t> manifest(d.parts[0].bytes);
    RETURN_IF_ERROR(transport_->fetch(version, d.parts[0], manifest, deadline));
    ASSIGN_OR_RETURN(out.manifest, parse_manifest(manifest, what + " " + kUcxManifestPart));
    out.bytes_read = manifest.size();
    std::vector<std::string> served;
    for (const auto& p : d.parts) served.push_back(p.name);
    RETURN_IF_ERROR(check_live_delta_parts(what, version, out.manifest, served));
    for (size_t i = 1; i < d.parts.size(); ++i) {
      std::vector<uint8_t> bytes(d.parts[i].bytes);
      RETURN_IF_ERROR(transport_->fetch(version, d.parts[i], bytes, deadline));
      out.bytes_read += bytes.size();
      out.parts.push_back(std::move(bytes));
    }
    return out;
  }();
  (void)store_->erase(ucx_version_key(version));
  if (!result.ok() && (result.status().code() == StatusCode::kIoError ||
                       result.status().code() == StatusCode::kInternal)) {
    transport_.reset();  // sticky: a new connection for the next version
  }
  return result;
}

#else  // !WEIGHTCAST_HAVE_UCX

UcxLiveServer::~UcxLiveServer() = default;
Result<std::unique_ptr<UcxLiveServer>> UcxLiveServer::create(const std::string&, const std::string&,
                                                             size_t) {
  return Status(StatusCode::kUnimplemented,
                "ucx: this build has no UCX (libucx-dev was not found)");
}
Result<std::string> UcxLiveServer::serve(uint64_t, DeltaInMemory) {
  return Status(StatusCode::kUnimplemented, "ucx: this build has no UCX");
}
void UcxLiveServer::close_for_test() {}
std::string UcxLiveServer::describe() const {
  return "ucx (not built)";
}
std::string UcxLiveFetcher::describe() const {
  return "ucx (not built)";
}
UcxLiveFetcher::~UcxLiveFetcher() = default;
Result<std::unique_ptr<UcxLiveFetcher>> UcxLiveFetcher::create(const std::string&) {
  return Status(StatusCode::kUnimplemented,
                "ucx: this build has no UCX (libucx-dev was not found)");
}
Result<FetchedDelta> UcxLiveFetcher::fetch(uint64_t, const std::string&,
                                           std::chrono::steady_clock::time_point) {
  return Status(StatusCode::kUnimplemented, "ucx: this build has no UCX");
}
Status UcxLiveFetcher::ensure_transport() {
  return Status(StatusCode::kUnimplemented, "ucx: this build has no UCX");
}

#endif

}  // namespace weightcast
