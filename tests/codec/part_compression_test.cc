#include "codec/part_compression.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/workload/synthetic_update.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::random_bytes;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint32_t kWidths[] = {1, 2, 4, 8};

// The format's definition of the planes, one byte at a time.
std::vector<uint8_t> reference_planes(const std::vector<uint8_t>& in, uint32_t w) {
  const size_t n = in.size() / w;
  std::vector<uint8_t> out;
  for (uint32_t k = 0; k < w; ++k)
    for (size_t j = 0; j < n; ++j) out.push_back(in[j * w + k]);
  for (size_t i = n * w; i < in.size(); ++i) out.push_back(in[i]);
  return out;
}

// Bytes that compress: small bf16-like values, a slowly varying high byte.
std::vector<uint8_t> compressible_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> out = random_bytes(n, seed);
  for (size_t i = 0; i < n; ++i) out[i] = i % 2 ? 0x3C + (i >> 12) % 3 : out[i] & 0x0F;
  return out;
}

std::vector<uint8_t> compress_ok(const std::vector<uint8_t>& raw, uint32_t width, int level = 1) {
  auto c = compress_part(raw, {level, width});
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : std::vector<uint8_t>{};
}

void expect_round_trip(const std::vector<uint8_t>& raw, uint32_t width, int level = 1) {
  const std::vector<uint8_t> c = compress_ok(raw, width, level);
  auto d = decompress_part(c, raw.size());
  ASSERT_TRUE(d.ok()) << "width " << width << " length " << raw.size() << ": "
                      << d.status().to_string();
  EXPECT_TRUE(*d == raw) << "width " << width << " length " << raw.size();
}

void expect_error(const Result<std::vector<uint8_t>>& r, StatusCode code,
                  const std::string& needle) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
}

TEST(PartCompression, HeaderLayout) {
  const std::vector<uint8_t> raw = random_bytes(1000, 1);
  const std::vector<uint8_t> c = compress_ok(raw, 4);
  ASSERT_GT(c.size(), 17u);
  EXPECT_EQ(std::string(c.begin(), c.begin() + 4), "WCZ1");
  EXPECT_EQ(c[4], 4);
  EXPECT_EQ(load_le<uint64_t>(c.data() + 5), 1000u);
  EXPECT_EQ(load_le<uint32_t>(c.data() + 13), ZSTD_MAGICNUMBER);
}

TEST(PartCompression, SplitMatchesTheDefinition) {
  // Lengths around the 16-element vector block, with and without a tail.
  for (const uint32_t w : kWidths) {
    for (size_t len : {0, 1, 7, 15, 16, 17, 31, 32, 33, 127, 128, 129, 1000, 4099}) {
      const std::vector<uint8_t> in = random_bytes(len, len * 10 + w);
      std::vector<uint8_t> planes(len), back(len);
      split_byte_planes(in, w, planes);
      EXPECT_EQ(planes, reference_planes(in, w)) << "width " << w << " length " << len;
      join_byte_planes(planes, w, back);
      EXPECT_EQ(back, in) << "width " << w << " length " << len;
    }
  }
}

TEST(PartCompression, FrameHoldsThePlanes) {
  const std::vector<uint8_t> raw = random_bytes(777, 3);
  for (const uint32_t w : kWidths) {
    const std::vector<uint8_t> c = compress_ok(raw, w);
    std::vector<uint8_t> content(raw.size());
    const size_t got =
        ZSTD_decompress(content.data(), content.size(), c.data() + 13, c.size() - 13);
    ASSERT_EQ(got, raw.size()) << ZSTD_getErrorName(got);
    EXPECT_EQ(content, reference_planes(raw, w)) << "width " << w;
  }
}

TEST(PartCompression, RoundTripsEmptyAndOneByte) {
  // An empty part still declares its (zero) content size; it decodes under a limit of 0.
  for (const uint32_t w : kWidths) {
    expect_round_trip({}, w);
    expect_round_trip({0xA5}, w);
  }
}

TEST(PartCompression, RoundTripsOddLengthsWithTails) {
  for (const uint32_t w : kWidths) {
    for (size_t len = 2; len <= 70; ++len) expect_round_trip(random_bytes(len, len), w);
    for (size_t len : {4095, 4097, 65537, 65543}) {
      expect_round_trip(random_bytes(len, len), w);
      expect_round_trip(compressible_bytes(len, len), w);
    }
  }
}

