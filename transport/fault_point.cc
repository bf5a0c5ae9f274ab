#include "transport/fault_point.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace weightcast {

void fault_point(const char* name, uint64_t version) {
  static const char* const wanted = std::getenv("WEIGHTCAST_STOP_AT");
  if (wanted == nullptr) return;
  const std::string here = std::string(name) + ":" + std::to_string(version);
  if (here != wanted) return;
  std::fprintf(stderr, "weightcast: stopping at fault point %s (WEIGHTCAST_STOP_AT)\n",
               here.c_str());
  std::fflush(stderr);
  ::raise(SIGSTOP);
}

}  // namespace weightcast
