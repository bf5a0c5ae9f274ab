#include "transport/nccl/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <vector>

namespace weightcast::nccl {
namespace {

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* f = std::getenv("WEIGHTCAST_NCCL_LIBRARY"); f != nullptr && *f != '\0') {
    out.emplace_back(f);
  }
  out.emplace_back("libnccl.so.2");
  if (const char* dirs = std::getenv("WEIGHTCAST_NCCL_SEARCH"); dirs != nullptr) {
    std::stringstream in(dirs);
    for (std::string d; std::getline(in, d, ':');) {
      if (!d.empty()) out.push_back(d + "/nvidia/nccl/lib/libnccl.so.2");
    }
  }
  return out;
}

template <typename F>
bool resolve(void* handle, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

}  // namespace

Result<NcclLibrary> open_nccl_from(const std::vector<std::string>& paths) {
  std::string tried;
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why != nullptr ? why : "not loadable");
      continue;
    }
    NcclLibrary lib;
    lib.path = path;
    std::string missing;
    resolve(handle, "ncclGetVersion", &lib.get_version, &missing);
    resolve(handle, "ncclGetUniqueId", &lib.get_unique_id, &missing);
    resolve(handle, "ncclCommInitRankConfig", &lib.comm_init_rank_config, &missing);
    resolve(handle, "ncclCommGetAsyncError", &lib.comm_get_async_error, &missing);
    resolve(handle, "ncclCommAbort", &lib.comm_abort, &missing);
    resolve(handle, "ncclCommDestroy", &lib.comm_destroy, &missing);
    resolve(handle, "ncclCommFinalize", &lib.comm_finalize, &missing);
    resolve(handle, "ncclBroadcast", &lib.broadcast, &missing);
    resolve(handle, "ncclGetErrorString", &lib.error_string, &missing);
    resolve(handle, "ncclGetLastError", &lib.last_error, &missing);
    if (!missing.empty()) {
      dlclose(handle);
      tried += "\n  " + path + ": lacks " + missing + " (NCCL older than 2.14?)";
      continue;
    }
    if (lib.get_version(&lib.version) != ncclSuccess) {
      dlclose(handle);
      tried += "\n  " + path + ": ncclGetVersion failed";
      continue;
    }
    return lib;  // the handle stays open for the life of the process
  }
  return failed_precondition(
      "NCCL is not loadable here; set WEIGHTCAST_NCCL_LIBRARY to libnccl.so.2 or "
      "WEIGHTCAST_NCCL_SEARCH to a Python prefix holding nvidia/nccl/lib. Tried:" +
      tried);
}

std::string NcclLibrary::describe(const char* call, ncclResult_t r) const {
  std::string s = std::string(call) + ": " + (error_string != nullptr ? error_string(r) : "error") +
                  " (ncclResult " + std::to_string(static_cast<int>(r)) + ")";
  if (last_error != nullptr) {
    const char* detail = last_error(nullptr);
    if (detail != nullptr && *detail != '\0') s += ": " + std::string(detail);
  }
  return s;
}

Result<const NcclLibrary*> load_nccl() {
  static std::once_flag once;
  static Result<NcclLibrary>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<NcclLibrary>(open_nccl_from(candidates())); });
  if (!loaded->ok()) return loaded->status();
  return &loaded->value();
}

}  // namespace weightcast::nccl