TEST(PartCompression, RoundTripsRandomAndCompressibleAtBothLevels) {
  const std::vector<uint8_t> random = random_bytes(kMiB + 3, 11);
  const std::vector<uint8_t> compressible = compressible_bytes(kMiB + 5, 12);
  for (const uint32_t w : kWidths) {
    for (const int level : {1, 3}) {
      expect_round_trip(random, w, level);
      expect_round_trip(compressible, w, level);
    }
  }
  // Random bytes cost only block headers; planes help the slowly varying high bytes.
  EXPECT_LT(compress_ok(random, 2).size(), random.size() + 64);
  const size_t plain = compress_ok(compressible, 1).size();
  const size_t planes = compress_ok(compressible, 2).size();
  EXPECT_LT(plain, compressible.size() * 3 / 4);
  EXPECT_LT(planes, plain);
}

// A synthetic Adam-bf16 update at 1 % density: `tensors` tensors, old and new bf16 bytes.
struct SyntheticUpdate {
  std::vector<std::vector<uint8_t>> old_bytes, new_bytes;
  std::vector<EncodeOptions> options;  // one per tensor, base checksum tracked (steady state)
};

SyntheticUpdate synthetic_update(uint64_t elements, int tensors, ThreadPool* pool) {
  const double relative_lr = calibrate_lr(0.01, 5);
  SyntheticUpdate u;
  for (int t = 0; t < tensors; ++t) {
    SyntheticTensor tensor(elements / tensors, 2048, 100 + t, pool);
    const auto bytes_of = [&] {
      const auto* p = reinterpret_cast<const uint8_t*>(tensor.bf16().data());
      return std::vector<uint8_t>(p, p + tensor.bf16().size_bytes());
    };
    u.old_bytes.push_back(bytes_of());
    tensor.step(relative_lr * tensor.sigma(), 1, pool);
    u.new_bytes.push_back(bytes_of());
    EncodeOptions o;
    o.name = "model.layers." + std::to_string(t) + ".mlp.weight";
    o.base_checksum = checksum_range(u.old_bytes.back().data(), 2, tensor.elements(), 0);
    u.options.push_back(o);
  }
  return u;
}

