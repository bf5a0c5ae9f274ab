// The chunk format's one statement (chunk_plan_hd.h, chunk_decode_hd.h), run on its own
// against the CPU codec, which calls it but writes and reads Stream VByte positions with
// libstreamvbyte's kernel and goes through its own buffers and messages: the same bytes out
// of every encode, the same verdict and the same positions and values out of every decode,
// valid or corrupt.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "codec/chunk_decode_hd.h"
#include "codec/chunk_plan_hd.h"
#include "codec/delta_chunk.h"
#include "tests/codec/chunk_mode_check.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::perturb;
using testing::random_bytes;

struct Changes {
  std::vector<uint32_t> positions;
  std::vector<uint32_t> values;
};

Changes changes_of(const uint8_t* o, const uint8_t* n, uint32_t length, unsigned es) {
  Changes c;
  for (uint32_t p = 0; p < length; ++p) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, o + size_t{p} * es, es);
    std::memcpy(&b, n + size_t{p} * es, es);
    if (a == b) continue;
    c.positions.push_back(p);
    c.values.push_back(value_from_diff(b - a, es * 8));
  }
  return c;
}

std::vector<uint8_t> hd_encode(const uint8_t* o, const uint8_t* n, uint32_t length, unsigned es,
                               uint32_t modes, uint8_t* mode_out) {
  const Changes c = changes_of(o, n, length, es);
  const auto count = static_cast<uint32_t>(c.positions.size());
  const hd::ChunkPlan plan =
      hd::plan_chunk(c.positions.data(), c.values.data(), count, length, es, modes);
  *mode_out = plan.mode;
  // Poisoned beyond the end: on the host a writer may store kBitSinkSlack bytes past it.
  std::vector<uint8_t> out(plan.total_bytes + kBitSinkSlack + 16, 0xEE);
  uint8_t* end =
      hd::write_chunk(out.data(), plan, c.positions.data(), c.values.data(), n, length, es);
  EXPECT_EQ(static_cast<size_t>(end - out.data()), plan.total_bytes);
  for (size_t i = plan.total_bytes + kBitSinkSlack; i < out.size(); ++i)
    EXPECT_EQ(out[i], 0xEE) << i;
  out.resize(plan.total_bytes);
  return out;
}

// Encodes with both, expects the same bytes, then checks that both decoders agree on them.
void expect_same_chunk(const std::vector<uint8_t>& o, const std::vector<uint8_t>& n,
                       uint32_t length, unsigned es, uint32_t modes, const std::string& what) {
  ChunkScratch scratch;
  EncodedChunk cpu;
  encode_chunk(o.data(), n.data(), length, es, 1000, modes, scratch, &cpu);
  uint8_t mode = 0;
  const std::vector<uint8_t> gpu = hd_encode(o.data(), n.data(), length, es, modes, &mode);
  ASSERT_EQ(gpu.size(), cpu.bytes.size()) << what;
  EXPECT_EQ(gpu, cpu.bytes) << what;
  EXPECT_EQ(mode, static_cast<uint8_t>(cpu.mode)) << what;
  EXPECT_EQ(cpu.bytes.empty(), o == n) << what;
  if (cpu.bytes.empty()) return;
  EXPECT_TRUE(modes == 0 || (testing::mode_mask_bit(cpu.mode) & modes) != 0)
      << what << ": encoded as " << chunk_mode_name(cpu.mode);
  DecodedChunk decoded;
  ASSERT_TRUE(decode_chunk(cpu.bytes, length, es, &decoded, "chunk").ok()) << what;
  EXPECT_EQ(decoded.mode, cpu.mode) << what;
  std::vector<uint32_t> pos(length), val(length);
  hd::ChunkHead head;
  ASSERT_EQ(hd::decode_chunk_hd(gpu.data(), gpu.size(), length, es, length, pos.data(), val.data(),
                                &head),
            hd::kDecodeOk)
      << what;
  if (decoded.mode == ChunkMode::kRaw) return;
  pos.resize(head.changed);
  val.resize(head.changed);
  EXPECT_EQ(pos, decoded.positions) << what;
  EXPECT_EQ(val, decoded.values) << what;
}

