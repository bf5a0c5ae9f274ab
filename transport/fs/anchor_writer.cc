#include "transport/fs/anchor_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "codec/checksum.h"
#include "codec/delta_manifest.h"
#include "codec/safetensors_format.h"
#include "codec/thread_pool.h"
#include "transport/file_io.h"

namespace weightcast {
namespace {

// A slice is hashed, checksummed and written in pieces of this size, so the bytes are read
// from memory once and the later passes hit the cache. A multiple of every element size.
constexpr uint64_t kPieceBytes = uint64_t{4} << 20;

struct Shard {
  std::string file;
  std::string path;
  std::vector<size_t> inputs;  // indices into the caller's tensors, in input order
  SafetensorsLayout layout;
};

// One extent: the unit of work of the writer threads.
struct Extent {
  size_t shard = 0;
  uint64_t offset = 0;             // absolute file offset
  std::span<const uint8_t> bytes;  // what lands at [offset, offset + bytes.size())
  int64_t tensor = -1;             // input index; -1 for the header
  uint64_t first_element = 0;      // global index of the slice's first element
};

// Owns the shard files' descriptors so that every exit path closes them.
struct OpenFiles {
  std::vector<int> fds;
  ~OpenFiles() {
    for (const int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
};

Status errno_error(const std::string& what, const std::string& path, uint64_t offset) {
  return io_error(what + " '" + path + "' at offset " + std::to_string(offset) + ": " +
                  std::strerror(errno));
}

Status pwrite_all(int fd, const std::string& path, std::span<const uint8_t> bytes,
                  uint64_t offset) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return errno_error("cannot write " + std::to_string(bytes.size()) + " bytes to", path,
                         offset);
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return ok_status();
}

// Packs tensors greedily in input order into shards of about `shard_bytes` tensor bytes.
std::vector<Shard> pack_shards(const std::string& dir, std::span<const AnchorTensor> tensors,
                               uint64_t shard_bytes) {
  std::vector<Shard> shards(1);
  uint64_t filled = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t size = tensors[i].bytes.size();
    if (!shards.back().inputs.empty() && filled + size > shard_bytes) {
      shards.emplace_back();
      filled = 0;
    }
    shards.back().inputs.push_back(i);
    filled += size;
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    shards[s].file = anchor_shard_name(s, shards.size());
    shards[s].path = (std::filesystem::path(dir) / shards[s].file).string();
  }
  return shards;
}

// Rejects what plan_safetensors rejects over the whole model (so duplicates across shards are
// caught too) and byte counts that disagree with dtype and shape.
Status check_tensors(std::span<const AnchorTensor> tensors) {
  std::vector<SafetensorsTensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  RETURN_IF_ERROR(plan_safetensors(std::move(specs), {}).status().with_context("write_anchor"));
  for (const auto& t : tensors) {
    ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(t.shape, "tensor '" + t.name + "'"));
    if (t.bytes.size() != numel * dtype_size(t.dtype)) {
      return invalid_argument("write_anchor: tensor '" + t.name + "' has " +
                              std::to_string(t.bytes.size()) + " bytes; its dtype and shape need " +
                              std::to_string(numel * dtype_size(t.dtype)));
    }
  }
  return ok_status();
}

// Plans every header and cuts each shard into extents: the header, then each tensor's slices
// in data order. Returns the extents ordered by file and offset.
Result<std::vector<Extent>> plan_extents(std::span<const AnchorTensor> tensors,
                                         std::vector<Shard>* shards, uint64_t slice_bytes,
                                         proto::StepManifest* manifest) {
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  std::vector<Extent> extents;
  for (size_t s = 0; s < shards->size(); ++s) {
    Shard& shard = (*shards)[s];
    std::vector<SafetensorsTensorSpec> specs;
    std::unordered_map<std::string_view, size_t> input_by_name;
    for (const size_t i : shard.inputs) {
      specs.push_back({tensors[i].name, tensors[i].dtype, tensors[i].shape});
      input_by_name.emplace(tensors[i].name, i);
    }
    ASSIGN_OR_RETURN(shard.layout, plan_safetensors(std::move(specs), metadata));
    extents.push_back({s, 0, shard.layout.header, -1, 0});
    for (const auto& info : shard.layout.tensors) {
      const size_t input = input_by_name.at(info.name);
      const AnchorTensor& t = tensors[input];
      const uint64_t offset = shard.layout.data_offset + info.data_begin;
      proto::TensorState* state = manifest->mutable_tensors(static_cast<int>(input));
      state->set_part(static_cast<uint32_t>(s));
      state->set_offset(offset);
      for (uint64_t at = 0; at < t.bytes.size(); at += slice_bytes) {
        const uint64_t n = std::min<uint64_t>(slice_bytes, t.bytes.size() - at);
        extents.push_back({s, offset + at, t.bytes.subspan(at, n), static_cast<int64_t>(input),
                           at / dtype_size(t.dtype)});
      }
    }
    proto::PartInfo* part = manifest->add_parts();
    part->set_file(shard.file);
    part->set_bytes(shard.layout.file_size);
    part->set_raw_bytes(shard.layout.file_size);
  }
  return extents;
}

// The order work is handed out in: the k-th extent of every file before the (k+1)-th of any,
// so that threads taking consecutive items write to different files.
std::vector<size_t> round_robin_order(const std::vector<Extent>& extents, size_t shard_count) {
  std::vector<std::vector<size_t>> per_shard(shard_count);
  for (size_t e = 0; e < extents.size(); ++e) per_shard[extents[e].shard].push_back(e);
  std::vector<size_t> order;
  order.reserve(extents.size());
  for (size_t k = 0; order.size() < extents.size(); ++k) {
    for (const auto& list : per_shard) {
      if (k < list.size()) order.push_back(list[k]);
    }
  }
  return order;
}

Status write_index_json(const std::string& dir, std::span<const AnchorTensor> tensors,
                        const std::vector<Shard>& shards) {
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  for (const auto& shard : shards) {
    for (const size_t i : shard.inputs) {
      weight_map[tensors[i].name] = shard.file;
      total_size += tensors[i].bytes.size();
    }
  }
  const nlohmann::json index{{"metadata", {{"total_size", total_size}}},
                             {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  const std::string path = (std::filesystem::path(dir) / kAnchorIndexFile).string();
  return write_and_sync_file(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                             {});
}

}  // namespace

std::string anchor_shard_name(size_t index, size_t count) {
  char name[96];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

Status write_anchor(const std::string& dir, std::span<const AnchorTensor> tensors,
                    const AnchorWriteOptions& options, proto::StepManifest* manifest) {
  RETURN_IF_ERROR(check_tensors(tensors));
  const uint64_t slice_bytes = std::max<uint64_t>(8, options.slice_bytes / 8 * 8);

  manifest->set_kind(proto::STEP_ANCHOR);
  manifest->set_index_file(kAnchorIndexFile);
  manifest->clear_parts();
  manifest->clear_extents();
  manifest->clear_tensors();
  for (const auto& t : tensors) {
    proto::TensorState* state = manifest->add_tensors();
    state->set_name(t.name);
    state->set_dtype(dtype_to_proto(t.dtype));
    for (const int64_t d : t.shape) state->add_shape(d);
    state->set_bytes(t.bytes.size());
  }
  std::vector<Shard> shards = pack_shards(dir, tensors, options.shard_bytes);
  ASSIGN_OR_RETURN(const std::vector<Extent> extents,
                   plan_extents(tensors, &shards, slice_bytes, manifest));

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create anchor directory '" + dir + "': " + ec.message());
  OpenFiles files;
  for (const auto& shard : shards) {
    files.fds.push_back(::open(shard.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (files.fds.back() < 0) return errno_error("cannot create", shard.path, 0);
  }

  std::unique_ptr<ThreadPool> owned_pool;
  ThreadPool* pool = options.pool;
  if (pool == nullptr) pool = (owned_pool = std::make_unique<ThreadPool>(options.threads)).get();

  uint64_t bytes_total = 0;
  for (const auto& shard : shards) bytes_total += shard.layout.file_size;
  std::vector<uint64_t> hashes(extents.size());
  std::vector<std::atomic<uint64_t>> checksums(tensors.size());
  std::mutex report_mutex;  // guards first_error, bytes_done and progress calls
  Status first_error;
  std::atomic<bool> failed{false};
  uint64_t bytes_done = 0;
  const std::vector<size_t> order = round_robin_order(extents, shards.size());

  auto write_extent = [&](const Extent& e) -> Status {
    const Shard& shard = shards[e.shard];
    const size_t elem = e.tensor < 0 ? 1 : dtype_size(tensors[e.tensor].dtype);
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                   &XXH3_freeState);
    if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) {
      return internal_error("cannot start XXH3 for '" + shard.path + "'");
    }
    uint64_t checksum = 0;
    for (uint64_t at = 0; at < e.bytes.size(); at += kPieceBytes) {
      if (failed.load(std::memory_order_relaxed)) return ok_status();
      const auto piece = e.bytes.subspan(at, std::min<uint64_t>(kPieceBytes, e.bytes.size() - at));
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
    hashes[&e - extents.data()] = XXH3_64bits_digest(state.get());
    if (e.tensor >= 0) checksums[e.tensor].fetch_add(checksum, std::memory_order_relaxed);
    return ok_status();
  };
  pool->parallel_for(order.size(), [&](size_t k) {
    if (failed.load(std::memory_order_relaxed)) return;
    const Extent& e = extents[order[k]];
    Status s = write_extent(e);
    std::lock_guard<std::mutex> lock(report_mutex);
    if (!s.ok()) {
      if (!failed.exchange(true)) first_error = std::move(s);
      return;
    }
    bytes_done += e.bytes.size();
    if (options.progress && !failed.load()) options.progress(bytes_done, bytes_total);
  });
  if (failed.load()) return first_error;

  pool->parallel_for(shards.size(), [&](size_t s) {
    if (::fsync(files.fds[s]) == 0) return;
    Status st = errno_error("cannot fsync", shards[s].path, shards[s].layout.file_size);
    std::lock_guard<std::mutex> lock(report_mutex);
    if (!failed.exchange(true)) first_error = std::move(st);
  });
  if (failed.load()) return first_error;
  for (size_t s = 0; s < shards.size(); ++s) {
    const int fd = std::exchange(files.fds[s], -1);
    if (::close(fd) != 0) return errno_error("cannot close", shards[s].path, 0);
  }

  for (size_t e = 0; e < extents.size(); ++e) {
    proto::Extent* extent = manifest->add_extents();
    extent->set_shard(static_cast<uint32_t>(extents[e].shard));
    extent->set_offset(extents[e].offset);
    extent->set_bytes(extents[e].bytes.size());
    extent->set_xxh3(hashes[e]);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    manifest->mutable_tensors(static_cast<int>(i))->set_checksum(checksums[i].load());
  }
  return write_index_json(dir, tensors, shards);
}

}  // namespace weightcast
