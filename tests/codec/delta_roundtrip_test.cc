// Encode then apply must reproduce the new version bit for bit, whatever the data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "codec/base/thread_pool.h"
#include "tests/codec/chunk_mode_check.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::encode;
using testing::perturb;
using testing::random_bytes;
using testing::view_of;

// Encodes old->new, applies onto a copy of old and checks the bytes, the report and that every
// chunk is in a mode `modes` allows (the one mode a single-mode mask forces).
void expect_round_trip(const std::vector<uint8_t>& old_bytes, const std::vector<uint8_t>& new_bytes,
                       DType dtype, uint32_t chunk = kDefaultChunkElements,
                       uint32_t modes = kAllowAllModes, ThreadPool* pool = nullptr) {
  auto enc = encode(old_bytes, new_bytes, dtype, chunk, modes);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->record_bytes, enc->record.size());
  testing::expect_chunk_modes(*enc, *rec, old_bytes, new_bytes, modes);
  std::vector<uint8_t> dest = old_bytes;
  ApplyOptions o;
  o.pool = pool;
  auto report = apply_delta(*rec, view_of(dest, dtype), o);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_EQ(dest, new_bytes);
  const size_t es = dtype_size(dtype);
  EXPECT_EQ(report->checksum, checksum_range(new_bytes.data(), es, new_bytes.size() / es, 0));
  EXPECT_EQ(rec->header.target_checksum, report->checksum);
  size_t changed = 0;
  for (size_t i = 0; i < old_bytes.size() / es; ++i) {
    changed += std::memcmp(old_bytes.data() + i * es, new_bytes.data() + i * es, es) != 0;
  }
  EXPECT_EQ(report->changed, changed);
  EXPECT_EQ(rec->header.changed, changed);
}

struct ModeCase {
  const char* name;
  uint32_t modes;
};
const ModeCase kModes[] = {{"any", kAllowAllModes},
                           {"rice", kAllowRice},
                           {"streamvbyte", kAllowStreamVByte},
                           {"bitmap", kAllowBitmap},
                           {"raw", kAllowRaw}};
const DType kTypes[] = {DType::kF8E4M3FN, DType::kBF16, DType::kF16, DType::kF32};

TEST(DeltaRoundTrip, RandomDataEveryTypeModeAndDensity) {
  for (DType dtype : kTypes) {
    const size_t es = dtype_size(dtype);
    const size_t n = 3 * 4096 + 17;  // not a multiple of any block or chunk size
    const auto old_bytes = random_bytes(n * es, es);
    for (double density : {0.0005, 0.01, 0.2, 0.7, 1.0}) {
      const auto new_bytes = perturb(old_bytes, es, density, 99);
      for (const auto& m : kModes) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " density " + std::to_string(density) +
                     " mode " + m.name);
        expect_round_trip(old_bytes, new_bytes, dtype, 4096, m.modes);
      }
    }
  }
}

TEST(DeltaRoundTrip, EverythingChangedWithRandomValues) {
  for (DType dtype : kTypes) {
    const size_t es = dtype_size(dtype);
    const auto a = random_bytes(10000 * es, 1), b = random_bytes(10000 * es, 2);
    for (const auto& m : kModes) expect_round_trip(a, b, dtype, 1024, m.modes);
  }
}

TEST(DeltaRoundTrip, NothingChangedIsHeaderOnly) {
  const auto a = random_bytes(70000 * 2, 5);
  auto enc = encode(a, a, DType::kBF16);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->header.changed, 0u);
  EXPECT_EQ(enc->chunks_by_mode[0], 2u);  // both chunks unchanged
  EXPECT_LT(enc->record.size(), 128u);
  expect_round_trip(a, a, DType::kBF16);
}

TEST(DeltaRoundTrip, SingleElementAndEmptyTensor) {
  std::vector<uint8_t> a = {0x80, 0x3F}, b = {0x81, 0x3F};
  expect_round_trip(a, b, DType::kBF16);
  expect_round_trip({}, {}, DType::kBF16);
}