constexpr uint32_t kModeMasks[] = {kAllowAllModes,
                                   kAllowRice,
                                   kAllowStreamVByte,
                                   kAllowBitmap,
                                   kAllowRaw,
                                   kAllowStreamVByte | kAllowBitmap,
                                   0};

TEST(ChunkCodecHd, RandomChunksEncodeToTheCpuEncodersBytesInEveryMode) {
  for (unsigned es : {1u, 2u, 4u}) {
    for (double density : {0.0, 0.0005, 0.01, 0.1, 0.5, 0.95, 1.0}) {
      for (uint32_t length : {64u, 1000u, 4099u}) {
        const auto o = random_bytes(size_t{length} * es, 7 + es + length);
        const auto n = perturb(o, es, density, 99 + length);
        for (uint32_t modes : kModeMasks) {
          expect_same_chunk(o, n, length, es, modes,
                            "es " + std::to_string(es) + " density " + std::to_string(density) +
                                " length " + std::to_string(length) + " modes " +
                                std::to_string(modes));
        }
      }
    }
  }
}

TEST(ChunkCodecHd, AdversarialChunksEncodeToTheCpuEncodersBytes) {
  const uint32_t length = 1u << 20;  // the largest chunk: gaps up to 2^20, Rice quotients > 24
  for (unsigned es : {1u, 2u, 4u}) {
    const auto o = random_bytes(size_t{length} * es, 3 + es);
    struct Case {
      const char* name;
      std::vector<uint32_t> at;
      uint32_t flip;  // xor applied at each position
    };
    const Case cases[] = {
        {"first element", {0}, 1},
        {"last element", {length - 1}, 1},
        {"both ends", {0, length - 1}, 1u << (es * 8 - 1)},
        {"sign flips", {5, 6, 7, 100000, 100001, 900000}, 1u << (es * 8 - 1)},
        {"every bit", {1, 70000, 500000}, es == 4 ? 0xFFFFFFFFu : (1u << (es * 8)) - 1},
        {"gaps of every width", {255, 511, 66047, length - 2}, 3},
    };
    for (const Case& c : cases) {
      auto n = o;
      for (uint32_t p : c.at) {
        if (p >= length) continue;
        uint32_t v = 0;
        std::memcpy(&v, n.data() + size_t{p} * es, es);
        v ^= c.flip;
        std::memcpy(n.data() + size_t{p} * es, &v, es);
      }
      for (uint32_t modes : kModeMasks) {
        expect_same_chunk(
            o, n, length, es, modes,
            std::string(c.name) + " es " + std::to_string(es) + " modes " + std::to_string(modes));
      }
    }
  }
}

// Every corruption of a valid chunk gets the same verdict from both decoders, and when both
// accept it they agree on every position and value.
TEST(ChunkCodecHd, CorruptChunksGetTheCpuDecodersVerdict) {
  std::mt19937_64 rng(2026);
  int refused = 0, accepted = 0;
  for (unsigned es : {1u, 2u, 4u}) {
    for (uint32_t modes : {kAllowRice, kAllowStreamVByte, kAllowBitmap, kAllowRaw}) {
      const uint32_t length = 2048;
      const auto o = random_bytes(size_t{length} * es, 11 + es);
      const auto n = perturb(o, es, 0.05, 12 + es);
      ChunkScratch scratch;
      EncodedChunk enc;
      encode_chunk(o.data(), n.data(), length, es, 0, modes, scratch, &enc);
      ASSERT_FALSE(enc.bytes.empty());
      ASSERT_EQ(testing::mode_mask_bit(enc.mode), modes) << "the corruptions reach that decoder";
      for (int trial = 0; trial < 300; ++trial) {
        std::vector<uint8_t> bad = enc.bytes;
        switch (trial % 3) {
          case 0:
            bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
            break;
          case 1:
            bad.resize(rng() % bad.size());
            break;
          default:
            bad[rng() % std::min<size_t>(bad.size(), 12)] = static_cast<uint8_t>(rng());
            break;
        }
        DecodedChunk cpu;
        const bool cpu_ok = decode_chunk(bad, length, es, &cpu, "chunk").ok();
        std::vector<uint32_t> pos(length), val(length);
        hd::ChunkHead head;
        const hd::ChunkDecodeError e = hd::decode_chunk_hd(bad.data(), bad.size(), length, es,
                                                           length, pos.data(), val.data(), &head);
        ASSERT_EQ(cpu_ok, e == hd::kDecodeOk) << "trial " << trial << " es " << es << " modes "
                                              << modes << ": " << hd::chunk_decode_error_text(e);
        if (!cpu_ok) {
          ++refused;
          continue;
        }
        ++accepted;
        if (cpu.mode == ChunkMode::kRaw) continue;
        pos.resize(head.changed);
        val.resize(head.changed);
        EXPECT_EQ(pos, cpu.positions);
        EXPECT_EQ(val, cpu.values);
      }
    }
  }
  EXPECT_GT(refused, 500);  // the corruptions were real
  EXPECT_GT(accepted, 0);   // and some (flipped value bits) still decode
}

