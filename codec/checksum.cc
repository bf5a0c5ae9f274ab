#include "codec/checksum.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/checksum_avx2.h"
#include "codec/cpu_dispatch.h"
#include "codec/host_codec.h"

namespace weightcast {
namespace {

// Elements per inner block: local weights (j + 1) stay below 2^32 so that (j + 1) * m is a
// 32x32->64 multiply, which vectorises; C over a block at global offset g is then
// g * S + W with S = sum m and W = sum (j + 1) m.
constexpr uint64_t kBlock = 1u << 20;

template <typename U>
void block_sums(const uint8_t* __restrict p, uint32_t n, uint64_t* s_out, uint64_t* w_out) {
  uint64_t s = 0, w = 0;
  for (uint32_t j = 0; j < n; ++j) {
    U bits;
    std::memcpy(&bits, p + size_t{j} * sizeof(U), sizeof(U));  // no alignment assumed
    const uint32_t m = checksum_fmix32(static_cast<uint32_t>(bits) ^ kChecksumSeed32);
    s += m;
    w += static_cast<uint64_t>(j + 1) * m;
  }
  *s_out = s;
  *w_out = w;
}

uint64_t checksum_serial(const uint8_t* data, size_t elem_size, uint64_t count,
                         uint64_t first_index) {
  uint64_t c = 0;
  if (elem_size == 8) {
    for (uint64_t k = 0; k < count; ++k) {
      uint64_t bits;
      std::memcpy(&bits, data + k * 8, 8);
      c += (first_index + k + 1) * checksum_mix(bits, 8);
    }
    return c;
  }
  for (uint64_t start = 0; start < count; start += kBlock) {
    const auto n = static_cast<uint32_t>(std::min(kBlock, count - start));
    uint64_t s = 0, w = 0;
    const uint8_t* p = data + start * elem_size;
    if (cpu_has_avx2()) {
      checksum_block_avx2(p, n, elem_size, &s, &w);
    } else {
      switch (elem_size) {
        case 1:
          block_sums<uint8_t>(p, n, &s, &w);
          break;
        case 2:
          block_sums<uint16_t>(p, n, &s, &w);
          break;
        default:
          block_sums<uint32_t>(p, n, &s, &w);
          break;
      }
    }
    c += (first_index + start) * s + w;
  }
  return c;
}

}  // namespace

uint64_t checksum_range(const void* data, size_t elem_size, uint64_t count, uint64_t first_index,
                        ThreadPool* pool) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  constexpr uint64_t kMinParallel = 4 * kBlock;
  if (pool == nullptr || pool->size() < 2 || count < kMinParallel) {
    return checksum_serial(bytes, elem_size, count, first_index);
  }
  const uint64_t pieces = (count + kBlock - 1) / kBlock;
  std::vector<uint64_t> parts(pieces);
  pool->parallel_for(pieces, [&](size_t k) {
    const uint64_t start = k * kBlock;
    const uint64_t n = std::min(kBlock, count - start);
    parts[k] = checksum_serial(bytes + start * elem_size, elem_size, n, first_index + start);
  });
  uint64_t c = 0;
  for (uint64_t p : parts) c += p;
  return c;
}

Result<uint64_t> checksum_view_host(const TensorRef& view, uint64_t first_index, ThreadPool* pool) {
  RETURN_IF_ERROR(view.validate());
  const size_t es = view.element_size();
  if (view.is_contiguous())
    return checksum_range(view.first_byte(), es, view.numel(), first_index, pool);
  const ElementAddresser addr(view);
  const uint8_t* base = view.first_byte();
  uint64_t c = 0;
  const uint64_t n = view.numel();
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t bits = 0;
    std::memcpy(&bits, base + addr.offset_of(k) * static_cast<int64_t>(es), es);
    c += (first_index + k + 1) * checksum_mix(bits, es);
  }
  return c;
}

}  // namespace weightcast
