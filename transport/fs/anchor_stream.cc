#include "transport/fs/anchor_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <filesystem>
#include <iterator>
#include <utility>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/dtype.h"

namespace weightcast {
namespace {

// Files are read back in pieces of this size (one buffer per pool thread at a time), so
// finish() never holds more than threads x 4 MiB of the model. A multiple of every element
// size.
constexpr uint64_t kReadPieceBytes = uint64_t{4} << 20;

Status pread_all(int fd, const std::string& path, uint8_t* data, uint64_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return anchor_errno_error("cannot read back", path, offset);
    if (n == 0) {
      return data_loss("anchor shard '" + path + "' ends at offset " + std::to_string(offset) +
                       ", before its planned size");
    }
    data += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return ok_status();
}

std::string elements(uint64_t first, uint64_t count) {
  return "elements [" + std::to_string(first) + ", " + std::to_string(first + count) + ")";
}

}  // namespace

Result<std::unique_ptr<StreamingAnchorWriter>> StreamingAnchorWriter::open(
    const std::string& dir, std::vector<SafetensorsTensorSpec> tensors,
    AnchorWriteOptions options) {
  std::unique_ptr<StreamingAnchorWriter> w(new StreamingAnchorWriter());
  ASSIGN_OR_RETURN(w->plan_, plan_anchor(dir, tensors, options, "StreamingAnchorWriter"));
  w->dir_ = dir;
  w->specs_ = std::move(tensors);
  w->options_ = std::move(options);
  w->written_.resize(w->specs_.size());
  if (w->options_.pool == nullptr) {
    w->owned_pool_ = std::make_unique<ThreadPool>(w->options_.threads);
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create anchor directory '" + dir + "': " + ec.message());
  for (const auto& shard : w->plan_.shards) {
    w->fds_.push_back(::open(shard.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (w->fds_.back() < 0) return anchor_errno_error("cannot create", shard.path, 0);
    const uint64_t size = shard.layout.file_size;
    if (::ftruncate(w->fds_.back(), static_cast<off_t>(size)) != 0) {
      return anchor_errno_error("cannot size to " + std::to_string(size) + " bytes", shard.path, 0);
    }
    const std::span<const uint8_t> header = shard.layout.header;
    if (w->options_.before_write) {
      RETURN_IF_ERROR(w->options_.before_write(shard.path, 0, header.size())
                          .with_context("writing the header of '" + shard.path + "'"));
    }
    RETURN_IF_ERROR(pwrite_all(w->fds_.back(), shard.path, header, 0));
    w->progress_done_ += header.size();
  }
  return w;
}

StreamingAnchorWriter::~StreamingAnchorWriter() {
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

ThreadPool* StreamingAnchorWriter::pool() {
  return options_.pool != nullptr ? options_.pool : owned_pool_.get();
}

Status StreamingAnchorWriter::fail(Status s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed_.exchange(true)) first_error_ = std::move(s);
  return first_error_;
}

uint64_t StreamingAnchorWriter::bytes_written() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_written_;
}

Status StreamingAnchorWriter::reserve(size_t tensor, uint64_t begin, uint64_t end) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_.load()) return first_error_;
  if (finished_) return failed_precondition("anchor '" + dir_ + "' is finished");
  const uint64_t elem = dtype_size(specs_[tensor].dtype);
  std::map<uint64_t, uint64_t>& ranges = written_[tensor];
  auto next = ranges.upper_bound(begin);  // the first range starting after `begin`
  auto overlap = ranges.end();
  if (next != ranges.begin() && std::prev(next)->second > begin) overlap = std::prev(next);
  if (overlap == ranges.end() && next != ranges.end() && next->first < end) overlap = next;
  if (overlap != ranges.end()) {
    return failed_precondition(
        "anchor '" + dir_ + "': tensor '" + specs_[tensor].name + "' " +
        elements(begin / elem, (end - begin) / elem) + " written twice: " +
        elements(overlap->first / elem, (overlap->second - overlap->first) / elem) +
        " were already written (file '" + plan_.shards[plan_.tensors[tensor].shard].file +
        "', offset " + std::to_string(plan_.tensors[tensor].offset + begin) + ")");
  }
  uint64_t merged_begin = begin, merged_end = end;
  if (next != ranges.begin() && std::prev(next)->second == begin) {
    merged_begin = std::prev(next)->first;
    ranges.erase(std::prev(next));
  }
  if (next != ranges.end() && next->first == end) {
    merged_end = next->second;
    ranges.erase(next);
  }
  ranges[merged_begin] = merged_end;
  return ok_status();
}

Status StreamingAnchorWriter::mark_written(size_t tensor, uint64_t first_element, uint64_t count) {
  if (tensor >= specs_.size()) {
    return fail(invalid_argument("anchor '" + dir_ + "': no tensor " + std::to_string(tensor)));
  }
  const uint64_t elem = dtype_size(specs_[tensor].dtype);
  const uint64_t numel = plan_.tensors[tensor].bytes / elem;
  if (first_element > numel || count > numel - first_element) {
    return fail(out_of_range("anchor '" + dir_ + "': tensor '" + specs_[tensor].name + "' " +
                             elements(first_element, count) + " go past its end (" +
                             std::to_string(numel) + " elements)"));
  }
  if (count == 0) return ok_status();
  const uint64_t begin = first_element * elem;
  if (Status s = reserve(tensor, begin, begin + count * elem); !s.ok()) return fail(std::move(s));
  std::lock_guard<std::mutex> lock(mutex_);
  bytes_written_ += count * elem;
  return ok_status();
}

Status StreamingAnchorWriter::write(size_t tensor, uint64_t first_element,
                                    std::span<const uint8_t> bytes) {
  if (failed_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_error_;
  }
  if (tensor >= specs_.size()) {
    return fail(invalid_argument("anchor '" + dir_ + "': no tensor " + std::to_string(tensor) +
                                 " (it has " + std::to_string(specs_.size()) + ")"));
  }
  const SafetensorsTensorSpec& spec = specs_[tensor];
  const AnchorTensorPlan& t = plan_.tensors[tensor];
  const AnchorShardPlan& shard = plan_.shards[t.shard];
  const uint64_t elem = dtype_size(spec.dtype);
  const uint64_t numel = t.bytes / elem;
  if (bytes.size() % elem != 0) {
    return fail(invalid_argument("anchor '" + dir_ + "': " + std::to_string(bytes.size()) +
                                 " bytes for tensor '" + spec.name + "' are not whole " +
                                 std::string(dtype_name(spec.dtype)) + " elements"));
  }
  const uint64_t count = bytes.size() / elem;
  if (first_element > numel || count > numel - first_element) {
    return fail(out_of_range("anchor '" + dir_ + "': tensor '" + spec.name + "' " +
                             elements(first_element, count) + " go past its end (" +
                             std::to_string(numel) + " elements; file '" + shard.file + "', " +
                             "offset " + std::to_string(t.offset + first_element * elem) + ")"));
  }
  if (count == 0) return ok_status();
  const uint64_t begin = first_element * elem;
  if (Status s = reserve(tensor, begin, begin + bytes.size()); !s.ok()) return fail(std::move(s));
  const uint64_t offset = t.offset + begin;
  const std::string context = "writing tensor '" + spec.name + "' " +
                              elements(first_element, count) + " to '" + shard.path +
                              "' at offset " + std::to_string(offset);
  if (options_.before_write) {
    if (Status s = options_.before_write(shard.path, offset, bytes.size()); !s.ok()) {
      return fail(s.with_context(context));
    }
  }
  if (Status s = pwrite_all(fds_[t.shard], shard.path, bytes, offset); !s.ok()) {
    return fail(s.with_context(context));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  bytes_written_ += bytes.size();
  progress_done_ += bytes.size();
  if (options_.progress && !failed_.load()) options_.progress(progress_done_, plan_.file_bytes);
  return ok_status();
}

Status StreamingAnchorWriter::write_tensor(size_t tensor, std::span<const uint8_t> all_bytes) {
  if (tensor >= specs_.size()) return write(tensor, 0, all_bytes);  // the refusal
  if (all_bytes.size() != plan_.tensors[tensor].bytes) {
    return fail(invalid_argument("anchor '" + dir_ + "': tensor '" + specs_[tensor].name +
                                 "' has " + std::to_string(all_bytes.size()) +
                                 " bytes; its dtype and shape need " +
                                 std::to_string(plan_.tensors[tensor].bytes)));
  }
  std::vector<const AnchorExtentPlan*> slices;
  for (const auto& e : plan_.extents) {
    if (e.tensor == static_cast<int64_t>(tensor)) slices.push_back(&e);
  }
  const auto write_slice = [&](const AnchorExtentPlan& e) {
    return write(tensor, e.first_element, all_bytes.subspan(e.tensor_offset, e.bytes));
  };
  if (slices.size() <= 1 || pool()->size() <= 1) {
    for (const AnchorExtentPlan* e : slices) RETURN_IF_ERROR(write_slice(*e));
    return ok_status();
  }
  std::vector<Status> results(slices.size());
  pool()->parallel_for(slices.size(), [&](size_t k) { results[k] = write_slice(*slices[k]); });
  for (auto& s : results) RETURN_IF_ERROR(s);
  return ok_status();
}

Status StreamingAnchorWriter::read_back(std::vector<uint64_t>* hashes) {
  hashes->assign(plan_.extents.size(), 0);
  std::vector<std::atomic<uint64_t>> sums(specs_.size());
  std::mutex error_mutex;
  Status first_error;
  std::atomic<bool> failed{false};
  const std::vector<size_t> order = anchor_round_robin_order(plan_);
  const auto read_extent = [&](size_t index) -> Status {
    const AnchorExtentPlan& e = plan_.extents[index];
    const AnchorShardPlan& shard = plan_.shards[e.shard];
    const uint64_t elem = e.tensor < 0 ? 1 : dtype_size(specs_[e.tensor].dtype);
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                   &XXH3_freeState);
    if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) {
      return internal_error("cannot start XXH3 for '" + shard.path + "'");
    }
    const uint64_t buffer_bytes = std::min<uint64_t>(kReadPieceBytes, e.bytes);
    std::unique_ptr<uint8_t[]> buffer(new uint8_t[buffer_bytes > 0 ? buffer_bytes : 1]);
    uint64_t checksum = 0;
    for (uint64_t at = 0; at < e.bytes; at += kReadPieceBytes) {
      if (failed.load(std::memory_order_relaxed)) return ok_status();
      const uint64_t n = std::min<uint64_t>(kReadPieceBytes, e.bytes - at);
      RETURN_IF_ERROR(pread_all(fds_[e.shard], shard.path, buffer.get(), n, e.offset + at));
      XXH3_64bits_update(state.get(), buffer.get(), n);
      if (e.tensor >= 0) {
        checksum += checksum_range(buffer.get(), elem, n / elem, e.first_element + at / elem);
      }
    }
    (*hashes)[index] = XXH3_64bits_digest(state.get());
    if (e.tensor >= 0) sums[e.tensor].fetch_add(checksum, std::memory_order_relaxed);
    return ok_status();
  };
  pool()->parallel_for(order.size(), [&](size_t k) {
    if (failed.load(std::memory_order_relaxed)) return;
    Status s = read_extent(order[k]);
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!failed.exchange(true)) first_error = std::move(s);
  });
  if (failed.load()) return first_error;
  checksums_.resize(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) checksums_[i] = sums[i].load();
  return ok_status();
}