// The part as the filesystem path writes it: the tensors' delta records back to back.
std::vector<uint8_t> encode_part(const SyntheticUpdate& u, ThreadPool* pool) {
  std::vector<uint8_t> part;
  for (size_t t = 0; t < u.options.size(); ++t) {
    EncodeOptions o = u.options[t];
    o.pool = pool;
    auto e = encode_delta(u.old_bytes[t], u.new_bytes[t], o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (e.ok()) part.insert(part.end(), e->record.begin(), e->record.end());
  }
  return part;
}

TEST(PartCompression, RoundTripsRealDeltaRecords) {
  ThreadPool pool(2);
  const std::vector<uint8_t> part =
      encode_part(synthetic_update(uint64_t{1} << 20, 3, &pool), &pool);
  ASSERT_GT(part.size(), 10000u);
  for (const uint32_t w : kWidths) {
    const std::vector<uint8_t> c = compress_ok(part, w);
    auto d = decompress_part(c, part.size());
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_TRUE(*d == part) << "width " << w;
    auto first = parse_delta_record(*d);  // and the records still parse and verify
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(first->header.name, "model.layers.0.mlp.weight");
  }
}

TEST(PartCompression, RejectsBadOptions) {
  const std::vector<uint8_t> raw = random_bytes(100, 2);
  expect_error(compress_part(raw, {1, 3}), StatusCode::kInvalidArgument, "plane width 3");
  expect_error(compress_part(raw, {1000, 2}), StatusCode::kInvalidArgument, "zstd level 1000");
}

// A valid compressed part of 1000 compressible bytes, width 2, for the malformed cases.
std::vector<uint8_t> valid_part() {
  return compress_ok(compressible_bytes(1000, 9), 2);
}

TEST(PartCompression, RejectsShortHeader) {
  const std::vector<uint8_t> c = valid_part();
  expect_error(decompress_part(std::span(c).first(12), kMiB), StatusCode::kDataLoss,
               "12 bytes, shorter than the 13-byte WCZ1 header");
}

TEST(PartCompression, RejectsBadMagic) {
  std::vector<uint8_t> c = valid_part();
  c[3] = '2';
  expect_error(decompress_part(c, kMiB), StatusCode::kDataLoss,
               "bad magic bytes 57 43 5a 32, expected 57 43 5a 31");
}

TEST(PartCompression, RejectsBadWidth) {
  std::vector<uint8_t> c = valid_part();
  for (const uint8_t w : {0, 3, 16, 255}) {
    c[4] = w;
    expect_error(decompress_part(c, kMiB), StatusCode::kDataLoss,
                 "plane width " + std::to_string(w) + " is not 1, 2, 4 or 8");
  }
}

TEST(PartCompression, RejectsRawBytesOverTheLimit) {
  const std::vector<uint8_t> c = valid_part();
  expect_error(decompress_part(c, 999), StatusCode::kOutOfRange,
               "raw_bytes 1000 is over the limit of 999 bytes");
  // A hostile size is refused before anything is allocated.
  std::vector<uint8_t> huge = c;
  store_le<uint64_t>(huge.data() + 5, ~uint64_t{0});
  expect_error(decompress_part(huge, kMiB), StatusCode::kOutOfRange,
               "raw_bytes 18446744073709551615 is over the limit of 1048576 bytes");
  EXPECT_TRUE(decompress_part(c, 1000).ok());  // the limit itself is allowed
}

TEST(PartCompression, RejectsMissingZstdFrame) {
  std::vector<uint8_t> c = valid_part();
  c[13] ^= 0xFF;
  expect_error(decompress_part(c, kMiB), StatusCode::kDataLoss, "no zstd frame magic");
  // A skippable frame carries no content; parts hold one real frame.
  std::vector<uint8_t> skippable(c.begin(), c.begin() + 13);
  store_le<uint64_t>(skippable.data() + 5, 0);
  append_le<uint32_t>(&skippable, ZSTD_MAGIC_SKIPPABLE_START);
  append_le<uint32_t>(&skippable, 0);
  expect_error(decompress_part(skippable, kMiB), StatusCode::kDataLoss, "no zstd frame magic");
}

TEST(PartCompression, RejectsTruncatedFrame) {
  const std::vector<uint8_t> c = valid_part();
  expect_error(decompress_part(std::span(c).first(c.size() - 1), kMiB), StatusCode::kDataLoss,
               "zstd frame is truncated");
  expect_error(decompress_part(std::span(c).first(15), kMiB), StatusCode::kDataLoss,
               "no zstd frame magic");
  expect_error(decompress_part(std::span(c).first(18), kMiB), StatusCode::kDataLoss,
               "zstd frame header is truncated");
  // Every shorter prefix fails with kDataLoss; none decodes.
  for (size_t len = 0; len < c.size(); ++len) {
    auto d = decompress_part(std::span(c).first(len), kMiB);
    ASSERT_FALSE(d.ok()) << "prefix of " << len << " bytes";
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status().to_string();
  }
}

TEST(PartCompression, RejectsTrailingBytes) {
  std::vector<uint8_t> c = valid_part();
  const size_t end = c.size();
  c.push_back(0);
  c.push_back(0);
  expect_error(
      decompress_part(c, kMiB), StatusCode::kDataLoss,
      "2 trailing bytes after the zstd frame, which ends at offset " + std::to_string(end));
  // A second frame is trailing bytes too, even though zstd alone would decode both.
  const std::vector<uint8_t> again = valid_part();
  std::vector<uint8_t> two = again;
  two.insert(two.end(), again.begin() + 13, again.end());
  expect_error(decompress_part(two, kMiB), StatusCode::kDataLoss, "trailing bytes");
}

TEST(PartCompression, RejectsContentSizeMismatch) {
  std::vector<uint8_t> c = valid_part();
  store_le<uint64_t>(c.data() + 5, 999);
  expect_error(decompress_part(c, kMiB), StatusCode::kDataLoss,
               "zstd frame declares content size 1000 but the header says raw_bytes 999");
}

TEST(PartCompression, RejectsFrameWithoutContentSize) {
  const std::vector<uint8_t> raw = compressible_bytes(1000, 9);
  std::vector<uint8_t> c(13 + ZSTD_compressBound(raw.size()));
  std::memcpy(c.data(), "WCZ1", 4);
  c[4] = 1;
  store_le<uint64_t>(c.data() + 5, raw.size());
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ASSERT_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
  // Streaming end-of-input without a pledged size leaves the content size out.
  ZSTD_inBuffer in{raw.data(), raw.size(), 0};
  ZSTD_outBuffer out{c.data() + 13, c.size() - 13, 0};
  const size_t left = ZSTD_compressStream2(cctx, &out, &in, ZSTD_e_end);
  ZSTD_freeCCtx(cctx);
  ASSERT_EQ(left, 0u);
  c.resize(13 + out.pos);
  ASSERT_EQ(ZSTD_getFrameContentSize(c.data() + 13, out.pos), ZSTD_CONTENTSIZE_UNKNOWN);
  expect_error(decompress_part(c, kMiB), StatusCode::kDataLoss,
               "zstd frame does not declare its content size");
}

TEST(PartCompression, RejectsDictionaryFrame) {
  // Set the frame header's 1-byte dictionary-ID flag and insert ID 7 before the content size.
  std::vector<uint8_t> c = valid_part();
  ASSERT_EQ(c[17] & 0x23, 0x20);  // single segment (no window byte), no dictionary ID yet
  c[17] |= 0x01;
  c.insert(c.begin() + 18, 7);
  expect_error(decompress_part(c, kMiB), StatusCode::kDataLoss, "needs dictionary 7");
}

TEST(PartCompression, RejectsCorruptedZstdBytes) {
  // The content checksum (the frame's last 4 bytes) no longer matches.
  std::vector<uint8_t> c = valid_part();
  c.back() ^= 0x01;
  expect_error(decompress_part(c, kMiB), StatusCode::kDataLoss, "zstd frame does not decode");
  // Flips anywhere in the frame body never pass: each is refused with kDataLoss.
  const std::vector<uint8_t> good = valid_part();
  int refused = 0;
  for (size_t at = 13; at < good.size(); ++at) {
    std::vector<uint8_t> bad = good;
    bad[at] ^= 0x10;
    auto d = decompress_part(bad, kMiB);
    if (d.ok()) continue;  // a flip in an unused bit may leave the same content
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status().to_string();
    EXPECT_NE(d.status().message().find("zstd"), std::string::npos) << d.status().to_string();
    ++refused;
  }
  EXPECT_GT(refused, static_cast<int>(good.size() - 13) * 9 / 10);
}

// Ratio and speed on a synthetic Adam-bf16 update at 1 % density (docs/PERFORMANCE.md).
// WEIGHTCAST_PART_BENCH_ELEMENTS sets the size (default 16 Mi elements keeps this < 3 s),
// WEIGHTCAST_PART_BENCH_REPS the repetitions. Times are the best CPU time of the calling
// thread, which runs everything timed and is not inflated by other processes on the cores.
// The reference from the same run is encode_delta producing the part (one thread, base
// checksum tracked): comp/enc is what the stage adds to a publisher's encode.
double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <typename Fn>
double best_of(int reps, Fn&& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_cpu_s();
    fn();
    best = std::min(best, thread_cpu_s() - t0);
  }
  return best;
}

