// Fixed-width hexadecimal for checksums and hashes in messages: "0x" + 16 digits.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace weightcast {

// 16 lowercase hex digits, the form FORMATS.md and `delta inspect` use for checksums.
inline std::string hex_digits16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
inline std::string hex16(uint64_t v) {
  return "0x" + hex_digits16(v);
}

}  // namespace weightcast