Status StreamingAnchorWriter::finish(proto::StepManifest* manifest) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.load()) return first_error_;
    if (finished_) return failed_precondition("anchor '" + dir_ + "' is already finished");
    finished_ = true;
  }
  for (size_t i = 0; i < specs_.size(); ++i) {
    const AnchorTensorPlan& t = plan_.tensors[i];
    if (t.bytes == 0) continue;
    const auto& ranges = written_[i];
    const bool whole =
        ranges.size() == 1 && ranges.begin()->first == 0 && ranges.begin()->second == t.bytes;
    if (whole) continue;
    const uint64_t missing =
        ranges.empty() || ranges.begin()->first > 0 ? 0 : ranges.begin()->second;
    const uint64_t elem = dtype_size(specs_[i].dtype);
    return fail(failed_precondition("anchor '" + dir_ + "' is incomplete: tensor '" +
                                    specs_[i].name + "' element " + std::to_string(missing / elem) +
                                    " (file '" + plan_.shards[t.shard].file + "', offset " +
                                    std::to_string(t.offset + missing) + ") was never written"));
  }

  std::vector<Status> synced(fds_.size());
  pool()->parallel_for(fds_.size(), [&](size_t s) {
    if (::fsync(fds_[s]) != 0) {
      synced[s] = anchor_errno_error("cannot fsync", plan_.shards[s].path,
                                     plan_.shards[s].layout.file_size);
    }
  });
  for (auto& s : synced) {
    if (!s.ok()) return fail(std::move(s));
  }
  std::vector<uint64_t> hashes;
  if (Status s = read_back(&hashes); !s.ok()) return fail(std::move(s));
  for (size_t s = 0; s < fds_.size(); ++s) {
    const int fd = std::exchange(fds_[s], -1);
    if (::close(fd) != 0) return fail(anchor_errno_error("cannot close", plan_.shards[s].path, 0));
  }
  fill_anchor_manifest(plan_, specs_, hashes, checksums_, manifest);
  if (Status s = write_anchor_index_json(dir_, specs_, plan_); !s.ok()) return fail(std::move(s));
  return ok_status();
}

}  // namespace weightcast