// One table row: compress and decompress `raw` at (width, level), checked and timed.
void measure_row(const char* what, const std::vector<uint8_t>& raw, uint32_t w, int level, int reps,
                 double encode_s) {
  Result<std::vector<uint8_t>> c = internal_error("not run");
  Result<std::vector<uint8_t>> d = internal_error("not run");
  const double tc = best_of(reps, [&] { c = compress_part(raw, {level, w}); });
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const double td = best_of(reps, [&] { d = decompress_part(*c, raw.size()); });
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  ASSERT_TRUE(*d == raw);
  // zstd stores incompressible blocks raw: a part never grows by more than its framing.
  EXPECT_LT(c->size(), raw.size() + raw.size() / 1000 + 64);
  const double mb = static_cast<double>(raw.size()) / 1e6;
  std::printf("%-8s %5u %5d  %.4f  %9.0f  %11.0f", what, w, level,
              static_cast<double>(c->size()) / static_cast<double>(raw.size()), mb / tc, mb / td);
  if (encode_s > 0) std::printf("  %8.3f  %10.3f", tc / encode_s, td / encode_s);
  std::printf("\n");
}

TEST(PartCompression, MeasureOnSyntheticDelta) {
  uint64_t elements = uint64_t{16} << 20;
  int reps = 3;
  if (const char* e = std::getenv("WEIGHTCAST_PART_BENCH_ELEMENTS")) elements = std::stoull(e);
  if (const char* r = std::getenv("WEIGHTCAST_PART_BENCH_REPS")) reps = std::stoi(r);
  ThreadPool pool(0);  // generation only; nothing timed runs on it
  const SyntheticUpdate update = synthetic_update(elements, 8, &pool);
  std::vector<uint8_t> part;
  const double encode_s = best_of(reps, [&] { part = encode_part(update, nullptr); });
  std::printf(
      "part: %zu bytes of delta records for %llu bf16 elements (8 tensors, 1 %%); "
      "encode %.4f s\n",
      part.size(), static_cast<unsigned long long>(elements), encode_s);
  std::printf("input    width level  ratio  comp MB/s  decomp MB/s  comp/enc  decomp/enc\n");
  for (const int level : {1, 3}) {
    for (const uint32_t w : {1u, 2u, 4u}) measure_row("delta", part, w, level, reps, encode_s);
  }
  // Reference: the new bf16 weights of one tensor, where byte planes have structure to find.
  for (const uint32_t w : {1u, 2u})
    measure_row("weights", update.new_bytes[0], w, 1, reps, /*encode_s=*/0);
}

}  // namespace
}  // namespace weightcast
