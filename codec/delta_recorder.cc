#include "codec/delta_recorder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codec/change_capture.h"
#include "codec/change_scan.h"

namespace weightcast {

Result<std::unique_ptr<DeltaRecorder>> DeltaRecorder::create(const EncodeOptions& options,
                                                             uint64_t elements) {
  if (!options.base_checksum) {
    return invalid_argument("tensor '" + options.name +
                            "': a recorded delta needs the base version's checksum");
  }
  if (options.range_offset != 0) {
    return invalid_argument("tensor '" + options.name +
                            "': a recorded delta covers the whole tensor");
  }
  ASSIGN_OR_RETURN(DeltaRecordHeader header, delta_header_for(options, elements));
  header.base_checksum = *options.base_checksum;
  return std::unique_ptr<DeltaRecorder>(new DeltaRecorder(options, std::move(header), elements));
}

DeltaRecorder::DeltaRecorder(EncodeOptions options, DeltaRecordHeader header, uint64_t elements)
    : options_(std::move(options)),
      header_(std::move(header)),
      elements_(elements),
      elem_size_(dtype_size(options_.dtype)),
      chunks_(header_.chunk_count()),
      state_(header_.chunk_count(), 0) {}

uint64_t DeltaRecorder::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

uint64_t DeltaRecorder::changed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return changed_;
}

uint64_t DeltaRecorder::pending_chunks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

uint64_t DeltaRecorder::target_checksum() const {
  std::lock_guard<std::mutex> lock(mu_);
  return header_.base_checksum + checksum_change_;
}

void DeltaRecorder::encode(uint32_t chunk, const uint8_t* old_bytes, const uint8_t* new_bytes) {
  thread_local ChunkScratch scratch;
  const uint64_t start = uint64_t{header_.chunk_elements} * chunk;
  EncodedChunk& out = chunks_[chunk];
  encode_chunk(old_bytes, new_bytes, header_.chunk_length(chunk), elem_size_, start,
               options_.allowed_modes, scratch, &out);
  encoded(chunk);
}

void DeltaRecorder::encode_writing(uint32_t chunk, uint8_t* live, const uint8_t* new_bytes) {
  thread_local ChunkScratch scratch;
  const uint32_t length = header_.chunk_length(chunk);
  scratch.positions.resize(length);
  scratch.old_bits.resize(length);
  const uint32_t n = scan_and_copy_changes(live, new_bytes, length, elem_size_,
                                           scratch.positions.data(), scratch.old_bits.data());
  encode_scanned_chunk(n, new_bytes, length, elem_size_, uint64_t{header_.chunk_elements} * chunk,
                       options_.allowed_modes, scratch, &chunks_[chunk]);
  encoded(chunk);
}

void DeltaRecorder::encode_captured(uint32_t chunk, const uint8_t* live, const uint8_t* capture) {
  thread_local ChunkScratch scratch;
  const uint32_t length = header_.chunk_length(chunk);
  scratch.positions.resize(length);
  scratch.old_bits.resize(length);
  scratch.new_bits.resize(length);
  const uint32_t n = expand_capture(capture, length, elem_size_, scratch.positions.data(),
                                    scratch.old_bits.data(), scratch.new_bits.data());
  encode_scanned_chunk(n, live, length, elem_size_, uint64_t{header_.chunk_elements} * chunk,
                       options_.allowed_modes, scratch, &chunks_[chunk],
                       /*captured_new_bits=*/true);
  encoded(chunk);
}

void DeltaRecorder::encoded(uint32_t chunk) {
  EncodedChunk& out = chunks_[chunk];
  out.bytes.shrink_to_fit();
  std::lock_guard<std::mutex> lock(mu_);
  state_[chunk] = 3;
  changed_ += out.changed;
  checksum_change_ += out.checksum_change;
}

Status DeltaRecorder::written_twice(uint32_t chunk, uint32_t start, uint32_t length) const {
  const uint64_t first = uint64_t{header_.chunk_elements} * chunk + start;
  return invalid_argument("tensor '" + options_.name + "': elements [" + std::to_string(first) +
                          ", " + std::to_string(first + length) +
                          ") written twice in one step (version " +
                          std::to_string(options_.target_version) + ")");
}

Status DeltaRecorder::check_range(uint64_t first, uint64_t count) const {
  if (first > elements_ || count > elements_ - first) {
    return invalid_argument("tensor '" + options_.name + "': write of elements [" +
                            std::to_string(first) + ", " + std::to_string(first + count) +
                            ") past its " + std::to_string(elements_) + " elements");
  }
  return ok_status();
}

