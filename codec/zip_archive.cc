#include "codec/zip_archive.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "codec/byte_io.h"

namespace weightcast {
namespace {

// Record signatures and fixed sizes (APPNOTE.TXT 4.3).
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalBytes = 30;
constexpr size_t kCentralBytes = 46;
constexpr size_t kEocdBytes = 22;
constexpr size_t kZip64EocdBytes = 56;
constexpr size_t kZip64LocatorBytes = 20;
constexpr uint32_t kMax32 = 0xFFFFFFFF;  // "see the ZIP64 field" in a 32-bit field
constexpr uint16_t kMax16 = 0xFFFF;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kPaddingExtraId = 0x4246;  // the bytes "FB", PyTorch's padding field
constexpr uint16_t kFlagEncrypted = 0x0001;
constexpr uint16_t kFlagDataDescriptor = 0x0008;
constexpr uint16_t kFlagUtf8 = 0x0800;
constexpr uint16_t kVersionClassic = 20;
constexpr uint16_t kVersionZip64 = 45;
constexpr uint16_t kDosDate1980 = 0x0021;  // 1980-01-01: fixed, so output is reproducible

// A name as it appears in messages: control bytes shown as '?', at most 200 bytes.
std::string shown(std::string_view name) {
  std::string out(name.substr(0, 200));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return name.size() > 200 ? out + "..." : out;
}

}  // namespace

uint32_t zip_crc32(std::span<const uint8_t> data, uint32_t crc) {
  return static_cast<uint32_t>(crc32_z(crc, data.data(), data.size()));
}

Status validate_zip_entry_name(std::string_view name, size_t max_length) {
  const auto bad = [&](const char* why) {
    return data_loss("zip entry name '" + shown(name) + "' " + why);
  };
  if (name.empty()) return data_loss("zip entry with an empty name");
  if (name.size() > max_length) {
    return out_of_range("zip entry name of " + std::to_string(name.size()) +
                        " bytes exceeds the limit of " + std::to_string(max_length) + " (name '" +
                        shown(name.substr(0, 64)) + "...')");
  }
  if (name.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (name.find('\\') != std::string_view::npos) return bad("contains a backslash");
  if (name.front() == '/') return bad("is an absolute path");
  if (name.size() >= 2 && name[1] == ':') return bad("is an absolute path (drive letter)");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    if (part == "..") return bad("has a '..' component");
    if (part.empty() || part == ".") return bad("has an empty or '.' component");
    start = end + 1;
  }
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// Writer

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

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

bool fits(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

std::string hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string at(uint64_t offset) {
  return " at offset " + std::to_string(offset);
}

// Walks the extra fields of a header and, from its ZIP64 field, replaces the values whose
// classic field held 0xFFFFFFFF, in the fixed order uncompressed, compressed, offset.
Status resolve_zip64(std::span<const uint8_t> extra, const std::string& what,
                     uint64_t* uncompressed, uint64_t* compressed, uint64_t* offset) {
  uint64_t* wanted[3] = {uncompressed, compressed, offset};
  size_t needed = 0;
  for (uint64_t* v : wanted) needed += (v != nullptr && *v == kMax32) ? 8 : 0;
  bool found = false;
  size_t pos = 0;
  while (pos < extra.size()) {
    if (extra.size() - pos < 4) return data_loss(what + ": malformed extra field (truncated)");
    const uint16_t id = load_le<uint16_t>(extra.data() + pos);
    const uint16_t len = load_le<uint16_t>(extra.data() + pos + 2);
    if (len > extra.size() - pos - 4) {
      return data_loss(what + ": malformed extra field (id " + std::to_string(id) + ", " +
                       std::to_string(len) + " bytes, past the end of the extra data)");
    }
    if (id == kZip64ExtraId && !found && needed > 0) {
      if (len < needed) return data_loss(what + ": ZIP64 extra field too short");
      size_t field = pos + 4;
      for (uint64_t* v : wanted) {
        if (v == nullptr || *v != kMax32) continue;
        *v = load_le<uint64_t>(extra.data() + field);
        field += 8;
      }
      found = true;
    }
    pos += 4 + size_t{len};
  }
  if (needed > 0 && !found) return data_loss(what + ": needs a ZIP64 extra field but has none");
  return ok_status();
}

}  // namespace

const ZipEntry* ZipArchive::find(std::string_view name) const {
  for (const ZipEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Status verify_zip_entry_crc(const ZipEntry& entry) {
  const uint32_t actual = zip_crc32(entry.data);
  if (actual != entry.crc32) {
    return data_loss("zip entry '" + shown(entry.name) + "': CRC32 mismatch (stored " +
                     hex32(entry.crc32) + ", data has " + hex32(actual) + ")");
  }
  return ok_status();
}

Result<ZipArchive> parse_zip(std::span<const uint8_t> file, const ZipLimits& limits) {
  const uint8_t* p = file.data();
  const uint64_t size = file.size();
  if (size < kEocdBytes) {
    return data_loss("zip: file of " + std::to_string(size) +
                     " bytes is too short for an end of central directory record");
  }
  // The end record is the last 22 bytes plus a comment of at most 64 KiB: search backwards
  // for its signature with a comment length that reaches exactly the end of the file.
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = size - kEocdBytes > kMax16 ? size - kEocdBytes - kMax16 : 0;
  for (uint64_t pos = size - kEocdBytes;; --pos) {
    if (load_le<uint32_t>(p + pos) == kEocdSig &&
        pos + kEocdBytes + load_le<uint16_t>(p + pos + 20) == size) {
      eocd = pos;
      break;
    }
    if (pos == lowest) break;
  }
  if (eocd == UINT64_MAX) {
    return data_loss("zip: no end of central directory record in the last " +
                     std::to_string(size - lowest) + " bytes (not a zip file, or truncated)");
  }
  const uint8_t* e = p + eocd;
  uint64_t count = load_le<uint16_t>(e + 10);
  uint64_t cd_size = load_le<uint32_t>(e + 12);
  uint64_t cd_offset = load_le<uint32_t>(e + 16);
  uint64_t end_records = eocd;  // where the central directory must end
  ZipArchive out;
  if (load_le<uint16_t>(e + 4) != 0 || load_le<uint16_t>(e + 6) != 0 ||
      load_le<uint16_t>(e + 8) != count) {
    return data_loss("zip: multi-disk archives are not supported (end record" + at(eocd) + ")");
  }
  if (eocd >= kZip64LocatorBytes && load_le<uint32_t>(e - kZip64LocatorBytes) == kZip64LocatorSig) {
    const uint64_t loc = eocd - kZip64LocatorBytes;
    const uint64_t rec = load_le<uint64_t>(p + loc + 8);
    if (load_le<uint32_t>(p + loc + 4) != 0 || load_le<uint32_t>(p + loc + 16) > 1) {
      return data_loss("zip: multi-disk archives are not supported (ZIP64 locator" + at(loc) + ")");
    }
    if (!fits(rec, kZip64EocdBytes, loc) || load_le<uint32_t>(p + rec) != kZip64EocdSig) {
      return data_loss("zip: the ZIP64 locator" + at(loc) + " points to offset " +
                       std::to_string(rec) + ", which holds no ZIP64 end record");
    }
    const uint8_t* z = p + rec;
    if (load_le<uint64_t>(z + 4) != loc - rec - 12) {
      return data_loss("zip: ZIP64 end record" + at(rec) + " does not end at its locator");
    }
    const uint64_t count64 = load_le<uint64_t>(z + 32);
    const uint64_t size64 = load_le<uint64_t>(z + 40);
    const uint64_t offset64 = load_le<uint64_t>(z + 48);
    if (load_le<uint32_t>(z + 16) != 0 || load_le<uint32_t>(z + 20) != 0 ||
        load_le<uint64_t>(z + 24) != count64) {
      return data_loss("zip: multi-disk archives are not supported (ZIP64 end record" + at(rec) +
                       ")");
    }
    // A classic field either says "see ZIP64" or must agree with the ZIP64 value.
    if ((count != kMax16 && count != count64) || (cd_size != kMax32 && cd_size != size64) ||
        (cd_offset != kMax32 && cd_offset != offset64)) {
      return data_loss("zip: end of central directory record" + at(eocd) +
                       " disagrees with the ZIP64 end record" + at(rec));
    }
    count = count64;
    cd_size = size64;
    cd_offset = offset64;
    end_records = rec;
    out.zip64 = true;
  }
  if (count > limits.max_entries) {
    return out_of_range("zip: " + std::to_string(count) + " entries exceed the limit of " +
                        std::to_string(limits.max_entries));
  }
  if (!fits(cd_offset, cd_size, end_records) || cd_offset + cd_size != end_records) {
    return data_loss("zip: central directory (offset " + std::to_string(cd_offset) + ", " +
                     std::to_string(cd_size) + " bytes) does not end where the end records start" +
                     at(end_records));
  }
  if (cd_size / kCentralBytes < count) {
    return data_loss("zip: central directory of " + std::to_string(cd_size) +
                     " bytes cannot hold " + std::to_string(count) + " entries");
  }
  out.entries.reserve(count);
  std::unordered_set<std::string_view> names;  // views into `file`, stable
  const uint64_t cd_end = cd_offset + cd_size;
  uint64_t pos = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    const auto entry_at = [&] { return "central directory entry #" + std::to_string(i) + at(pos); };
    if (!fits(pos, kCentralBytes, cd_end)) return data_loss("zip: truncated " + entry_at());
    const uint8_t* c = p + pos;
    if (load_le<uint32_t>(c) != kCentralSig)
      return data_loss("zip: bad signature of " + entry_at());
    const uint16_t flags = load_le<uint16_t>(c + 8);
    const uint16_t method = load_le<uint16_t>(c + 10);
    const uint32_t crc = load_le<uint32_t>(c + 16);
    uint64_t compressed = load_le<uint32_t>(c + 20);
    uint64_t uncompressed = load_le<uint32_t>(c + 24);
    const size_t name_len = load_le<uint16_t>(c + 28);
    const size_t extra_len = load_le<uint16_t>(c + 30);
    const size_t comment_len = load_le<uint16_t>(c + 32);
    uint64_t local = load_le<uint32_t>(c + 42);
    if (!fits(pos + kCentralBytes, name_len + extra_len + comment_len, cd_end)) {
      return data_loss("zip: truncated " + entry_at());
    }
    const std::string_view name(reinterpret_cast<const char*>(c + kCentralBytes), name_len);
    RETURN_IF_ERROR(validate_zip_entry_name(name, limits.max_name_length));
    const std::string what = "zip entry '" + shown(name) + "'";
    if (flags & kFlagEncrypted) return data_loss(what + " is encrypted");
    if (method != 0) {
      return data_loss(what + " uses compression method " + std::to_string(method) +
                       "; only stored (method 0) entries are accepted");
    }
    if (load_le<uint16_t>(c + 34) != 0) return data_loss(what + " starts on another disk");
    RETURN_IF_ERROR(resolve_zip64(std::span(c + kCentralBytes + name_len, extra_len), what,
                                  &uncompressed, &compressed, &local));
    if (compressed != uncompressed) {
      return data_loss(what + " is stored but its compressed size " + std::to_string(compressed) +
                       " differs from its size " + std::to_string(uncompressed));
    }
    if (!names.insert(name).second) {
      return data_loss("zip: duplicate entry name '" + shown(name) + "'");
    }

    // The local header must exist, name the same entry and agree on method, CRC and size
    // (with a data descriptor, bit 3, it may leave CRC and sizes zero, as PyTorch's does).
    if (!fits(local, kLocalBytes, cd_offset)) {
      return data_loss(what + ": local header offset " + std::to_string(local) +
                       " is outside the data area (central directory" + at(cd_offset) + ")");
    }
    const uint8_t* l = p + local;
    if (load_le<uint32_t>(l) != kLocalSig) return data_loss(what + ": no local header" + at(local));
    const uint16_t local_flags = load_le<uint16_t>(l + 6);
    const uint32_t local_crc = load_le<uint32_t>(l + 14);
    uint64_t local_compressed = load_le<uint32_t>(l + 18);
    uint64_t local_uncompressed = load_le<uint32_t>(l + 22);
    const size_t local_name_len = load_le<uint16_t>(l + 26);
    const size_t local_extra_len = load_le<uint16_t>(l + 28);
    if (!fits(local + kLocalBytes, local_name_len + local_extra_len, cd_offset)) {
      return data_loss(what + ": truncated local header" + at(local));
    }
    const std::string_view local_name(reinterpret_cast<const char*>(l + kLocalBytes),
                                      local_name_len);
    if (local_name != name) {
      return data_loss(what + ": local header" + at(local) + " names it '" + shown(local_name) +
                       "'");
    }
    RETURN_IF_ERROR(resolve_zip64(std::span(l + kLocalBytes + local_name_len, local_extra_len),
                                  what + " (local header)", &local_uncompressed, &local_compressed,
                                  nullptr));
    const bool deferred = (local_flags & kFlagDataDescriptor) != 0;
    const auto agrees = [&](uint64_t local_value, uint64_t central_value) {
      return local_value == central_value || (deferred && local_value == 0);
    };
    if (load_le<uint16_t>(l + 8) != method || ((local_flags ^ flags) & kFlagEncrypted) ||
        !agrees(local_crc, crc) || !agrees(local_compressed, compressed) ||
        !agrees(local_uncompressed, uncompressed)) {
      return data_loss(what + ": local header" + at(local) + " (method " +
                       std::to_string(load_le<uint16_t>(l + 8)) + ", CRC32 " + hex32(local_crc) +
                       ", size " + std::to_string(local_uncompressed) +
                       ") disagrees with the central directory (method " + std::to_string(method) +
                       ", CRC32 " + hex32(crc) + ", size " + std::to_string(uncompressed) + ")");
    }
    const uint64_t data_offset = local + kLocalBytes + local_name_len + local_extra_len;
    if (!fits(data_offset, uncompressed, cd_offset)) {
      return data_loss(what + ": data (" + std::to_string(uncompressed) + " bytes" +
                       at(data_offset) + ") runs past the end of the entry data" + at(cd_offset));
    }
    ZipEntry entry;
    entry.name = std::string(name);
    entry.data = file.subspan(data_offset, uncompressed);
    entry.crc32 = crc;
    entry.local_header_offset = local;
    entry.data_offset = data_offset;
    if (limits.verify_crc) RETURN_IF_ERROR(verify_zip_entry_crc(entry));
    out.entries.push_back(std::move(entry));
    pos += kCentralBytes + name_len + extra_len + comment_len;
  }
  if (pos != cd_end) {
    return data_loss("zip: central directory has " + std::to_string(cd_end - pos) +
                     " bytes after its " + std::to_string(count) + " entries");
  }
  // Entries (local header through data) must not overlap: each byte belongs to one entry.
  std::vector<const ZipEntry*> by_offset;
  by_offset.reserve(out.entries.size());
  for (const ZipEntry& x : out.entries) by_offset.push_back(&x);
  std::sort(by_offset.begin(), by_offset.end(), [](const ZipEntry* a, const ZipEntry* b) {
    return a->local_header_offset < b->local_header_offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ZipEntry& a = *by_offset[i - 1];
    const ZipEntry& b = *by_offset[i];
    if (b.local_header_offset < a.data_offset + a.data.size()) {
      return data_loss("zip entries '" + shown(a.name) + "' and '" + shown(b.name) + "' overlap" +
                       at(b.local_header_offset));
    }
  }
  return out;
}

}  // namespace weightcast
