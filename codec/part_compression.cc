#include "codec/part_compression.h"

#include <zstd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "codec/base/byte_io.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace weightcast {
namespace {

bool valid_width(uint32_t width) {
  return width == 1 || width == 2 || width == 4 || width == 8;
}

// Contexts are reused per thread: creating them costs allocations (and, for compression,
// page faults on fresh tables) that are noticeable on parts of a few hundred KiB.
struct ZstdDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* thread_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, ZstdDeleter> cctx(ZSTD_createCCtx());
  return cctx.get();
}

ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, ZstdDeleter> dctx(ZSTD_createDCtx());
  return dctx.get();
}

// The planes are a W x n byte matrix transpose. With SSE2 (every x86-64) 16 elements go
// through registers at once: a 2-way split is a mask/shift plus a saturating pack, and W ways
// are log2(W) rounds of it; joining is the same tree with unpacklo/hi. Elsewhere a scalar
// loop with W known at compile time, which compilers vectorise at -O3.
#if defined(__SSE2__)
constexpr size_t kBlockElements = 16;

// v[0..W) hold 16 elements of W bytes; out[k] receives byte k of each.
template <int W>
inline void split_block(const __m128i* v, __m128i* out) {
  if constexpr (W == 1) {
    out[0] = v[0];
  } else {
    const __m128i low = _mm_set1_epi16(0x00FF);
    __m128i even[W / 2], odd[W / 2];
    for (int m = 0; m < W / 2; ++m) {
      even[m] = _mm_packus_epi16(_mm_and_si128(v[2 * m], low), _mm_and_si128(v[2 * m + 1], low));
      odd[m] = _mm_packus_epi16(_mm_srli_epi16(v[2 * m], 8), _mm_srli_epi16(v[2 * m + 1], 8));
    }
    // `even` holds bytes 0, 2, ... of each element (a W/2-byte element), `odd` bytes 1, 3, ...
    __m128i even_planes[W / 2], odd_planes[W / 2];
    split_block<W / 2>(even, even_planes);
    split_block<W / 2>(odd, odd_planes);
    for (int c = 0; c < W / 2; ++c) {
      out[2 * c] = even_planes[c];
      out[2 * c + 1] = odd_planes[c];
    }
  }
}

// The inverse: planes[k] holds byte k of 16 elements; out[0..W) receives the elements.
template <int W>
inline void join_block(const __m128i* planes, __m128i* out) {
  if constexpr (W == 1) {
    out[0] = planes[0];
  } else {
    __m128i even_planes[W / 2], odd_planes[W / 2], even[W / 2], odd[W / 2];
    for (int c = 0; c < W / 2; ++c) {
      even_planes[c] = planes[2 * c];
      odd_planes[c] = planes[2 * c + 1];
    }
    join_block<W / 2>(even_planes, even);
    join_block<W / 2>(odd_planes, odd);
    for (int m = 0; m < W / 2; ++m) {
      out[2 * m] = _mm_unpacklo_epi8(even[m], odd[m]);
      out[2 * m + 1] = _mm_unpackhi_epi8(even[m], odd[m]);
    }
  }
}
#else
constexpr size_t kBlockElements = 0;
#endif

// n elements of W bytes from `in` to W planes of n bytes at `out`.
template <int W>
void split_planes(const uint8_t* in, size_t n, uint8_t* out) {
  size_t j = 0;
#if defined(__SSE2__)
  for (; j + kBlockElements <= n; j += kBlockElements) {
    __m128i v[W], planes[W];
    for (int m = 0; m < W; ++m)
      v[m] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j * W + 16 * m));
    split_block<W>(v, planes);
    for (int k = 0; k < W; ++k)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k * n + j), planes[k]);
  }
#endif
  for (; j < n; ++j) {
    for (int k = 0; k < W; ++k) out[k * n + j] = in[j * W + k];
  }
}

// W planes of n bytes at `planes` back to n elements of W bytes at `out`.
template <int W>
void join_planes(const uint8_t* planes, size_t n, uint8_t* out) {
  size_t j = 0;
#if defined(__SSE2__)
  for (; j + kBlockElements <= n; j += kBlockElements) {
    __m128i p[W], v[W];
    for (int k = 0; k < W; ++k)
      p[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes + k * n + j));
    join_block<W>(p, v);
    for (int m = 0; m < W; ++m)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j * W + 16 * m), v[m]);
  }
