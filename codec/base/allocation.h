// Model-sized allocations that fail as a Status instead of an exception.
//
// Contract: a buffer whose size comes from a user (a config's demo.parameters, a registered
// tensor's shape) is allocated through these functions, so that a size the host cannot hold
// is a kOutOfRange Status naming what was being allocated and how many bytes, never an
// uncaught std::bad_alloc that aborts the process. They catch std::bad_alloc and
// std::length_error only; whether the kernel later refuses to back the pages (overcommit,
// the OOM killer) is outside what a process can catch, which is why callers with a
// model-sized total also compare it with physical_memory_bytes() first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

// kOutOfRange "cannot allocate <bytes> bytes for <what> (out of memory)".
Status allocation_failure(uint64_t bytes, std::string_view what);

// `n` zeroed bytes, or allocation_failure(n, what).
Result<std::vector<uint8_t>> allocate_bytes(size_t n, std::string_view what);

// Installed RAM of this host in bytes (0 when the system does not say).
uint64_t physical_memory_bytes();

// This process's peak resident set size in bytes so far: getrusage(RUSAGE_SELF).ru_maxrss,
// which Linux gives in KiB (0 when the system does not say). What the benches report as a
// rank's peak RSS (`weightcast bench group`, docs/PERFORMANCE.md).
uint64_t process_peak_rss_bytes();

// Runs `make()` (which allocates `bytes` in all) and returns what it built, or
// allocation_failure(bytes, what) when it throws std::bad_alloc or std::length_error.
template <typename Make>
auto allocate_or_status(uint64_t bytes, std::string_view what, Make&& make)
    -> Result<decltype(make())> {
  try {
    return std::forward<Make>(make)();
  } catch (const std::bad_alloc&) {
    return allocation_failure(bytes, what);
  } catch (const std::length_error&) {
    return allocation_failure(bytes, what);
  }
}

}  // namespace weightcast
