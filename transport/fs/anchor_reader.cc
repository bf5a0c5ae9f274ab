// Reading and verifying anchors (transport/fs/anchor_reader.h): read_anchor_tensor, read_anchor
// and verify_anchor pread the extents that anchor_manifest_check.cc's layout names, checking
// each extent's XXH3-64, each tensor's checksum C() and, for verify_anchor, the shard headers
// and the index json.
#include "transport/fs/anchor_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "codec/base/file_io.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/dtype.h"
#include "codec/formats/safetensors_format.h"
#include "transport/fs/anchor_manifest_check.h"

namespace weightcast {
namespace {

using anchor_internal::AnchorLayout;
using anchor_internal::bad_manifest;
using anchor_internal::index_manifest;
using anchor_internal::tensor_where;

// Extents are read, hashed and checksummed in pieces of this size so the bytes stay in cache.
constexpr uint64_t kPieceBytes = uint64_t{4} << 20;

// The shard files of one read, opened on demand and closed together.
class ShardFiles {
 public:
  ShardFiles(const std::string& dir, const proto::StepManifest& m)
      : dir_(dir), m_(m), fds_(m.parts_size(), -1) {}
  ~ShardFiles() {
    for (const int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::string path(size_t s) const { return dir_ + "/" + m_.parts(static_cast<int>(s)).file(); }
  int fd(size_t s) const { return fds_[s]; }

  // Opens shard `s` once and checks its size against the manifest.
  Status open(size_t s) {
    if (fds_[s] >= 0) return ok_status();
    const std::string p = path(s);
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return not_found("anchor shard '" + p + "' is missing");
    if (fd < 0) return io_error("cannot open anchor shard '" + p + "': " + std::strerror(errno));
    fds_[s] = fd;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return io_error("cannot stat '" + p + "': " + std::strerror(errno));
    const uint64_t want = m_.parts(static_cast<int>(s)).bytes();
    if (static_cast<uint64_t>(st.st_size) != want) {
      return data_loss("anchor shard '" + p + "' ends at offset " + std::to_string(st.st_size) +
                       ", the manifest says " + std::to_string(want) + " bytes (truncated?)");
    }
    return ok_status();
  }

 private:
  std::string dir_;
  const proto::StepManifest& m_;
  std::vector<int> fds_;
};

// Reads extent `e` into `dest` (its size), or piece by piece into `dest` when `scratch`,
// verifying its XXH3; returns its part of the owning tensor's checksum (0 for a header).
Result<uint64_t> read_extent(const ShardFiles& files, const proto::StepManifest& m,
                             const AnchorLayout& layout, size_t e, std::span<uint8_t> dest,
                             bool scratch) {
  const auto& x = m.extents(static_cast<int>(e));
  const int64_t tensor = layout.extent_tensor[e];
  const size_t elem = tensor < 0 ? 1 : dtype_size(layout.dtypes[tensor]);
  const uint64_t first = tensor < 0 ? 0 : (x.offset() - m.tensors(tensor).offset()) / elem;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) return internal_error("XXH3 state");
  uint64_t checksum = 0;
  for (uint64_t at = 0; at < x.bytes(); at += kPieceBytes) {
    const uint64_t n = std::min<uint64_t>(kPieceBytes, x.bytes() - at);
    uint8_t* to = scratch ? dest.data() : dest.data() + at;
    for (uint64_t got = 0; got < n;) {
      const ssize_t r = ::pread(files.fd(x.shard()), to + got, n - got,
                                static_cast<off_t>(x.offset() + at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        return data_loss("cannot read anchor shard '" + files.path(x.shard()) + "' at offset " +
                         std::to_string(x.offset() + at + got) + ": " +
                         (r == 0 ? "file ends early" : std::strerror(errno)));
      }
      got += static_cast<uint64_t>(r);
    }
    XXH3_64bits_update(state.get(), to, n);
    if (tensor >= 0) checksum += checksum_range(to, elem, n / elem, first + at / elem);
  }
  if (XXH3_64bits_digest(state.get()) != x.xxh3()) {
    return data_loss("anchor shard '" + files.path(x.shard()) + "': XXH3 of extent [" +
                     std::to_string(x.offset()) + ", +" + std::to_string(x.bytes()) +
                     ") differs from the manifest");
  }
  return checksum;
}

// Reads `extents` on `pool`, adding each one's checksum part into `checksums[tensor]`.
// dest_of(e) is where extent e's bytes go; an empty span reads into per-thread scratch.
Status read_extents(const ShardFiles& files, const proto::StepManifest& m,
                    const AnchorLayout& layout, const std::vector<size_t>& extents,
                    const std::function<std::span<uint8_t>(size_t)>& dest_of, ThreadPool* pool,
                    std::vector<std::atomic<uint64_t>>* checksums) {
  std::mutex error_mutex;
  Status first_error;
  std::atomic<bool> failed{false};
  auto run = [&](size_t k) {
    if (failed.load(std::memory_order_relaxed)) return;
    const size_t e = extents[k];
    std::span<uint8_t> dest = dest_of(e);
    std::vector<uint8_t> scratch;
    if (dest.empty()) {
      scratch.resize(std::min<uint64_t>(kPieceBytes, m.extents(e).bytes()));
      dest = scratch;
    }
    auto part = read_extent(files, m, layout, e, dest, !scratch.empty());
    if (part.ok() && layout.extent_tensor[e] >= 0) {
      (*checksums)[layout.extent_tensor[e]].fetch_add(*part, std::memory_order_relaxed);
    } else if (!part.ok()) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!failed.exchange(true)) first_error = part.status();
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(extents.size(), run);
  } else {
    for (size_t k = 0; k < extents.size(); ++k) run(k);
  }
  return failed.load() ? first_error : ok_status();
}

Status compare_checksum(const proto::StepManifest& m, size_t i, uint64_t actual) {
  if (actual == m.tensors(static_cast<int>(i)).checksum()) return ok_status();
  return checksum_mismatch(tensor_where(m, i) + ": checksum " + std::to_string(actual) +
                           " differs from the manifest's " +
                           std::to_string(m.tensors(static_cast<int>(i)).checksum()));
}

// Reads the tensors `wanted` into dest_of(their first extent)'s buffers and checks them.
Status read_tensors(const std::string& dir, const proto::StepManifest& m,
                    const AnchorLayout& layout, const std::vector<size_t>& wanted,
                    const std::function<std::span<uint8_t>(size_t)>& dest_of, ThreadPool* pool) {
  ShardFiles files(dir, m);
  std::vector<size_t> extents;
  for (const size_t i : wanted) {
    if (m.tensors(i).bytes() == 0) continue;
    RETURN_IF_ERROR(files.open(m.tensors(i).part()));
    for (size_t e = layout.tensor_extent_begin[i]; e < layout.tensor_extent_end[i]; ++e) {
      extents.push_back(e);
    }
  }
  std::vector<std::atomic<uint64_t>> checksums(m.tensors_size());
  RETURN_IF_ERROR(read_extents(files, m, layout, extents, dest_of, pool, &checksums));
  for (const size_t i : wanted) RETURN_IF_ERROR(compare_checksum(m, i, checksums[i].load()));
  return ok_status();
}

}  // namespace

Status read_anchor_tensor(const std::string& dir, const proto::StepManifest& m, size_t index,
                          std::span<uint8_t> dest) {
  ASSIGN_OR_RETURN(const AnchorLayout layout, index_manifest(m));
  if (index >= static_cast<size_t>(m.tensors_size()) ||
      dest.size() != m.tensors(static_cast<int>(index)).bytes()) {
    return invalid_argument("read_anchor_tensor: tensor " + std::to_string(index) +
                            " does not exist or does not fit " + std::to_string(dest.size()) +
                            " bytes");
  }
  const uint64_t base = m.tensors(static_cast<int>(index)).offset();
  return read_tensors(
      dir, m, layout, {index},
      [&](size_t e) { return dest.subspan(m.extents(e).offset() - base, m.extents(e).bytes()); },
      nullptr);
}

Status read_anchor(const std::string& dir, const proto::StepManifest& m,
                   std::span<const std::span<uint8_t>> dests, ThreadPool* pool) {
  ASSIGN_OR_RETURN(const AnchorLayout layout, index_manifest(m));
  if (dests.size() != static_cast<size_t>(m.tensors_size())) {
    return invalid_argument("read_anchor: " + std::to_string(dests.size()) + " destinations for " +
                            std::to_string(m.tensors_size()) + " tensors");
  }
  std::vector<size_t> all(dests.size());
  for (size_t i = 0; i < all.size(); ++i) {
    all[i] = i;
    if (dests[i].size() != m.tensors(i).bytes()) {
      return invalid_argument("read_anchor: destination of tensor '" + m.tensors(i).name() +
                              "' has " + std::to_string(dests[i].size()) + " bytes, needs " +
                              std::to_string(m.tensors(i).bytes()));
    }
  }
  return read_tensors(
      dir, m, layout, all,
      [&](size_t e) {
        const auto& t = m.tensors(layout.extent_tensor[e]);
        return dests[layout.extent_tensor[e]].subspan(m.extents(e).offset() - t.offset(),
                                                      m.extents(e).bytes());
      },
      pool);
}

Status read_anchor_tensors(const std::string& dir, const proto::StepManifest& m,
                           std::span<const size_t> indices,
                           std::span<const std::span<uint8_t>> dests, ThreadPool* pool) {
  ASSIGN_OR_RETURN(const AnchorLayout layout, index_manifest(m));
  if (dests.size() != indices.size()) {
    return invalid_argument("read_anchor_tensors: " + std::to_string(dests.size()) +
                            " destinations for " + std::to_string(indices.size()) + " tensors");
  }
  std::vector<int64_t> slot(m.tensors_size(), -1);
  for (size_t k = 0; k < indices.size(); ++k) {
    const size_t i = indices[k];
    if (i >= slot.size() || slot[i] >= 0 || dests[k].size() != m.tensors(i).bytes()) {
      return invalid_argument("read_anchor_tensors: tensor " + std::to_string(i) +
                              " is out of range, repeated, or does not fit " +
                              std::to_string(dests[k].size()) + " bytes");
    }
    slot[i] = static_cast<int64_t>(k);
  }
  return read_tensors(
      dir, m, layout, std::vector<size_t>(indices.begin(), indices.end()),
      [&](size_t e) {
        const int64_t i = layout.extent_tensor[e];
        return dests[slot[i]].subspan(m.extents(e).offset() - m.tensors(i).offset(),
                                      m.extents(e).bytes());
      },
      pool);
}

namespace {

// The shard's safetensors header parses and places exactly the manifest's tensors of shard
// `s` (`tensors`) with the manifest's dtypes, shapes and offsets.
Status check_shard_header(const ShardFiles& files, const proto::StepManifest& m,
                          const AnchorLayout& layout, size_t s,
                          const std::vector<size_t>& tensors) {
  const size_t e = layout.shard_extents[s];
  const auto& x = m.extents(static_cast<int>(e));
  const std::string path = files.path(s);
  if (x.bytes() > 8 + SafetensorsLimits{}.max_header_bytes) {
    return data_loss("anchor shard '" + path + "': header extent of " + std::to_string(x.bytes()) +
                     " bytes exceeds the safetensors limit");
  }
  std::vector<uint8_t> prefix(x.bytes());
  RETURN_IF_ERROR(read_extent(files, m, layout, e, prefix, false).status());
  auto header = parse_safetensors_header(prefix, m.parts(static_cast<int>(s)).bytes());
  if (!header.ok()) return data_loss("anchor shard '" + path + "': " + header.status().message());
  if (header->data_offset != x.bytes() || header->tensors.size() != tensors.size()) {
    return data_loss("anchor shard '" + path + "': header of " +
                     std::to_string(header->data_offset) + " bytes with " +
                     std::to_string(header->tensors.size()) + " tensors; the manifest has " +
                     std::to_string(x.bytes()) + " and " + std::to_string(tensors.size()));
  }
  for (const size_t i : tensors) {
    const auto& t = m.tensors(static_cast<int>(i));
    const SafetensorsTensorInfo* info = header->find(t.name());
    if (info == nullptr || info->dtype != layout.dtypes[i] ||
        !std::equal(info->shape.begin(), info->shape.end(), t.shape().begin(), t.shape().end()) ||
        header->data_offset + info->data_begin != t.offset() ||
        info->data_end - info->data_begin != t.bytes()) {
      return data_loss(tensor_where(m, i) + " is missing from or disagrees with the header of '" +
                       path + "' (dtype, shape or data_offsets)");
    }
  }
  return ok_status();
}

// The index json maps every tensor to its shard file and names nothing else.
Status check_index_json(const std::string& dir, const proto::StepManifest& m) {
  if (m.index_file().empty()) return bad_manifest("index_file is empty");
  const std::string path = dir + "/" + m.index_file();
  auto file = MappedFile::open(path);
  if (!file.ok()) return not_found("anchor index '" + path + "': " + file.status().message());
  const auto bytes = file->bytes();
  const auto json = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  const auto map = json.is_object() ? json.find("weight_map") : json.end();
  if (json.is_discarded() || map == json.end() || !map->is_object()) {
    return data_loss("anchor index '" + path + "' is not JSON with a weight_map object");
  }
  if (map->size() != static_cast<size_t>(m.tensors_size())) {
    return data_loss("anchor index '" + path + "' names " + std::to_string(map->size()) +
                     " tensors, the manifest " + std::to_string(m.tensors_size()));
  }
  for (const auto& t : m.tensors()) {
    const auto it = map->find(t.name());
    const std::string& want = m.parts(static_cast<int>(t.part())).file();
    if (it == map->end() || !it->is_string() || it->get_ref<const std::string&>() != want) {
      return data_loss("anchor index '" + path + "' does not map tensor '" + t.name() + "' to '" +
                       want + "'");
    }
  }
  return ok_status();
}

}  // namespace

Status verify_anchor(const std::string& dir, const proto::StepManifest& m, ThreadPool* pool) {
  ASSIGN_OR_RETURN(const AnchorLayout layout, index_manifest(m));
  ShardFiles files(dir, m);
  std::vector<std::vector<size_t>> by_shard(m.parts_size());
  for (int i = 0; i < m.tensors_size(); ++i) by_shard[m.tensors(i).part()].push_back(i);
  for (size_t s = 0; s < by_shard.size(); ++s) {
    RETURN_IF_ERROR(files.open(s));
    RETURN_IF_ERROR(check_shard_header(files, m, layout, s, by_shard[s]));
  }
  std::vector<size_t> extents;
  for (size_t e = 0; e < layout.extent_tensor.size(); ++e) {
    if (layout.extent_tensor[e] >= 0) extents.push_back(e);
  }
  std::vector<std::atomic<uint64_t>> checksums(m.tensors_size());
  RETURN_IF_ERROR(read_extents(
      files, m, layout, extents, [](size_t) { return std::span<uint8_t>(); }, pool, &checksums));
  for (int i = 0; i < m.tensors_size(); ++i) {
    RETURN_IF_ERROR(compare_checksum(m, i, checksums[i].load()));
  }
  return check_index_json(dir, m);
}

}  // namespace weightcast