#endif
  for (; j < n; ++j) {
    for (int k = 0; k < W; ++k) out[j * W + k] = planes[k * n + j];
  }
}

// "de ad be ef": the bytes as they appear in the file.
std::string hex_bytes(std::span<const uint8_t> bytes) {
  std::string out;
  for (const uint8_t b : bytes) {
    char buf[4];
    std::snprintf(buf, sizeof(buf), "%02x", b);
    if (!out.empty()) out += ' ';
    out += buf;
  }
  return out;
}

std::string zstd_error(size_t code) {
  return std::string("zstd: ") + ZSTD_getErrorName(code);
}

}  // namespace

void split_byte_planes(std::span<const uint8_t> in, uint32_t width, std::span<uint8_t> out) {
  if (!valid_width(width) || out.size() != in.size() || in.empty()) return;
  const size_t n = in.size() / width;
  switch (width) {
    case 1:
      std::memcpy(out.data(), in.data(), in.size());
      return;
    case 2:
      split_planes<2>(in.data(), n, out.data());
      break;
    case 4:
      split_planes<4>(in.data(), n, out.data());
      break;
    default:
      split_planes<8>(in.data(), n, out.data());
      break;
  }
  const size_t body = n * width;  // the tail, shorter than a width, stays in order
  std::memcpy(out.data() + body, in.data() + body, in.size() - body);
}

void join_byte_planes(std::span<const uint8_t> planes, uint32_t width, std::span<uint8_t> out) {
  if (!valid_width(width) || out.size() != planes.size() || planes.empty()) return;
  const size_t n = planes.size() / width;
  switch (width) {
    case 1:
      std::memcpy(out.data(), planes.data(), planes.size());
      return;
    case 2:
      join_planes<2>(planes.data(), n, out.data());
      break;
    case 4:
      join_planes<4>(planes.data(), n, out.data());
      break;
    default:
      join_planes<8>(planes.data(), n, out.data());
      break;
  }
  const size_t body = n * width;
  std::memcpy(out.data() + body, planes.data() + body, planes.size() - body);
}

Result<std::vector<uint8_t>> compress_part(std::span<const uint8_t> raw,
                                           const PartCompressionOptions& options) {
  const uint32_t width = options.plane_width;
  if (!valid_width(width)) {
    return invalid_argument("compress_part: plane width " + std::to_string(width) +
                            " is not 1, 2, 4 or 8");
  }
  if (options.zstd_level < ZSTD_minCLevel() || options.zstd_level > ZSTD_maxCLevel()) {
    return invalid_argument("compress_part: zstd level " + std::to_string(options.zstd_level) +
                            " is outside " + std::to_string(ZSTD_minCLevel()) + " ... " +
                            std::to_string(ZSTD_maxCLevel()));
  }
  const size_t bound = ZSTD_compressBound(raw.size());
  if (bound == 0 || ZSTD_isError(bound)) {
    return invalid_argument("compress_part: " + std::to_string(raw.size()) +
                            " bytes is more than one zstd frame can hold");
  }

  std::unique_ptr<uint8_t[]> planes;
  const uint8_t* source = raw.data();
  if (width > 1 && !raw.empty()) {
    planes = std::make_unique_for_overwrite<uint8_t[]>(raw.size());
    split_byte_planes(raw, width, {planes.get(), raw.size()});
    source = planes.get();
  }

  std::vector<uint8_t> out(kPartCompressionHeaderBytes + bound);
  std::memcpy(out.data(), kPartCompressionMagic, 4);
  out[4] = static_cast<uint8_t>(width);
  store_le<uint64_t>(out.data() + 5, raw.size());

  ZSTD_CCtx* cctx = thread_cctx();
  if (cctx == nullptr) return internal_error("compress_part: cannot create a zstd context");
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  size_t r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options.zstd_level);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  if (!ZSTD_isError(r)) {
    r = ZSTD_compress2(cctx, out.data() + kPartCompressionHeaderBytes, bound, source, raw.size());
  }
  if (ZSTD_isError(r)) {
    return internal_error("compress_part: compressing " + std::to_string(raw.size()) +
                          " bytes failed: " + zstd_error(r));
  }
  out.resize(kPartCompressionHeaderBytes + r);
  return out;
}