Status DeltaRecorder::record_part(uint32_t chunk, uint32_t start, uint32_t length,
                                  const uint8_t* old_bytes, const uint8_t* new_bytes) {
  const uint32_t chunk_length = header_.chunk_length(chunk);
  const auto twice = [&] { return written_twice(chunk, start, length); };
  std::unique_lock<std::mutex> lock(mu_);
  if (state_[chunk] >= 2) return twice();
  if (start == 0 && length == chunk_length) {
    // A whole chunk: encoded straight from the caller's bytes, outside the lock. Any part of
    // it written before makes this a second write of those elements.
    if (state_[chunk] == 1) return twice();
    state_[chunk] = 2;
    written_ += length;
    lock.unlock();
    encode(chunk, old_bytes, new_bytes);
    return ok_status();
  }
  Pending& p = pending_[chunk];
  if (state_[chunk] == 0) {
    p.old_bytes.resize(size_t{chunk_length} * elem_size_);
    p.new_bytes.resize(size_t{chunk_length} * elem_size_);
    state_[chunk] = 1;
  }
  // The written runs are disjoint: the one after `start` must begin at or past its end, the
  // one before must end at or before `start`.
  auto next = p.runs.lower_bound(start);
  if (next != p.runs.end() && next->first < start + length) return twice();
  if (next != p.runs.begin() && std::prev(next)->second > start) return twice();
  p.runs.emplace(start, start + length);
  std::memcpy(p.old_bytes.data() + size_t{start} * elem_size_, old_bytes,
              size_t{length} * elem_size_);
  std::memcpy(p.new_bytes.data() + size_t{start} * elem_size_, new_bytes,
              size_t{length} * elem_size_);
  p.written += length;
  written_ += length;
  if (p.written < chunk_length) return ok_status();
  Pending done = std::move(p);
  pending_.erase(chunk);
  state_[chunk] = 2;
  lock.unlock();
  encode(chunk, done.old_bytes.data(), done.new_bytes.data());
  return ok_status();
}

Status DeltaRecorder::for_each_run(
    uint64_t first, uint64_t count,
    const std::function<Status(uint32_t chunk, uint32_t start, uint32_t length, uint64_t done)>& fn)
    const {
  RETURN_IF_ERROR(check_range(first, count));
  const uint64_t ce = header_.chunk_elements;
  for (uint64_t done = 0; done < count;) {
    const uint64_t at = first + done;
    const auto chunk = static_cast<uint32_t>(at / ce);
    const auto start = static_cast<uint32_t>(at % ce);
    const auto length = static_cast<uint32_t>(
        std::min<uint64_t>(header_.chunk_length(chunk) - start, count - done));
    RETURN_IF_ERROR(fn(chunk, start, length, done));
    done += length;
  }
  return ok_status();
}

Status DeltaRecorder::record(uint64_t first, uint64_t count, const uint8_t* old_bytes,
                             const uint8_t* new_bytes) {
  return for_each_run(first, count,
                      [&](uint32_t chunk, uint32_t start, uint32_t length, uint64_t done) {
                        return record_part(chunk, start, length, old_bytes + done * elem_size_,
                                           new_bytes + done * elem_size_);
                      });
}

Status DeltaRecorder::record_write(uint64_t first, uint64_t count, uint8_t* live,
                                   const uint8_t* new_bytes, DeferredEncoder* encoder) {
  return for_each_run(
      first, count, [&](uint32_t chunk, uint32_t start, uint32_t length, uint64_t done) -> Status {
        uint8_t* to = live + done * elem_size_;
        const uint8_t* from = new_bytes + done * elem_size_;
        if (start == 0 && length == header_.chunk_length(chunk)) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (state_[chunk] >= 1) return written_twice(chunk, start, length);
            state_[chunk] = 2;
            written_ += length;
          }
          if (encoder == nullptr || capture_bytes(length, elem_size_) > encoder->slot_bytes()) {
            encode_writing(chunk, to, from);
            return ok_status();
          }
          uint8_t* slot = encoder->acquire();
          capture_and_copy_changes(to, from, length, elem_size_, slot);
          encoder->submit(slot, [this, chunk, to, slot] { encode_captured(chunk, to, slot); });
          return ok_status();
        }
        RETURN_IF_ERROR(record_part(chunk, start, length, to, from));
        std::memcpy(to, from, size_t{length} * elem_size_);
        return ok_status();
      });
}

Result<EncodedDelta> DeltaRecorder::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t c = 0; c < state_.size(); ++c) {
    if (state_[c] == 3) continue;
    uint64_t first = uint64_t{header_.chunk_elements} * c;
    if (state_[c] == 1) {
      // The first gap among the chunk's written runs.
      uint32_t end = 0;
      for (const auto& [s, e] : pending_.at(c).runs) {
        if (s != end) break;
        end = e;
      }
      first += end;
    }
    return failed_precondition("tensor '" + options_.name +
                               "': " + std::to_string(elements_ - written_) +
                               " elements never written by the step of version " +
                               std::to_string(options_.target_version) + " (the first is element " +
                               std::to_string(first) + ")");
  }
  EncodedDelta out;
  out.header = header_;
  out.header.changed = changed_;
  out.header.target_checksum = header_.base_checksum + checksum_change_;
  std::vector<std::vector<uint8_t>> payloads(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    ++out.chunks_by_mode[static_cast<size_t>(chunks_[c].mode)];
    payloads[c] = std::move(chunks_[c].bytes);
  }
  out.record = assemble_delta_record(out.header, payloads);
  return out;
}

}  // namespace weightcast
