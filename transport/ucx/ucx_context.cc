#include "transport/ucx/ucx_context.h"

#include <cstdlib>
#include <thread>

namespace weightcast {

Status ucx_status(ucs_status_t s, std::string_view what) {
  if (s == UCS_OK) return ok_status();
  std::string m = std::string(what) + ": " + ucs_status_string(s);
  switch (s) {
    case UCS_ERR_TIMED_OUT:
      return deadline_exceeded(std::move(m));
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED:
    case UCS_ERR_NO_MEMORY:
      return internal_error(std::move(m));
    default:
      return io_error(std::move(m));
  }
}

Result<std::unique_ptr<UcxContext>> UcxContext::create(const std::string& tls) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return ucx_status(s, "ucp_config_read");
  if (!tls.empty()) {
    s = ucp_config_modify(config, "TLS", tls.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return ucx_status(s, "ucp_config_modify(TLS=" + tls + ")");
    }
  }
  // The transport's endpoints use UCP_ERR_HANDLING_MODE_PEER (a dead publisher must fail a
  // fetch, not hang it); UCX 1.13 excludes the shared-memory transports from that mode unless
  // their error handling is switched on (UCX_{SYSV,POSIX}_ERROR_HANDLING), which leaves no
  // shm transport at all. Through ucp_config_modify the key is the mm base table's
  // "MM_ERROR_HANDLING" ("SYSV_ERROR_HANDLING" is accepted, then rejected by the worker), and
  // only when shm may load (otherwise the worker warns about an unused key). Shm peer failures
  // are found by keepalive only, every 20 s by default: 1 s keeps a fetch from a dead
  // publisher short, for one small message per endpoint and second.
  std::vector<std::pair<const char*, const char*>> settings;
  bool shm_may_load = tls.empty();
  for (const char* name : {"shm", "sm", "mm", "sysv", "posix", "all"}) {
    shm_may_load = shm_may_load || tls.find(name) != std::string::npos;
  }
  if (shm_may_load) settings.emplace_back("MM_ERROR_HANDLING", "y");
  // The user's UCX_KEEPALIVE_INTERVAL wins (a slow or lossy network needs a longer one).
  if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    settings.emplace_back("KEEPALIVE_INTERVAL", "1s");
  }
  for (const auto& [name, value] : settings) {
    s = ucp_config_modify(config, name, value);
    if (s != UCS_OK) {
      ucp_config_release(config);
      return ucx_status(s, std::string("ucp_config_modify(") + name + "=" + value + ")");
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    return ucx_status(s, "ucp_init" + (tls.empty() ? std::string() : " with UCX_TLS=" + tls));
  }
  return std::unique_ptr<UcxContext>(new UcxContext(context));
}

UcxContext::~UcxContext() {
  ucp_cleanup(context_);
}

std::string UcxContext::detected_memory_types() const {
  std::string types = "host";
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) == UCS_OK &&
      (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0) {
    types += ", cuda";
  }
  return types;
}

Result<std::unique_ptr<UcxWorker>> UcxWorker::create(const UcxContext& context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  const ucs_status_t s = ucp_worker_create(context.get(), &params, &worker);
  if (s != UCS_OK) return ucx_status(s, "ucp_worker_create");
  return std::unique_ptr<UcxWorker>(new UcxWorker(worker));
}

UcxWorker::~UcxWorker() {
  ucp_worker_destroy(worker_);
}

void UcxWorker::flush(Deadline deadline) {
  ucp_request_param_t param{};
  (void)ucx_wait(worker_, ucp_worker_flush_nbx(worker_, &param), deadline,
                 "ucx: flush before the worker is destroyed");
}

Result<std::vector<uint8_t>> UcxWorker::address() const {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  const ucs_status_t s = ucp_worker_get_address(worker_, &address, &length);
  if (s != UCS_OK) return ucx_status(s, "ucp_worker_get_address");
  const auto* bytes = reinterpret_cast<const uint8_t*>(address);
  std::vector<uint8_t> out(bytes, bytes + length);
  ucp_worker_release_address(worker_, address);
  return out;
}

Status ucx_wait(ucp_worker_h worker, ucs_status_ptr_t request, Deadline deadline,
                std::string_view what, const std::function<void()>& abort) {
  if (request == nullptr) return ok_status();
  if (UCS_PTR_IS_ERR(request)) return ucx_status(UCS_PTR_STATUS(request), what);
  ucs_status_t s = UCS_INPROGRESS;
  while ((s = ucp_request_check_status(request)) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() <= deadline) {
    if (ucp_worker_progress(worker) == 0) std::this_thread::yield();
  }
  if (s != UCS_INPROGRESS) {
    ucp_request_free(request);
    return ucx_status(s, what);
  }
  ucp_request_cancel(worker, request);
  if (abort) abort();
  const auto give_up = std::chrono::steady_clock::now() + kUcxReleaseGrace;
  while (ucp_request_check_status(request) == UCS_INPROGRESS) {
    if (std::chrono::steady_clock::now() > give_up) {
      return internal_error(std::string(what) + ": deadline passed and UCX did not release the " +
                            "cancelled request (leaked)");
    }
    ucp_worker_progress(worker);
  }
  ucp_request_free(request);
  return deadline_exceeded(std::string(what) + ": deadline passed");
}

Result<UcxContextAndWorker> create_ucx_context_and_worker(const std::string& tls) {
  UcxContextAndWorker out;
  ASSIGN_OR_RETURN(out.context, UcxContext::create(tls));
  ASSIGN_OR_RETURN(out.worker, UcxWorker::create(*out.context));
  return out;
}

TransportInfo ucx_transport_info(const UcxContext& context) {
  TransportInfo info;
  info.name = "ucx";
  // Host memory only, whatever UCX could move: both sides hash parts on the CPU (the
  // publisher's checksum, the subscriber's verification and its reads by loads), so a device
  // pointer would be dereferenced. Device tensors are staged to host by the caller.
  info.memory_kinds = {MemoryKind::kHost, MemoryKind::kHostPinned};
  info.notes = "UCX detected memory types: " + context.detected_memory_types() +
               "; parts are read and verified in host memory";
  return info;
}

}  // namespace weightcast
