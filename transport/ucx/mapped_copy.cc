// copy_from_mapping (mapped_copy.h).
#include "transport/ucx/mapped_copy.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace weightcast {
namespace {

#if defined(__x86_64__)

// Copies the bytes before the first `align`-aligned destination address; returns how many.
size_t copy_head(uint8_t* to, const uint8_t* from, size_t n, size_t align) {
  size_t head = (align - reinterpret_cast<uintptr_t>(to) % align) % align;
  if (head > n) head = n;
  std::memcpy(to, from, head);
  return head;
}

__attribute__((target("avx2"))) void copy_avx2(uint8_t* to, const uint8_t* from, size_t n) {
  const size_t head = copy_head(to, from, n, 32);
  to += head, from += head, n -= head;
  for (; n >= 128; n -= 128, to += 128, from += 128) {
    const auto* s = reinterpret_cast<const __m256i*>(from);
    auto* d = reinterpret_cast<__m256i*>(to);
    const __m256i a = _mm256_loadu_si256(s), b = _mm256_loadu_si256(s + 1),
                  c = _mm256_loadu_si256(s + 2), e = _mm256_loadu_si256(s + 3);
    _mm256_store_si256(d, a);
    _mm256_store_si256(d + 1, b);
    _mm256_store_si256(d + 2, c);
    _mm256_store_si256(d + 3, e);
  }
  std::memcpy(to, from, n);  // under 128 bytes: below glibc's rep movsb threshold
}

void copy_sse2(uint8_t* to, const uint8_t* from, size_t n) {
  const size_t head = copy_head(to, from, n, 16);
  to += head, from += head, n -= head;
  for (; n >= 64; n -= 64, to += 64, from += 64) {
    const auto* s = reinterpret_cast<const __m128i*>(from);
    auto* d = reinterpret_cast<__m128i*>(to);
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                  e = _mm_loadu_si128(s + 3);
    _mm_store_si128(d, a);
    _mm_store_si128(d + 1, b);
    _mm_store_si128(d + 2, c);
    _mm_store_si128(d + 3, e);
  }
  std::memcpy(to, from, n);
}

#endif

}  // namespace

void copy_from_mapping(uint8_t* to, const uint8_t* from, size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    copy_avx2(to, from, n);
  } else {
    copy_sse2(to, from, n);
  }
#else
  std::memcpy(to, from, n);
#endif
}

}  // namespace weightcast
