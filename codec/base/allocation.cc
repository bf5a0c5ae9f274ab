#include "codec/base/allocation.h"

#include <sys/resource.h>
#include <unistd.h>

#include <string>

namespace weightcast {

Status allocation_failure(uint64_t bytes, std::string_view what) {
  return out_of_range("cannot allocate " + std::to_string(bytes) + " bytes for " +
                      std::string(what) + " (out of memory)");
}

Result<std::vector<uint8_t>> allocate_bytes(size_t n, std::string_view what) {
  return allocate_or_status(n, what, [n] { return std::vector<uint8_t>(n); });
}

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

uint64_t process_peak_rss_bytes() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0 || usage.ru_maxrss <= 0) return 0;
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
}

}  // namespace weightcast