TEST(DeltaRoundTrip, FloatSpecialValuesKeepTheirExactBits) {
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            1.0f,
                            -1.0f};
  const uint32_t nan_payloads[] = {0x7FC00000u, 0x7FC00001u, 0xFFFFFFFFu, 0x7F800001u};
  std::vector<uint32_t> old_v, new_v;
  for (float f : specials) {
    for (float g : specials) {
      uint32_t fb, gb;
      std::memcpy(&fb, &f, 4);
      std::memcpy(&gb, &g, 4);
      old_v.push_back(fb);
      new_v.push_back(gb);
    }
  }
  for (uint32_t p : nan_payloads) {
    old_v.push_back(p);
    new_v.push_back(p ^ 1u);  // a different NaN payload is a change
    old_v.push_back(0x3F800000u);
    new_v.push_back(p);
  }
  auto bytes = [](const std::vector<uint32_t>& v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  for (const auto& m : kModes)
    expect_round_trip(bytes(old_v), bytes(new_v), DType::kF32, 64, m.modes);
  // The same in bf16: the high halves.
  std::vector<uint8_t> o16, n16;
  for (size_t i = 0; i < old_v.size(); ++i) {
    for (int k = 2; k < 4; ++k) {
      o16.push_back(static_cast<uint8_t>(old_v[i] >> (8 * k)));
      n16.push_back(static_cast<uint8_t>(new_v[i] >> (8 * k)));
    }
  }
  for (const auto& m : kModes) expect_round_trip(o16, n16, DType::kBF16, 64, m.modes);
}

TEST(DeltaRoundTrip, ChangesOnChunkAndBlockBoundaries) {
  const uint32_t chunk = 256;
  const size_t n = chunk * 4 + 3;
  std::vector<uint8_t> a(n * 2, 0x11);
  for (const auto& m : kModes) {
    auto b = a;
    for (size_t i : {size_t{0}, size_t{15}, size_t{16}, size_t{31}, size_t{32}, size_t{255},
                     size_t{256}, size_t{511}, size_t{512}, n - 4, n - 3, n - 1}) {
      b[i * 2] ^= 0x01;
      b[i * 2 + 1] ^= 0x80;  // a large difference too
    }
    expect_round_trip(a, b, DType::kBF16, chunk, m.modes);
  }
}

TEST(DeltaRoundTrip, ExtremeDifferencesWrapAround) {
  // Differences of +/-1, 2^(w-1) and 2^w - 1 (mod 2^w) in every width.
  for (DType dtype : kTypes) {
    const size_t es = dtype_size(dtype);
    const uint64_t top = uint64_t{1} << (8 * es);
    const uint64_t diffs[] = {1, top - 1, top / 2, top / 2 - 1, top / 2 + 1, 2, top - 2};
    std::vector<uint8_t> a, b;
    for (uint64_t start : {uint64_t{0}, top - 1, top / 2}) {
      for (uint64_t d : diffs) {
        const uint64_t x = start, y = (start + d) % top;
        for (size_t k = 0; k < es; ++k) {
          a.push_back(static_cast<uint8_t>(x >> (8 * k)));
          b.push_back(static_cast<uint8_t>(y >> (8 * k)));
        }
      }
    }
    for (const auto& m : kModes) expect_round_trip(a, b, dtype, 64, m.modes);
  }
}

TEST(DeltaRoundTrip, ParallelEncodeAndApplyMatchSerial) {
  ThreadPool pool(2);
  const auto a = random_bytes((1 << 20) * 2, 8);
  const auto b = perturb(a, 2, 0.01, 9);
  auto serial = encode(a, b, DType::kBF16);
  EncodeOptions o;
  o.name = "t";
  o.dtype = DType::kBF16;
  o.pool = &pool;
  auto parallel = encode_delta(a, b, o);
  ASSERT_TRUE(serial.ok() && parallel.ok());
  EXPECT_EQ(serial->record, parallel->record);
  expect_round_trip(a, b, DType::kBF16, kDefaultChunkElements, kAllowAllModes, &pool);
}

TEST(DeltaRoundTrip, SmallUpdatesCostFewBitsPerChange) {
  const auto a = random_bytes((1 << 20) * 2, 12);
  const auto b = perturb(a, 2, 0.01, 13);
  auto enc = encode(a, b, DType::kBF16);
  ASSERT_TRUE(enc.ok());
  const double bits = 8.0 * enc->record.size() / enc->header.changed;
  EXPECT_LT(bits, 14.0);  // Rice gaps ~8.3 bits + values of |d| <= 3 with rare sign flips
  EXPECT_GT(enc->chunks_by_mode[static_cast<size_t>(ChunkMode::kGapsRice)], 0u);
}

}  // namespace
}  // namespace weightcast
