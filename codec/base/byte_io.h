// Little-endian loads and stores on byte buffers, and a bounds-checked cursor for parsers.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace weightcast {

template <typename T>
inline T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // hosts are little-endian (x86-64, aarch64)
  return v;
}

template <typename T>
inline void store_le(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <typename T>
inline void append_le(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

// Reads fields in order from a span; a read past the end fails instead of overrunning.
class ByteCursor {
 public:
  explicit ByteCursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  bool read(T* v) {
    if (remaining() < sizeof(T)) return false;
    *v = load_le<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return true;
  }
  bool take(size_t n, std::span<const uint8_t>* out) {
    if (remaining() < n) return false;
    *out = bytes_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

}  // namespace weightcast
