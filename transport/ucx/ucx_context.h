// RAII owners of the UCP objects the UCX transport uses, and the one place UCX status codes
// become weightcast Statuses.
//
// Each transport object (publisher or subscriber) owns one UcxContext and one UcxWorker, so
// two objects in one process are as separate as two processes (the tests rely on that).
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/tensor_ref.h"  // MemoryKind
#include "transport/transport.h"

namespace weightcast {

// A UCX status as a Status: kIoError for transport failures (sticky under StickyError),
// kDeadlineExceeded for UCS_ERR_TIMED_OUT, kInternal for misuse.
Status ucx_status(ucs_status_t s, std::string_view what);

class UcxContext {
 public:
  // A context with the RMA feature. `tls`, when not empty, overrides UCX_TLS for this context
  // only (e.g. "shm", "tcp"); the rest of the configuration comes from the environment.
  static Result<std::unique_ptr<UcxContext>> create(const std::string& tls);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return context_; }
  // The memory types UCX detected (ucp_context_query): host always, cuda when its build has
  // CUDA support, e.g. "host, cuda".
  std::string detected_memory_types() const;

 private:
  explicit UcxContext(ucp_context_h context) : context_(context) {}
  ucp_context_h context_;
};

class UcxWorker {
 public:
  // UCS_THREAD_MODE_SERIALIZED: callers serialize every use of the worker themselves (the
  // publisher's progress thread and publish() share one under a mutex).
  static Result<std::unique_ptr<UcxWorker>> create(const UcxContext& context);
  ~UcxWorker();
  // Progresses the worker until every endpoint's outstanding messages are sent, or until
  // `deadline`. UCX 1.13 aborts the process (an assertion in ucp_request_send_state_ff, "got
  // REP message") when a worker is destroyed while a wireup reply to a peer still waits in an
  // endpoint's pending queue, as happens with a peer on a slow link that connected just
  // before; flushing first lets those go. It also answers gets that arrive meanwhile, so the
  // memory they read must still be mapped.
  void flush(Deadline deadline);
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h get() const { return worker_; }
  // The bytes a peer passes to ucp_ep_create to reach this worker.
  Result<std::vector<uint8_t>> address() const;

 private:
  explicit UcxWorker(ucp_worker_h worker) : worker_(worker) {}
  ucp_worker_h worker_;
};

// A context and its one worker: what every UCX publisher or subscriber object starts from.
struct UcxContextAndWorker {
  std::unique_ptr<UcxContext> context;
  std::unique_ptr<UcxWorker> worker;
};
Result<UcxContextAndWorker> create_ucx_context_and_worker(const std::string& tls);

// The TransportInfo of a UCX publisher or subscriber whose setup ended in `init_error` with
// `context` (null when it failed before creating one).
TransportInfo ucx_transport_info(const UcxContext& context);

// Drives `worker` until `request` (a ucp_*_nbx result: null, an error or a request) completes,
// then frees it. When `deadline` passes first, the request is cancelled (ucp_request_cancel),
// `abort` runs (RMA requests ignore cancel: the caller force-closes their endpoint there, which
// completes them with UCS_ERR_CANCELED) and the worker is progressed until UCX releases the
// request, so no buffer is still in use when this returns kDeadlineExceeded. Should UCX not
// release it within kUcxReleaseGrace, the request is leaked and kInternal returned.
inline constexpr std::chrono::seconds kUcxReleaseGrace{10};
Status ucx_wait(ucp_worker_h worker, ucs_status_ptr_t request, Deadline deadline,
                std::string_view what, const std::function<void()>& abort = {});

}  // namespace weightcast
