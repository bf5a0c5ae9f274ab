// `weightcast bench ucx`: part-fetch bandwidth of the UCX backend against UCX's own
// ucx_perftest (`-t ucp_get`), same transports (UCX_TLS), same message size, same run, on
// loopback.
//  * weightcast: a UcxPublisherTransport in a forked process publishes one part per size
//    (version 1, rendezvous through a FileStore in a temp directory), from its own buffers or
//    from copies (UcxPublisherOptions::Memory); this process copies the version blob into a
//    store of its own, as a live subscriber holds the blob of its Offer, and times
//    `iterations` back-to-back UcxSubscriberTransport::fetch calls of a part into a
//    page-aligned buffer (as perftest's) after `warmup` untimed ones. A fetch is what a
//    subscriber pays: the blob lookup, the chunked gets (or loads from the mapping) and the
//    XXH3 verification of the whole part.
//  * perftest: a ucx_perftest server and client (bench/drivers/ucx_perftest.h), `-n iterations -w
//    warmup`, one get of the part's size per iteration.
// Both figures are GB/s (1e9 bytes per second); each case keeps the best of `repetitions`
// interleaved runs of each side, and ratio = weightcast / perftest.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/base/status.h"

namespace weightcast {

struct UcxBenchmarkConfig {
  std::vector<std::string> tls = {"shm", "tcp"};  // one UCX_TLS value per case group
  std::vector<uint64_t> part_bytes = {uint64_t{1} << 20, uint64_t{16} << 20, uint64_t{64} << 20};
  // Timed fetches (and perftest iterations) per run; 0 picks ~1 GiB per run, 16 to 1024.
  uint64_t iterations = 0;
  int repetitions = 3;   // interleaved runs of each side per case; the best is kept
  std::string perftest;  // ucx_perftest's path; empty: found on PATH
  // The subscriber's get pipeline (UcxSubscriberOptions); 0 keeps the transport's default.
  size_t chunk_bytes = 0;
  size_t max_in_flight = 0;
  size_t mapped_chunk_bytes = 0;  // chunks read by loads from a mapped part (copy)
  // The publisher's UcxPublisherOptions::memory, one case group each: "in_place" (its
  // buffers mapped where they are) and "copy" (copies in a shared segment, shared_segment.h).
  std::vector<std::string> publisher_memory = {"in_place", "copy"};
  // Across a network link: the publisher (and perftest's server) run in the network
  // namespace `publisher_netns` (a name under /var/run/netns, as `ip netns` makes), reached at
  // `publisher_address`; this process, the subscriber, stays where it runs. Empty: loopback.
  std::string publisher_netns;
  std::string publisher_address;
  std::function<void(const std::string&)> log;  // progress lines, if set
};

// One JSON object: the configuration and "cases": [{tls, publisher_memory, subscriber_reads
// ("loads" from a mapping or "gets"), part_bytes, iterations,
// warmup, weightcast_gbps, perftest_gbps, ratio, weightcast_gbps_runs, perftest_gbps_runs}]. Errors
// name the transport, size and side (publisher process, fetch, ucx_perftest) at fault.
Result<nlohmann::json> run_ucx_benchmark(const UcxBenchmarkConfig& config);

}  // namespace weightcast
