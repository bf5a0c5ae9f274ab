// NCCL, loaded at run time (dlopen) rather than linked: a GPU host's NCCL often comes from a
// Python wheel (nvidia-nccl-cu13) or another path than the build machine's, and a host
// without NCCL must still run everything else. Built only with the NCCL headers
// (WEIGHTCAST_HAVE_NCCL); the functions used are resolved once and checked.
//
// Where it looks: $WEIGHTCAST_NCCL_LIBRARY (a file), then libnccl.so.2 on the loader's path,
// then the nvidia-nccl wheel's lib/ under the Python prefixes listed in
// $WEIGHTCAST_NCCL_SEARCH (colon-separated folders holding nvidia/nccl/lib).
#pragma once

#include <nccl.h>

#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast::nccl {

struct NcclLibrary {
  std::string path;  // what was loaded
  int version = 0;   // ncclGetVersion: major * 10000 + minor * 100 + patch for 2.x
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommFinalize) comm_finalize = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGetLastError) last_error = nullptr;

  // "ncclBroadcast: unhandled cuda error (...)" for an NCCL result.
  std::string describe(const char* call, ncclResult_t r) const;
};

// The process's NCCL, loaded on first use (thread-safe); errors say where it looked.
Result<const NcclLibrary*> load_nccl();

// Loads the first of `paths` that is a usable NCCL (load_nccl's search, made testable); the
// handle is never closed.
Result<NcclLibrary> open_nccl_from(const std::vector<std::string>& paths);

}  // namespace weightcast::nccl
