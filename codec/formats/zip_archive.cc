// The parts of the ZIP codec that the writer and the reader share: CRC-32 and entry-name
// validation, and how names appear in messages.
#include "codec/formats/zip_archive.h"

#include <zlib.h>

#include <string>

#include "codec/formats/zip_records.h"

namespace weightcast {
namespace zip_internal {

// A name as it appears in messages: control bytes shown as '?', at most 200 bytes.
std::string shown(std::string_view name) {
  std::string out(name.substr(0, 200));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return name.size() > 200 ? out + "..." : out;
}

}  // namespace zip_internal

using zip_internal::shown;

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

}  // namespace weightcast
