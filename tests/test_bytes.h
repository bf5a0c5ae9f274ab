// Byte-buffer helpers shared by the format tests and the fuzz seeds.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/tensor_bytes.h"

namespace weightcast::testing {

using Bytes = std::vector<uint8_t>;

// "0a1b..." -> bytes.
inline Bytes from_hex(std::string_view hex) {
  Bytes out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

inline Bytes bytes_of(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

// A ByteSink that appends to `out`.
inline ByteSink sink_into(Bytes* out) {
  return [out](std::span<const uint8_t> b) {
    out->insert(out->end(), b.begin(), b.end());
    return ok_status();
  };
}

}  // namespace weightcast::testing
