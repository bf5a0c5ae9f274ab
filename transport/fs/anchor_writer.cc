#include "transport/fs/anchor_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/formats/safetensors_format.h"
#include "transport/fs/anchor_plan.h"

namespace weightcast {
namespace {

// A slice is hashed, checksummed and written in pieces of this size, so the bytes are read
// from memory once and the later passes hit the cache. A multiple of every element size.
constexpr uint64_t kPieceBytes = uint64_t{4} << 20;

// Owns the shard files' descriptors so that every exit path closes them.
struct OpenFiles {
  std::vector<int> fds;
  ~OpenFiles() {
    for (const int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
};

// Byte counts that disagree with dtype and shape (plan_anchor checked the specs).
Status check_byte_counts(std::span<const AnchorTensor> tensors, const AnchorPlan& plan) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].bytes.size() != plan.tensors[i].bytes) {
      return invalid_argument("write_anchor: tensor '" + tensors[i].name + "' has " +
                              std::to_string(tensors[i].bytes.size()) +
                              " bytes; its dtype and shape need " +
                              std::to_string(plan.tensors[i].bytes));
    }
  }
  return ok_status();
}

}  // namespace

std::string anchor_shard_name(size_t index, size_t count) {
  char name[96];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

Status write_anchor(const std::string& dir, std::span<const AnchorTensor> tensors,
                    const AnchorWriteOptions& options, proto::StepManifest* manifest) {
  std::vector<SafetensorsTensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  ASSIGN_OR_RETURN(const AnchorPlan plan, plan_anchor(dir, specs, options, "write_anchor"));
  RETURN_IF_ERROR(check_byte_counts(tensors, plan));
  const std::vector<AnchorShardPlan>& shards = plan.shards;
  const std::vector<AnchorExtentPlan>& extents = plan.extents;

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create anchor directory '" + dir + "': " + ec.message());
  OpenFiles files;
  for (const auto& shard : shards) {
    files.fds.push_back(::open(shard.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (files.fds.back() < 0) return anchor_errno_error("cannot create", shard.path, 0);
  }

  std::unique_ptr<ThreadPool> owned_pool;
  ThreadPool* pool = options.pool;
  if (pool == nullptr) pool = (owned_pool = std::make_unique<ThreadPool>(options.threads)).get();

  const uint64_t bytes_total = plan.file_bytes;
  std::vector<uint64_t> hashes(extents.size());
  std::vector<std::atomic<uint64_t>> checksums(tensors.size());
  std::mutex report_mutex;  // guards first_error, bytes_done and progress calls
  Status first_error;
  std::atomic<bool> failed{false};
  uint64_t bytes_done = 0;
  const std::vector<size_t> order = anchor_round_robin_order(plan);

  auto extent_bytes = [&](const AnchorExtentPlan& e) -> std::span<const uint8_t> {
    if (e.tensor < 0) return shards[e.shard].layout.header;
    return tensors[e.tensor].bytes.subspan(e.tensor_offset, e.bytes);
  };
  auto write_extent = [&](const AnchorExtentPlan& e, size_t index) -> Status {
    const AnchorShardPlan& shard = shards[e.shard];
    const std::span<const uint8_t> bytes = extent_bytes(e);
    const size_t elem = e.tensor < 0 ? 1 : dtype_size(tensors[e.tensor].dtype);
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                   &XXH3_freeState);
    if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) {
      return internal_error("cannot start XXH3 for '" + shard.path + "'");
    }
    uint64_t checksum = 0;
    for (uint64_t at = 0; at < bytes.size(); at += kPieceBytes) {
      if (failed.load(std::memory_order_relaxed)) return ok_status();
      const auto piece = bytes.subspan(at, std::min<uint64_t>(kPieceBytes, bytes.size() - at));
      XXH3_64bits_update(state.get(), piece.data(), piece.size());
      if (e.tensor >= 0) {
        checksum +=
            checksum_range(piece.data(), elem, piece.size() / elem, e.first_element + at / elem);
      }
      if (options.before_write) {
        RETURN_IF_ERROR(options.before_write(shard.path, e.offset + at, piece.size()));
      }
      RETURN_IF_ERROR(pwrite_all(files.fds[e.shard], shard.path, piece, e.offset + at));
    }
    hashes[index] = XXH3_64bits_digest(state.get());
    if (e.tensor >= 0) checksums[e.tensor].fetch_add(checksum, std::memory_order_relaxed);
    return ok_status();
  };
  pool->parallel_for(order.size(), [&](size_t k) {
    if (failed.load(std::memory_order_relaxed)) return;
    const AnchorExtentPlan& e = extents[order[k]];
    Status s = write_extent(e, order[k]);
    std::lock_guard<std::mutex> lock(report_mutex);
    if (!s.ok()) {
      if (!failed.exchange(true)) first_error = std::move(s);
      return;
    }
    bytes_done += e.bytes;
    if (options.progress && !failed.load()) options.progress(bytes_done, bytes_total);
  });
  if (failed.load()) return first_error;

  pool->parallel_for(shards.size(), [&](size_t s) {
    if (::fsync(files.fds[s]) == 0) return;
    Status st = anchor_errno_error("cannot fsync", shards[s].path, shards[s].layout.file_size);
    std::lock_guard<std::mutex> lock(report_mutex);
    if (!failed.exchange(true)) first_error = std::move(st);
  });
  if (failed.load()) return first_error;
  for (size_t s = 0; s < shards.size(); ++s) {
    const int fd = std::exchange(files.fds[s], -1);
    if (::close(fd) != 0) return anchor_errno_error("cannot close", shards[s].path, 0);
  }

  std::vector<uint64_t> tensor_checksums(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) tensor_checksums[i] = checksums[i].load();
  fill_anchor_manifest(plan, specs, hashes, tensor_checksums, manifest);
  RETURN_IF_ERROR(write_anchor_index_json(dir, specs, plan));
  return write_anchor_config_json(dir, options);
}

}  // namespace weightcast
