#include "transport/nccl/nccl_communicator.h"

#include "transport/nccl/cuda_status.h"

#include <thread>

namespace weightcast::nccl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::microseconds(50);

}  // namespace

Result<ncclUniqueId> NcclCommunicator::make_id() {
  ASSIGN_OR_RETURN(const NcclLibrary* lib, load_nccl());
  ncclUniqueId id{};
  const ncclResult_t r = lib->get_unique_id(&id);
  if (r != ncclSuccess) return io_error("nccl: " + lib->describe("ncclGetUniqueId", r));
  return id;
}

std::string NcclCommunicator::who() const {
  return "nccl rank " + std::to_string(rank_) + " of " + std::to_string(ranks_) +
         " (cuda:" + std::to_string(device_) + ")";
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::join(
    const ncclUniqueId& id, int ranks, int rank, int device, std::chrono::milliseconds deadline) {
  ASSIGN_OR_RETURN(const NcclLibrary* lib, load_nccl());
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->lib_ = lib;
  c->rank_ = rank;
  c->ranks_ = ranks;
  c->device_ = device;
  if (ranks <= 0 || rank < 0 || rank >= ranks) {
    return invalid_argument(c->who() + ": rank outside the communicator");
  }
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return cuda_failed(c->who(), "cudaSetDevice", e);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = lib->comm_init_rank_config(&c->comm_, ranks, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (c->comm_ != nullptr) lib->comm_abort(c->comm_);
    c->comm_ = nullptr;
    return io_error(c->who() + ": " + lib->describe("ncclCommInitRankConfig", r));
  }
  RETURN_IF_ERROR(c->settle("ncclCommInitRankConfig", Clock::now() + deadline));
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  if (take_abort_request()) return;  // asked to abort: no finalize, which could wait on peers
  cudaSetDevice(device_);
  // A healthy communicator is finalized (flushes outstanding work) then destroyed; one that
  // does not settle within a few seconds is aborted instead of hanging the destructor.
  const ncclResult_t r = lib_->comm_finalize(comm_);
  if ((r == ncclSuccess || r == ncclInProgress) &&
      settle("ncclCommFinalize", Clock::now() + std::chrono::seconds(5)).ok()) {
    lib_->comm_destroy(comm_);
    comm_ = nullptr;
    return;
  }
  abort("destroyed");
}

void NcclCommunicator::abort(const std::string& why) {
  if (failure_.ok()) failure_ = io_error(who() + ": communicator aborted: " + why);
  if (comm_ == nullptr) return;
  cudaSetDevice(device_);
  lib_->comm_abort(comm_);
  comm_ = nullptr;
}

void NcclCommunicator::request_abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(request_mu_);
  if (abort_requested_.load(std::memory_order_relaxed)) return;  // the first reason wins
  request_why_ = why;
  abort_requested_.store(true, std::memory_order_release);
}

bool NcclCommunicator::take_abort_request() {
  if (!abort_requested_.load(std::memory_order_acquire)) return false;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(request_mu_);
    why = request_why_;
  }
  abort(why);
  return true;
}

Status NcclCommunicator::settle(const std::string& what, Clock::time_point deadline) {
  for (;;) {
    if (take_abort_request()) return failure_;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = lib_->comm_get_async_error(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return ok_status();
    if (state != ncclInProgress) {
      abort(lib_->describe(what.c_str(), state));
      return failure_;
    }
    if (Clock::now() >= deadline) {
      abort(what + " did not complete before its deadline");
      return deadline_exceeded(failure_.message());
    }
    std::this_thread::sleep_for(kPoll);
  }
}

Status NcclCommunicator::enqueue_broadcast(void* buffer, size_t bytes, int root,
                                           cudaStream_t stream, cudaEvent_t done,
                                           Clock::time_point deadline) {
  if (comm_ != nullptr && take_abort_request()) return failure_;
  if (comm_ == nullptr) return failure_.ok() ? io_error(who() + ": no communicator") : failure_;
  if (root < 0 || root >= ranks_) {
    return invalid_argument(who() + ": broadcast root " + std::to_string(root) +
                            " is outside the communicator");
  }
  if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return cuda_failed(who(), "cudaSetDevice", e);
  }
  const ncclResult_t r = lib_->broadcast(buffer, buffer, bytes, ncclUint8, root, comm_, stream);
  if (r != ncclSuccess && r != ncclInProgress) {
    abort(lib_->describe("ncclBroadcast", r));
    return failure_;
  }
  RETURN_IF_ERROR(settle(
      "ncclBroadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root),
      deadline));
  if (const cudaError_t e = cudaEventRecord(done, stream); e != cudaSuccess) {
    return cuda_failed(who(), "cudaEventRecord", e);
  }
  return ok_status();
}

Status NcclCommunicator::wait(cudaEvent_t done, Clock::time_point deadline) {
  for (;;) {
    if (comm_ != nullptr) take_abort_request();
    if (comm_ == nullptr) return failure_;
    const cudaError_t e = cudaEventQuery(done);
    if (e == cudaSuccess) return ok_status();
    if (e != cudaErrorNotReady) {
      abort(std::string("cudaEventQuery: ") + cudaGetErrorString(e));
      return failure_;
    }
    ncclResult_t state = ncclSuccess;
    if (lib_->comm_get_async_error(comm_, &state) != ncclSuccess ||
        (state != ncclSuccess && state != ncclInProgress)) {
      abort(lib_->describe("asynchronous error", state));
      return failure_;
    }
    if (Clock::now() >= deadline) {
      abort("a broadcast did not complete before its deadline");
      return deadline_exceeded(failure_.message());
    }
    std::this_thread::sleep_for(kPoll);
  }
}

Status NcclCommunicator::broadcast(void* buffer, size_t bytes, int root, cudaStream_t stream,
                                   std::chrono::milliseconds deadline) {
  const auto until = Clock::now() + deadline;
  if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return cuda_failed(who(), "cudaSetDevice", e);
  }
  cudaEvent_t done = nullptr;
  if (const cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
      e != cudaSuccess) {
    return cuda_failed(who(), "cudaEventCreateWithFlags", e);
  }
  Status s = enqueue_broadcast(buffer, bytes, root, stream, done, until);
  if (s.ok()) s = wait(done, until);
  cudaEventDestroy(done);
  return s;
}

}  // namespace weightcast::nccl
