// Hostile records: every truncation and single-byte corruptions must give an error, never a
// crash, a hang or a partial apply (this suite also runs under ASan/UBSan: make test-asan).
#include <gtest/gtest.h>

#include "tests/codec/chunk_mode_check.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::encode;
using testing::perturb;
using testing::random_bytes;
using testing::view_of;

// A small record that uses every chunk mode, so corruptions reach every decoder.
std::vector<std::vector<uint8_t>> sample_records(std::vector<uint8_t>* old_out,
                                                 std::vector<uint8_t>* new_out) {
  const size_t n = 640;
  *old_out = random_bytes(n * 2, 51);
  *new_out = perturb(*old_out, 2, 0.05, 52);
  for (size_t i = 300; i < 380; ++i) (*new_out)[2 * i] ^= 0x5A;  // a dense stretch
  std::vector<std::vector<uint8_t>> records;
  for (uint32_t modes : {uint32_t{kAllowRice}, uint32_t{kAllowStreamVByte}, uint32_t{kAllowBitmap},
                         uint32_t{kAllowRaw}, uint32_t{kAllowAllModes}}) {
    auto enc = encode(*old_out, *new_out, DType::kBF16, 128, modes);
    EXPECT_TRUE(enc.ok());
    auto rec = parse_delta_record(enc->record);
    EXPECT_TRUE(rec.ok());
    if (rec.ok()) testing::expect_chunk_modes(*enc, *rec, *old_out, *new_out, modes);
    records.push_back(enc->record);
  }
  return records;
}

// Either an error with the destination untouched, or success with exactly the new version:
// the checksum makes anything in between impossible.
void expect_safe_apply(std::span<const uint8_t> bytes, bool verify_hash,
                       const std::vector<uint8_t>& old_bytes, const std::vector<uint8_t>& new_bytes,
                       bool* refused) {
  ParseOptions po;
  po.verify_hash = verify_hash;
  auto rec = parse_delta_record(bytes, po);
  if (!rec.ok()) {
    EXPECT_FALSE(rec.status().message().empty());
    *refused = true;
    return;
  }
  std::vector<uint8_t> dest = old_bytes;
  if (rec->header.range_elements != dest.size() / 2 || rec->header.dtype != DType::kBF16) {
    *refused = true;  // apply would refuse the shape; nothing to write
    return;
  }
  auto r = apply_delta(*rec, view_of(dest, DType::kBF16));
  if (r.ok()) {
    EXPECT_EQ(dest, new_bytes);
    *refused = false;
  } else {
    EXPECT_EQ(dest, old_bytes) << r.status().to_string();
    *refused = true;
  }
}

TEST(DeltaCorruption, EveryTruncationIsAnError) {
  std::vector<uint8_t> a, b;
  for (const auto& record : sample_records(&a, &b)) {
    for (size_t len = 0; len < record.size(); ++len) {
      for (bool verify : {true, false}) {
        auto rec = parse_delta_record(std::span(record.data(), len), {.verify_hash = verify});
        ASSERT_FALSE(rec.ok()) << "a record cut to " << len << " bytes parsed";
      }
    }
  }
}

TEST(DeltaCorruption, EverySingleByteCorruptionIsCaughtByTheHash) {
  std::vector<uint8_t> a, b;
  for (auto record : sample_records(&a, &b)) {
    for (size_t i = 0; i < record.size(); ++i) {
      for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
        record[i] ^= flip;
        bool refused = false;
        expect_safe_apply(record, /*verify_hash=*/true, a, b, &refused);
        EXPECT_TRUE(refused) << "byte " << i << " ^ " << int(flip) << " went unnoticed";
        record[i] ^= flip;
      }
    }
  }
}

TEST(DeltaCorruption, WithoutTheHashStructureAndChecksumsStillProtect) {
  // Past the hash, corruption reaches the structural checks and the target checksum. A few
  // header fields (versions, the stored "changed" count of a raw chunk) do not affect the
  // result, so success is allowed, but only with exactly the new bytes.
  std::vector<uint8_t> a, b;
  size_t refused_count = 0, total = 0;
  for (auto record : sample_records(&a, &b)) {
    for (size_t i = 0; i < record.size() - kDeltaTrailerBytes; ++i) {
      for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x10}, uint8_t{0xFF}}) {
        record[i] ^= flip;
        bool refused = false;
        expect_safe_apply(record, /*verify_hash=*/false, a, b, &refused);
        refused_count += refused;
        ++total;
        record[i] ^= flip;
      }
    }
  }
  EXPECT_GT(refused_count, total * 9 / 10) << refused_count << " of " << total;
}

TEST(DeltaCorruption, DeltaFileFramingIsChecked) {
  std::vector<uint8_t> a, b;
  auto records = sample_records(&a, &b);
  std::vector<uint8_t> file = delta_file_header(2);
  file.insert(file.end(), records[0].begin(), records[0].end());
  file.insert(file.end(), records[1].begin(), records[1].end());
  auto parsed = parse_delta_file(file);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->size(), 2u);
  auto trailing = file;
  trailing.push_back(0);
  EXPECT_FALSE(parse_delta_file(trailing).ok());
  auto more = file;
  more[12] = 3;  // claims a third record
  EXPECT_FALSE(parse_delta_file(more).ok());
  auto bad_magic = file;
  bad_magic[0] = 'X';
  EXPECT_FALSE(parse_delta_file(bad_magic).ok());
  EXPECT_FALSE(parse_delta_file({}).ok());
}

}  // namespace
}  // namespace weightcast