// A chunk of `length` random bf16 elements, a `density` of them changed, encoded by the CPU.
EncodedChunk encoded_bf16(uint32_t length, double density, uint64_t seed, uint32_t modes) {
  const auto o = random_bytes(length * 2, seed);
  const auto n = perturb(o, 2, density, seed + 1);
  ChunkScratch scratch;
  EncodedChunk enc;
  encode_chunk(o.data(), n.data(), length, 2, 0, modes, scratch, &enc);
  return enc;
}

TEST(ChunkCodecHd, ChangeCountBeyondTheReservedCapacityIsRefused) {
  const uint32_t length = 256;
  const EncodedChunk enc = encoded_bf16(length, 0.5, 5, kAllowBitmap);
  std::vector<uint32_t> pos(length), val(length);
  hd::ChunkHead head;
  EXPECT_EQ(hd::decode_chunk_hd(enc.bytes.data(), enc.bytes.size(), length, 2, enc.changed - 1,
                                pos.data(), val.data(), &head),
            hd::kBadChangedCount);
  EXPECT_EQ(hd::decode_chunk_hd(enc.bytes.data(), enc.bytes.size(), length, 2, enc.changed,
                                pos.data(), val.data(), &head),
            hd::kDecodeOk);
}

// The CPU decoder's messages name the chunk and, for a header check, the numbers at fault; for
// a section, the check that failed and the chunk's mode and size.
TEST(ChunkCodecHd, TheCpuDecodersMessagesNameTheChunkAndWhatIsWrong) {
  const uint32_t length = 4096;
  const EncodedChunk enc = encoded_bf16(length, 0.01, 7, kAllowRice);
  ASSERT_EQ(enc.mode, ChunkMode::kGapsRice);
  DecodedChunk out;
  const auto message = [&](std::vector<uint8_t> bytes) {
    const Status s = decode_chunk(bytes, length, 2, &out, "tensor 'w' chunk 3");
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    return s.message();
  };
  EXPECT_EQ(message({1, 2, 3}),
            "tensor 'w' chunk 3: chunk of 3 bytes is shorter than its 12-byte header");
  std::vector<uint8_t> bad = enc.bytes;
  bad[4] = 0xFF;
  bad[5] = 0xFF;  // changed = 65535 + ... > 4096
  EXPECT_NE(message(bad).find("tensor 'w' chunk 3: claims "), std::string::npos);
  EXPECT_NE(message(bad).find(" changes in a chunk of 4096 elements"), std::string::npos);
  bad = enc.bytes;
  bad[0] = 9;
  EXPECT_EQ(message(bad), "tensor 'w' chunk 3: unknown chunk mode 9 or reserved byte 0");
  bad = enc.bytes;
  bad.resize(kChunkHeaderBytes + 3);  // the positions section cut short
  EXPECT_NE(message(bad).find("runs past the chunk end"), std::string::npos);
  bad = enc.bytes;
  bad.pop_back();  // the values section one byte short
  EXPECT_EQ(message(bad),
            "tensor 'w' chunk 3: values section size disagrees with its widths "
            "(gaps-rice chunk, " +
                std::to_string(enc.changed) + " changes in 4096 elements)");
}

}  // namespace
}  // namespace weightcast
