// The parts of the torch pickle codec that the writer and the reader share: which dtypes have a
// typed storage class, and the UTF-8 check for names and keys.
#include "codec/formats/torch_pickle.h"

#include <cstdint>
#include <string_view>

#include "codec/formats/pickle_opcodes.h"

namespace weightcast {
namespace pickle_internal {

// Strict UTF-8 (what Python's str decode accepts, minus the surrogates that only
// "surrogatepass" lets through, which no tensor name needs).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t n = c < 0x80             ? 0
               : (c & 0xe0) == 0xc0 ? 1
               : (c & 0xf0) == 0xe0 ? 2
               : (c & 0xf8) == 0xf0 ? 3
                                    : 4;
    if (n == 4 || s.size() - i - 1 < n) return false;
    uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace pickle_internal

bool torch_has_typed_storage(DType dtype) {
  return dtype != DType::kF8E4M3FN && dtype != DType::kF8E5M2;
}

}  // namespace weightcast