Result<std::vector<uint8_t>> decompress_part(std::span<const uint8_t> compressed,
                                             uint64_t max_raw_bytes) {
  const std::string who = "compressed part";
  if (compressed.size() < kPartCompressionHeaderBytes) {
    return data_loss(who + ": " + std::to_string(compressed.size()) + " bytes, shorter than the " +
                     std::to_string(kPartCompressionHeaderBytes) + "-byte WCZ1 header");
  }
  if (std::memcmp(compressed.data(), kPartCompressionMagic, 4) != 0) {
    return data_loss(who + ": bad magic bytes " + hex_bytes(compressed.first(4)) +
                     ", expected 57 43 5a 31 (\"WCZ1\")");
  }
  const uint32_t width = compressed[4];
  if (!valid_width(width)) {
    return data_loss(who + ": plane width " + std::to_string(width) + " is not 1, 2, 4 or 8");
  }
  const uint64_t raw_bytes = load_le<uint64_t>(compressed.data() + 5);
  if (raw_bytes > max_raw_bytes) {
    return out_of_range(who + ": raw_bytes " + std::to_string(raw_bytes) +
                        " is over the limit of " + std::to_string(max_raw_bytes) + " bytes");
  }

  const std::span<const uint8_t> frame = compressed.subspan(kPartCompressionHeaderBytes);
  const std::string at = " (zstd frame of " + std::to_string(frame.size()) + " bytes at offset " +
                         std::to_string(kPartCompressionHeaderBytes) + ")";
  if (frame.size() < 4 || load_le<uint32_t>(frame.data()) != ZSTD_MAGICNUMBER) {
    return data_loss(who + ": no zstd frame magic after the header" + at);
  }
  const unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (content == ZSTD_CONTENTSIZE_ERROR) {
    return data_loss(who + ": zstd frame header is truncated or invalid" + at);
  }
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
    return data_loss(who + ": zstd frame does not declare its content size" + at);
  }
  if (content != raw_bytes) {
    return data_loss(who + ": zstd frame declares content size " + std::to_string(content) +
                     " but the header says raw_bytes " + std::to_string(raw_bytes) + at);
  }
  if (const unsigned dict = ZSTD_getDictID_fromFrame(frame.data(), frame.size()); dict != 0) {
    return data_loss(who + ": zstd frame needs dictionary " + std::to_string(dict) +
                     "; parts use none" + at);
  }
  // Walks the block headers without decoding: catches truncation and extra bytes up front.
  const size_t frame_bytes = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  if (ZSTD_isError(frame_bytes)) {
    return data_loss(who + ": zstd frame is truncated or its block headers are corrupt" + at +
                     ": " + zstd_error(frame_bytes));
  }
  if (frame_bytes != frame.size()) {
    return data_loss(who + ": " + std::to_string(frame.size() - frame_bytes) +
                     " trailing bytes after the zstd frame, which ends at offset " +
                     std::to_string(kPartCompressionHeaderBytes + frame_bytes));
  }

  ZSTD_DCtx* dctx = thread_dctx();
  if (dctx == nullptr) return internal_error("decompress_part: cannot create a zstd context");
  const size_t n = static_cast<size_t>(raw_bytes);
  std::vector<uint8_t> out(n);
  std::unique_ptr<uint8_t[]> planes;
  uint8_t* target = out.data();
  if (width > 1 && n > 0) {
    planes = std::make_unique_for_overwrite<uint8_t[]>(n);
    target = planes.get();
  }
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters);
  const size_t got = ZSTD_decompressDCtx(dctx, target, n, frame.data(), frame.size());
  if (ZSTD_isError(got)) {
    return data_loss(who + ": zstd frame does not decode" + at + ": " + zstd_error(got));
  }
  if (got != n) {
    return data_loss(who + ": zstd frame decoded to " + std::to_string(got) +
                     " bytes, expected raw_bytes " + std::to_string(n) + at);
  }
  if (planes) join_byte_planes({planes.get(), n}, width, out);
  return out;
}

}  // namespace weightcast
