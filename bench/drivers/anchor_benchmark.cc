#include "bench/drivers/anchor_benchmark.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>

#include "transport/fs/anchor_writer.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A directory that is removed with its contents when it goes out of scope.
class ScratchDir {
 public:
  static Result<ScratchDir> create(const std::string& parent) {
    std::string pattern = (std::filesystem::path(parent) / "anchor_bench.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return io_error("cannot create a scratch directory in '" + parent +
                      "': " + std::strerror(errno));
    }
    ScratchDir d;
    d.path_ = pattern;
    return d;
  }
  ScratchDir(ScratchDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  ScratchDir() = default;
  std::string path_;
};

// The reference: write() in 8 MiB chunks into one new file, then fsync.
Result<double> time_sequential_write(const std::string& path, std::span<const uint8_t> bytes) {
  constexpr size_t kChunk = size_t{8} << 20;
  const double t0 = now_s();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create '" + path + "': " + std::strerror(errno));
  for (size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + at, std::min(kChunk, bytes.size() - at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = io_error("cannot write '" + path + "' at offset " + std::to_string(at) + ": " +
                          std::strerror(errno));
      ::close(fd);
      return s;
    }
    at += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return io_error("cannot fsync '" + path + "': " + std::strerror(errno));
  const double seconds = now_s() - t0;
  ::unlink(path.c_str());
  return seconds;
}

// Tensor sizes cycle through a spread of 1-64 MiB, as in a transformer's mix of norms,
// projections and embeddings; the last one takes what is left.
std::vector<AnchorTensor> synthetic_model(std::span<const uint8_t> bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const uint64_t cycle[] = {1, 8, 24, 3, 64, 16, 2, 32};
  std::vector<AnchorTensor> tensors;
  for (uint64_t at = 0, k = 0; at < bytes.size(); ++k) {
    const uint64_t size = std::min<uint64_t>(cycle[k % 8] * kMiB, bytes.size() - at);
    const bool rows_of_1024 = size % 2048 == 0;
    tensors.push_back({"model.layers." + std::to_string(k / 8) + ".w" + std::to_string(k % 8),
                       DType::kBF16,
                       rows_of_1024 ? std::vector<int64_t>{static_cast<int64_t>(size / 2048), 1024}
                                    : std::vector<int64_t>{static_cast<int64_t>(size / 2)},
                       bytes.subspan(at, size)});
    at += size;
  }
  return tensors;
}

}  // namespace

Result<nlohmann::json> run_anchor_write_benchmark(const AnchorBenchmarkConfig& c) {
  if (c.total_bytes < 2 || c.repetitions < 1 || c.threads.empty()) {
    return invalid_argument("bench anchor: needs total_bytes >= 2, repetitions >= 1, threads");
  }
  const uint64_t total = c.total_bytes / 2 * 2;
  auto buffer = std::make_unique_for_overwrite<uint64_t[]>((total + 7) / 8);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t i = 0; i < (total + 7) / 8; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64: incompressible, cheap
    buffer[i] = x;
  }
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(buffer.get()), total);
  const std::vector<AnchorTensor> tensors = synthetic_model(bytes);
  ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(c.dir));

  double raw_s = 1e300;
  for (int r = 0; r < c.repetitions; ++r) {
    ASSIGN_OR_RETURN(const double s, time_sequential_write(scratch.path() + "/raw.bin", bytes));
    raw_s = std::min(raw_s, s);
  }
  const double raw_gbps = static_cast<double>(total) / 1e9 / raw_s;
  nlohmann::json runs = nlohmann::json::array();
  for (const size_t threads : c.threads) {
    AnchorWriteOptions options;
    options.shard_bytes = c.shard_bytes;
    options.threads = threads;
    double best = 1e300;
    for (int r = 0; r < c.repetitions; ++r) {
      const std::string dir = scratch.path() + "/anchor";
      proto::StepManifest manifest;
      const double t0 = now_s();
      RETURN_IF_ERROR(write_anchor(dir, tensors, options, &manifest));
      best = std::min(best, now_s() - t0);
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
    const double gbps = static_cast<double>(total) / 1e9 / best;
    runs.push_back({{"threads", threads},
                    {"seconds", best},
                    {"GBps", gbps},
                    {"ratio_vs_raw", gbps / raw_gbps}});
  }
  return nlohmann::json{{"bytes", total},
                        {"tensors", tensors.size()},
                        {"shard_bytes", c.shard_bytes},
                        {"raw_sequential_write_s", raw_s},
                        {"raw_GBps", raw_gbps},
                        {"anchor", runs}};
}

}  // namespace weightcast
