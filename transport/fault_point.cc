#include "transport/fault_point.h"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace weightcast {

void fault_point(const char* name, uint64_t version) {
  static const char* const wanted = std::getenv("WEIGHTCAST_STOP_AT");
  static std::atomic<bool> stopped_once{false};
  if (wanted == nullptr) return;
  const std::string here = std::string(name) + ":" + std::to_string(version);
  if (here != wanted && std::string(name) + ":*" != wanted) return;
  if (stopped_once.exchange(true)) return;  // the first time only, whatever the version
  std::fprintf(stderr, "weightcast: stopping at fault point %s (WEIGHTCAST_STOP_AT)\n",
               here.c_str());
  std::fflush(stderr);
  ::raise(SIGSTOP);
}

}  // namespace weightcast
