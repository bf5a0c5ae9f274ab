// The ZIP writer: stored entries with aligned data, in one forward pass to a ByteSink.
#include "codec/formats/zip_archive.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/formats/zip_records.h"

namespace weightcast {

using zip_internal::kCentralBytes;
using zip_internal::kCentralSig;
using zip_internal::kDosDate1980;
using zip_internal::kEocdSig;
using zip_internal::kFlagUtf8;
using zip_internal::kLocalBytes;
using zip_internal::kLocalSig;
using zip_internal::kMax16;
using zip_internal::kMax32;
using zip_internal::kPaddingExtraId;
using zip_internal::kVersionClassic;
using zip_internal::kVersionZip64;
using zip_internal::kZip64EocdBytes;
using zip_internal::kZip64EocdSig;
using zip_internal::kZip64ExtraId;
using zip_internal::kZip64LocatorSig;

ZipWriter::ZipWriter(ByteSink sink, ZipWriterOptions options)
    : sink_(std::move(sink)), options_(options) {}

Status ZipWriter::fail(Status status) {
  if (error_.ok()) error_ = status;
  return status;
}

Status ZipWriter::check_usable() const {
  if (!error_.ok()) return error_;
  if (finished_) return invalid_argument("zip writer: archive already finished");
  return ok_status();
}

Status ZipWriter::emit(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return ok_status();
  Status s = sink_(bytes);
  if (!s.ok()) return fail(s);
  offset_ += bytes.size();
  return ok_status();
}

Status ZipWriter::begin_stored(std::string_view name, uint64_t size, uint32_t crc32) {
  RETURN_IF_ERROR(check_usable());
  const uint64_t align = options_.alignment;
  if (align == 0 || align > 4096 || (align & (align - 1)) != 0) {
    return fail(invalid_argument("zip writer: alignment " + std::to_string(align) +
                                 " is not a power of two <= 4096"));
  }
  if (open_) {
    return fail(invalid_argument("zip writer: entry '" + entries_.back().name +
                                 "' is still open when adding '" + std::string(name) + "'"));
  }
  Status named = validate_zip_entry_name(name, std::min<size_t>(options_.max_name_length, kMax16));
  if (!named.ok()) return fail(invalid_argument(named.message()));
  if (!names_.insert(std::string(name)).second) {
    return fail(invalid_argument("zip writer: duplicate entry name '" + std::string(name) + "'"));
  }
  Written e;
  e.name = std::string(name);
  e.local_offset = offset_;
  e.size = size;
  e.crc32 = crc32;
  e.zip64_sizes = options_.force_zip64 || size >= kMax32;

  // Data starts after the fixed header, the name, the ZIP64 extra (4 + 16) and the "FB"
  // padding field's own 4 bytes; the padding brings that to the next multiple of `align`.
  const uint64_t unpadded = offset_ + kLocalBytes + name.size() + (e.zip64_sizes ? 20 : 0) + 4;
  const uint64_t pad = (align - unpadded % align) % align;
  std::vector<uint8_t> h;
  h.reserve(kLocalBytes + name.size() + 24 + pad);
  append_le<uint32_t>(&h, kLocalSig);
  append_le<uint16_t>(&h, e.zip64_sizes ? kVersionZip64 : kVersionClassic);
  append_le<uint16_t>(&h, kFlagUtf8);
  append_le<uint16_t>(&h, 0);  // method: stored
  append_le<uint16_t>(&h, 0);  // time 00:00
  append_le<uint16_t>(&h, kDosDate1980);
  append_le<uint32_t>(&h, crc32);
  const uint32_t size32 = e.zip64_sizes ? kMax32 : static_cast<uint32_t>(size);
  append_le<uint32_t>(&h, size32);  // compressed
  append_le<uint32_t>(&h, size32);  // uncompressed
  append_le<uint16_t>(&h, static_cast<uint16_t>(name.size()));
  append_le<uint16_t>(&h, static_cast<uint16_t>((e.zip64_sizes ? 20 : 0) + 4 + pad));
  h.insert(h.end(), name.begin(), name.end());
  if (e.zip64_sizes) {
    append_le<uint16_t>(&h, kZip64ExtraId);
    append_le<uint16_t>(&h, 16);
    append_le<uint64_t>(&h, size);  // uncompressed, then compressed (APPNOTE 4.5.3)
    append_le<uint64_t>(&h, size);
  }
  append_le<uint16_t>(&h, kPaddingExtraId);
  append_le<uint16_t>(&h, static_cast<uint16_t>(pad));
  h.insert(h.end(), pad, 'Z');
  RETURN_IF_ERROR(emit(h));
  entries_.push_back(std::move(e));
  open_ = true;
  open_remaining_ = size;
  open_crc_ = 0;
  verify_open_crc_ = true;
  return ok_status();
}

Status ZipWriter::append(std::span<const uint8_t> piece) {
  RETURN_IF_ERROR(check_usable());
  if (!open_) return fail(invalid_argument("zip writer: append() without an open entry"));
  if (piece.size() > open_remaining_) {
    return fail(invalid_argument("zip writer: entry '" + entries_.back().name +
                                 "' got more than its declared " +
                                 std::to_string(entries_.back().size) + " bytes"));
  }
  if (verify_open_crc_) open_crc_ = zip_crc32(piece, open_crc_);
  open_remaining_ -= piece.size();
  return emit(piece);
}

Status ZipWriter::end_stored() {
  RETURN_IF_ERROR(check_usable());
  if (!open_) return fail(invalid_argument("zip writer: end_stored() without an open entry"));
  const Written& e = entries_.back();
  if (open_remaining_ != 0) {
    return fail(invalid_argument("zip writer: entry '" + e.name + "' ended " +
                                 std::to_string(open_remaining_) + " bytes short of its size " +
                                 std::to_string(e.size)));
  }
  if (verify_open_crc_ && open_crc_ != e.crc32) {
    return fail(invalid_argument("zip writer: entry '" + e.name + "' declared CRC32 " +
                                 std::to_string(e.crc32) + " but its bytes have " +
                                 std::to_string(open_crc_)));
  }
  open_ = false;
  return ok_status();
}

Status ZipWriter::add_stored(std::string_view name, std::span<const uint8_t> data) {
  RETURN_IF_ERROR(begin_stored(name, data.size(), zip_crc32(data)));
  verify_open_crc_ = false;  // computed from these very bytes just above
  RETURN_IF_ERROR(append(data));
  return end_stored();
}

std::vector<uint8_t> ZipWriter::central_record(const Written& e) const {
  const bool size64 = options_.force_zip64 || e.size >= kMax32;
  const bool offset64 = options_.force_zip64 || e.local_offset >= kMax32;
  const uint16_t extra = (size64 || offset64) ? 4 + (size64 ? 16 : 0) + (offset64 ? 8 : 0) : 0;
  std::vector<uint8_t> c;
  c.reserve(kCentralBytes + e.name.size() + extra);
  append_le<uint32_t>(&c, kCentralSig);
  append_le<uint16_t>(&c, kVersionZip64);  // made by: spec 4.5, MS-DOS attributes
  append_le<uint16_t>(&c, extra ? kVersionZip64 : kVersionClassic);
  append_le<uint16_t>(&c, kFlagUtf8);
  append_le<uint16_t>(&c, 0);  // stored
  append_le<uint16_t>(&c, 0);
  append_le<uint16_t>(&c, kDosDate1980);
  append_le<uint32_t>(&c, e.crc32);
  append_le<uint32_t>(&c, size64 ? kMax32 : static_cast<uint32_t>(e.size));
  append_le<uint32_t>(&c, size64 ? kMax32 : static_cast<uint32_t>(e.size));
  append_le<uint16_t>(&c, static_cast<uint16_t>(e.name.size()));
  append_le<uint16_t>(&c, extra);
  append_le<uint16_t>(&c, 0);  // comment length
  append_le<uint16_t>(&c, 0);  // disk number start
  append_le<uint16_t>(&c, 0);  // internal attributes
  append_le<uint32_t>(&c, 0);  // external attributes
  append_le<uint32_t>(&c, offset64 ? kMax32 : static_cast<uint32_t>(e.local_offset));
  c.insert(c.end(), e.name.begin(), e.name.end());
  if (extra) {
    append_le<uint16_t>(&c, kZip64ExtraId);
    append_le<uint16_t>(&c, static_cast<uint16_t>(extra - 4));
    if (size64) {
      append_le<uint64_t>(&c, e.size);
      append_le<uint64_t>(&c, e.size);
    }
    if (offset64) append_le<uint64_t>(&c, e.local_offset);
  }
  return c;
}

Status ZipWriter::finish() {
  RETURN_IF_ERROR(check_usable());
  if (open_) {
    return fail(invalid_argument("zip writer: finish() while entry '" + entries_.back().name +
                                 "' is open"));
  }
  const uint64_t cd_offset = offset_;
  for (const Written& e : entries_) RETURN_IF_ERROR(emit(central_record(e)));
  const uint64_t cd_size = offset_ - cd_offset;
  const uint64_t count = entries_.size();
  const bool force = options_.force_zip64;
  const bool count64 = force || count >= kMax16;
  const bool size64 = force || cd_size >= kMax32;
  const bool offset64 = force || cd_offset >= kMax32;
  std::vector<uint8_t> t;
  if (count64 || size64 || offset64) {
    const uint64_t record_at = offset_;
    append_le<uint32_t>(&t, kZip64EocdSig);
    append_le<uint64_t>(&t, kZip64EocdBytes - 12);  // size of the rest of the record
    append_le<uint16_t>(&t, kVersionZip64);
    append_le<uint16_t>(&t, kVersionZip64);
    append_le<uint32_t>(&t, 0);  // this disk
    append_le<uint32_t>(&t, 0);  // disk with the central directory
    append_le<uint64_t>(&t, count);
    append_le<uint64_t>(&t, count);
    append_le<uint64_t>(&t, cd_size);
    append_le<uint64_t>(&t, cd_offset);
    append_le<uint32_t>(&t, kZip64LocatorSig);
    append_le<uint32_t>(&t, 0);
    append_le<uint64_t>(&t, record_at);
    append_le<uint32_t>(&t, 1);  // total disks (miniz insists on 1)
  }
  append_le<uint32_t>(&t, kEocdSig);
  append_le<uint16_t>(&t, 0);
  append_le<uint16_t>(&t, 0);
  append_le<uint16_t>(&t, count64 ? kMax16 : static_cast<uint16_t>(count));
  append_le<uint16_t>(&t, count64 ? kMax16 : static_cast<uint16_t>(count));
  append_le<uint32_t>(&t, size64 ? kMax32 : static_cast<uint32_t>(cd_size));
  append_le<uint32_t>(&t, offset64 ? kMax32 : static_cast<uint32_t>(cd_offset));
  append_le<uint16_t>(&t, 0);  // comment length
  RETURN_IF_ERROR(emit(t));
  finished_ = true;
  return ok_status();
}

}  // namespace weightcast
