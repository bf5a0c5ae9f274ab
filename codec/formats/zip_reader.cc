// The ZIP reader: parses and validates a whole archive held in memory.
#include "codec/formats/zip_archive.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/formats/zip_records.h"

namespace weightcast {

using zip_internal::kCentralBytes;
using zip_internal::kCentralSig;
using zip_internal::kEocdBytes;
using zip_internal::kEocdSig;
using zip_internal::kFlagDataDescriptor;
using zip_internal::kFlagEncrypted;
using zip_internal::kLocalBytes;
using zip_internal::kLocalSig;
using zip_internal::kMax16;
using zip_internal::kMax32;
using zip_internal::kZip64EocdBytes;
using zip_internal::kZip64EocdSig;
using zip_internal::kZip64ExtraId;
using zip_internal::kZip64LocatorBytes;
using zip_internal::kZip64LocatorSig;
using zip_internal::shown;

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
