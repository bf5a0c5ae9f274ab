#include "bench/drivers/ucx_benchmark.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <thread>

#include "bench/drivers/ucx_perftest.h"
#include "transport/ucx/ucx_transport.h"

namespace weightcast {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr uint64_t kVersion = 1;
constexpr uint64_t kMaxPartBytes = uint64_t{4} << 30;
constexpr int kChildNotViable = 3;
constexpr int kChildPublishFailed = 4;

std::string part_name(uint64_t bytes) {
  return "part-" + std::to_string(bytes);
}

std::string case_name(const std::string& tls, uint64_t bytes) {
  return "UCX_TLS=" + tls + ", " + std::to_string(bytes) + "-byte part";
}

// Fetches per timed run: as given, or enough for ~1 GiB (16 to 1024).
uint64_t iterations_for(uint64_t configured, uint64_t bytes) {
  if (configured > 0) return configured;
  return std::clamp<uint64_t>(((uint64_t{1} << 30) + bytes - 1) / bytes, 16, 1024);
}

// The publisher process: publishes version 1 with one part per size under UCX_TLS=`tls`,
// then keeps it readable until `release_fd` reaches EOF (the parent closed it, or died).
int run_publisher(const std::string& tls, UcxPublisherOptions::Memory memory,
                  const std::string& dir, const std::vector<uint64_t>& sizes, int release_fd,
                  const std::string& netns) {
  if (Status s = enter_network_namespace(netns); !s.ok()) {
    std::fprintf(stderr, "weightcast bench ucx: publisher: %s\n", s.to_string().c_str());
    return kChildPublishFailed;
  }
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<PartPayload> parts;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t bytes : sizes) {
    auto& b = buffers.emplace_back(bytes);
    for (auto& byte : b) byte = static_cast<uint8_t>((x += 0x9E3779B97F4A7C15ull) >> 56);
  }
  for (size_t i = 0; i < sizes.size(); ++i) parts.push_back({part_name(sizes[i]), buffers[i]});
  auto made = UcxPublisherTransport::create({std::make_shared<FileStore>(dir), tls, 1, memory});
  if (!made.ok()) {
    std::fprintf(stderr, "weightcast bench ucx: publisher with UCX_TLS=%s is not viable: %s\n",
                 tls.c_str(), made.status().message().c_str());
    return kChildNotViable;
  }
  UcxPublisherTransport& publisher = **made;
  if (Status s = publisher.publish(kVersion, parts, deadline_in(seconds(60))); !s.ok()) {
    std::fprintf(stderr, "weightcast bench ucx: publisher with UCX_TLS=%s: %s\n", tls.c_str(),
                 s.to_string().c_str());
    return kChildPublishFailed;
  }
  char c;
  while (::read(release_fd, &c, 1) < 0 && errno == EINTR) {
  }
  return 0;
}

// What a publisher process serves with: UCX_TLS and where it serves parts from.
struct Group {
  std::string tls;
  UcxPublisherOptions::Memory memory;
};

const char* memory_name(UcxPublisherOptions::Memory m) {
  return m == UcxPublisherOptions::Memory::kInPlace ? "in_place" : "copy";
}

// One forked publisher per group. All are forked before this process touches UCX, so
// each child starts from a clean UCX state (no inherited, dead async thread).
class Publishers {
 public:
  struct Process {
    std::string tls;
    std::string dir;  // the FileStore's directory (and perftest's scratch)
    pid_t pid = -1;
    int release_fd = -1;
  };

  Publishers() = default;
  Publishers(const Publishers&) = delete;
  Publishers& operator=(const Publishers&) = delete;
  ~Publishers() {
    for (size_t i = 0; i < procs_.size(); ++i) release(i);
  }

  // One publisher per group.
  Status start(const std::vector<Group>& groups, const std::vector<uint64_t>& sizes,
               const std::string& netns) {
    std::fflush(stdout);
    std::fflush(stderr);
    for (const auto& [t, memory] : groups) {
      Process& p = procs_.emplace_back();
      p.tls = t;
      std::string tmpl =
          (std::filesystem::temp_directory_path() / "weightcast-bench-ucx-XXXXXX").string();
      if (::mkdtemp(tmpl.data()) == nullptr) {
        return io_error("mkdtemp " + tmpl + " for the UCX_TLS=" + t +
                        " rendezvous: " + std::strerror(errno));
      }
      p.dir = tmpl;
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0)
        return io_error(std::string("pipe: ") + std::strerror(errno));
      p.pid = ::fork();
      if (p.pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        return io_error("fork of the UCX_TLS=" + t + " publisher: " + std::strerror(errno));
      }
      if (p.pid == 0) {
        // Earlier publishers must see EOF when the parent releases them, not wait on us.
        for (const auto& other : procs_) {
          if (other.release_fd >= 0) ::close(other.release_fd);
        }
        ::close(fds[1]);
        ::_exit(run_publisher(t, memory, p.dir, sizes, fds[0], netns));
      }
      ::close(fds[0]);
      p.release_fd = fds[1];
    }
    return ok_status();
  }

  // Waits until publisher i's version is in its store; an early exit is an error naming it.
  Status wait_published(size_t i, Clock::time_point deadline) {
    Process& p = procs_[i];
    FileStore store(p.dir);
    while (true) {
      ASSIGN_OR_RETURN(auto latest, store.get(kUcxLatestKey));
      if (latest) return ok_status();
      int status = 0;
      if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
        p.pid = -1;
        const bool not_viable = WIFEXITED(status) && WEXITSTATUS(status) == kChildNotViable;
        const std::string how = WIFEXITED(status)
                                    ? "exited with code " + std::to_string(WEXITSTATUS(status))
                                    : "was killed by signal " + std::to_string(WTERMSIG(status));
        return (not_viable ? failed_precondition
                           : io_error)("the UCX_TLS=" + p.tls + " publisher process " + how +
                                       " before publishing; see its message above");
      }
      if (Clock::now() > deadline) {
        return deadline_exceeded("the UCX_TLS=" + p.tls + " publisher did not publish in time");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Lets publisher i exit (SIGKILL after 10 s) and removes its directory. Idempotent.
  void release(size_t i) {
    Process& p = procs_[i];
    if (p.release_fd >= 0) ::close(p.release_fd);
    p.release_fd = -1;
    if (p.pid > 0) {
      const auto give_up = Clock::now() + seconds(10);
      while (::waitpid(p.pid, nullptr, WNOHANG) != p.pid) {
        if (Clock::now() > give_up) {
          ::kill(p.pid, SIGKILL);
          ::waitpid(p.pid, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      p.pid = -1;
    }
    if (!p.dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(p.dir, ignored);
      p.dir.clear();
    }
  }

  const Process& operator[](size_t i) const { return procs_[i]; }

 private:
  std::vector<Process> procs_;
};

// GB/s of `n` back-to-back fetches of `part` into `dest`.
Result<double> time_fetches(UcxSubscriberTransport& subscriber, const PartDescriptor& part,
                            std::span<uint8_t> dest, uint64_t n) {
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(subscriber.fetch(kVersion, part, dest, deadline_in(seconds(60))));
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(part.bytes) * static_cast<double>(n) / s / 1e9;
}

Status copy_store_entry(FileStore from, RendezvousStore& to, const std::string& key) {
  ASSIGN_OR_RETURN(auto value, from.get(key));
  if (!value) return internal_error("bench ucx: the publisher's store has no '" + key + "'");
  return to.put(key, std::move(*value));
}

Status check_config(const UcxBenchmarkConfig& c) {
  if (c.tls.empty()) return invalid_argument("bench ucx: no transport given (--tls)");
  for (const auto& t : c.tls) {
    if (t.empty() || t.find_first_of(" \t\n") != std::string::npos) {
      return invalid_argument("bench ucx: transport '" + t + "' is not a UCX_TLS value");
    }
  }
  if (c.part_bytes.empty()) return invalid_argument("bench ucx: no part size given (--sizes)");
  for (uint64_t b : c.part_bytes) {
    if (b == 0 || b > kMaxPartBytes) {
      return invalid_argument("bench ucx: part size " + std::to_string(b) + " is not in 1.." +
                              std::to_string(kMaxPartBytes));
    }
  }
  if (c.repetitions < 1) return invalid_argument("bench ucx: repetitions must be at least 1");
  if (c.publisher_memory.empty()) {
    return invalid_argument("bench ucx: no publisher memory given (--publisher-memory)");
  }
  for (const auto& m : c.publisher_memory) {
    if (m != "in_place" && m != "copy") {
      return invalid_argument("bench ucx: publisher memory '" + m + "' is not in_place or copy");
    }
  }
  return ok_status();
}

}  // namespace

Result<nlohmann::json> run_ucx_benchmark(const UcxBenchmarkConfig& c) {
  RETURN_IF_ERROR(check_config(c));
  ASSIGN_OR_RETURN(const std::string perftest, find_ucx_perftest(c.perftest));
  std::vector<uint64_t> sizes = c.part_bytes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  auto log = [&](const std::string& line) {
    if (c.log) c.log(line);
  };
  UcxSubscriberOptions defaults;
  const size_t chunk_bytes = c.chunk_bytes > 0 ? c.chunk_bytes : defaults.chunk_bytes;
  const size_t max_in_flight = c.max_in_flight > 0 ? c.max_in_flight : defaults.max_in_flight;
  const size_t mapped_chunk_bytes =
      c.mapped_chunk_bytes > 0 ? c.mapped_chunk_bytes : defaults.mapped_chunk_bytes;

  Publishers publishers;
  std::vector<Group> groups;
  for (const auto& tls : c.tls) {
    for (const auto& m : c.publisher_memory) {
      groups.push_back({tls, m == "in_place" ? UcxPublisherOptions::Memory::kInPlace
                                             : UcxPublisherOptions::Memory::kCopyToSharedMemory});
    }
  }
  if (c.publisher_netns.empty() != c.publisher_address.empty()) {
    return invalid_argument("bench ucx: --publisher-netns and --publisher-address go together");
  }
  RETURN_IF_ERROR(publishers.start(groups, sizes, c.publisher_netns));
  const std::string publisher_address =
      c.publisher_address.empty() ? PerftestRun{}.server_address : c.publisher_address;
  nlohmann::json cases = nlohmann::json::array();
  for (size_t t = 0; t < groups.size(); ++t) {
    const std::string& tls = groups[t].tls;
    const char* memory = memory_name(groups[t].memory);
    RETURN_IF_ERROR(publishers.wait_published(t, deadline_in(seconds(120))));
    UcxSubscriberOptions options;
    // As a live subscriber does with the blob its Offer carries (src/endpoint/ucx_live.h): the
    // blob in a store of this process, so that a fetch pays no file read.
    auto local = std::make_shared<InMemoryStore>();
    RETURN_IF_ERROR(
        copy_store_entry(FileStore(publishers[t].dir), *local, ucx_version_key(kVersion)));
    options.store = local;
    options.tls = tls;
    options.chunk_bytes = chunk_bytes;
    options.max_in_flight = max_in_flight;
    options.mapped_chunk_bytes = mapped_chunk_bytes;
    auto made = UcxSubscriberTransport::create(options);
    if (!made.ok()) {
      return failed_precondition("bench ucx: a subscriber with UCX_TLS=" + tls +
                                 " is not viable here: " + made.status().message());
    }
    UcxSubscriberTransport& subscriber = **made;
    ASSIGN_OR_RETURN(const VersionDescriptor d,
                     subscriber.describe(kVersion, deadline_in(seconds(10))));
    auto reads_before = subscriber.read_counts();
    for (uint64_t bytes : sizes) {
      const std::string what = case_name(tls, bytes) + ", publisher memory " + memory;
      auto part = std::find_if(d.parts.begin(), d.parts.end(),
                               [&](const PartDescriptor& p) { return p.name == part_name(bytes); });
      if (part == d.parts.end()) {
        return internal_error("bench ucx: " + what + ": the publisher did not publish it");
      }
      const uint64_t iterations = iterations_for(c.iterations, bytes);
      const uint64_t warmup = std::max<uint64_t>(2, iterations / 10);
      // Page-aligned like perftest's (UCX-allocated) buffers, and zero-filled so that its pages
      // are faulted in before timing.
      const std::unique_ptr<uint8_t, decltype(&std::free)> buffer(
          static_cast<uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)),
          &std::free);
      if (!buffer) return internal_error("bench ucx: " + what + ": out of memory");
      const std::span<uint8_t> dest(buffer.get(), bytes);
      std::memset(dest.data(), 0, dest.size());
      for (uint64_t i = 0; i < warmup; ++i) {
        Status s = subscriber.fetch(kVersion, *part, dest, deadline_in(seconds(60)));
        if (!s.ok()) return s.with_context("bench ucx: " + what + ": warm-up fetch");
      }
      std::vector<double> ours, theirs;
      for (int r = 0; r < c.repetitions; ++r) {
        auto w = time_fetches(subscriber, *part, dest, iterations);
        if (!w.ok()) return w.status().with_context("bench ucx: " + what + ": fetch");
        ours.push_back(*w);
        auto p = run_ucx_perftest(
            perftest, {tls, bytes, iterations, warmup, c.publisher_netns, publisher_address},
            publishers[t].dir);
        if (!p.ok()) return p.status().with_context("bench ucx: " + what + ": ucx_perftest");
        theirs.push_back(*p);
        char line[160];
        std::snprintf(line, sizeof line, "%s, run %d: weightcast %.3f GB/s, ucx_perftest %.3f GB/s",
                      what.c_str(), r + 1, *w, *p);
        log(line);
      }
      const auto counts = subscriber.read_counts();
      const char* reads =
          counts.loads > reads_before.loads && counts.gets == reads_before.gets   ? "loads"
          : counts.gets > reads_before.gets && counts.loads == reads_before.loads ? "gets"
                                                                                  : "mixed";
      reads_before = counts;
      const double best_ours = *std::max_element(ours.begin(), ours.end());
      const double best_theirs = *std::max_element(theirs.begin(), theirs.end());
      cases.push_back({{"tls", tls},
                       {"publisher_memory", memory},
                       {"subscriber_reads", reads},
                       {"part_bytes", bytes},
                       {"iterations", iterations},
                       {"warmup", warmup},
                       {"weightcast_gbps", best_ours},
                       {"perftest_gbps", best_theirs},
                       {"ratio", best_ours / best_theirs},
                       {"weightcast_gbps_runs", ours},
                       {"perftest_gbps_runs", theirs}});
    }
    publishers.release(t);  // an idle publisher still polls: it must not slow the next group
  }
  return nlohmann::json{
      {"benchmark", "ucx_part_fetch"},
      {"cases", cases},
      {"iterations", c.iterations},
      {"repetitions", c.repetitions},
      {"chunk_bytes", chunk_bytes},
      {"max_in_flight", max_in_flight},
      {"mapped_chunk_bytes", mapped_chunk_bytes},
      {"ucx_version", ucp_get_version_string()},
      {"perftest", perftest},
      {"publisher_netns", c.publisher_netns},
      {"publisher_address", publisher_address},
      {"perftest_command",
       "UCX_TLS=<tls> ucx_perftest <publisher_address> -p <port> -t ucp_get -s "
       "<part_bytes> -n <iterations> -w <warmup>"},
      {"note",
       "GB/s = 1e9 bytes/s; best of `repetitions` interleaved runs per side. weightcast: "
       "UcxSubscriberTransport::fetch of one part published by a forked "
       "UcxPublisherTransport serving its own buffers (in_place) or copies in a shared-memory "
       "segment (copy), "
       "whose version blob this process holds as a live subscriber does (descriptor lookup, "
       "chunked ucp_get_nbx or loads from the mapping where UCX maps the memory here, XXH3 "
       "verification included) into a page-aligned buffer; perftest: ucx_perftest's overall "
       "bandwidth (printed in MiB/s, converted). "
       "iterations 0 means ~1 GiB per run (16..1024 fetches)"}};
}

}  // namespace weightcast
