// Refuse / verify / revert (ARCHITECTURE.md §4) and applying into strided views and shards.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>

#include "codec/base/byte_io.h"
#include "codec/base/thread_pool.h"
#include "tests/codec/chunk_mode_check.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::encode;
using testing::perturb;
using testing::random_bytes;
using testing::view_of;

constexpr size_t kTargetChecksumOffset = 64;

// Rewrites the XXH3 trailer after a test edited the record on purpose.
void reseal(std::vector<uint8_t>* record) {
  const size_t body = record->size() - kDeltaTrailerBytes;
  store_le<uint64_t>(record->data() + body, XXH3_64bits(record->data(), body));
}

class DeltaGuarantees : public ::testing::Test {
 protected:
  void SetUp() override {
    old_ = random_bytes(200000 * 2, 21);
    new_ = perturb(old_, 2, 0.02, 22);
    auto enc = encode(old_, new_, DType::kBF16, 4096);
    ASSERT_TRUE(enc.ok());
    record_ = enc->record;
  }
  DeltaRecordView parsed() {
    auto rec = parse_delta_record(record_);
    EXPECT_TRUE(rec.ok()) << rec.status().to_string();
    return *rec;
  }
  std::vector<uint8_t> old_, new_, record_;
};

TEST_F(DeltaGuarantees, DoubleApplyIsRefusedAndLeavesBytesUnchanged) {
  std::vector<uint8_t> dest = old_;
  ASSERT_TRUE(apply_delta(parsed(), view_of(dest, DType::kBF16)).ok());
  ASSERT_EQ(dest, new_);
  auto again = apply_delta(parsed(), view_of(dest, DType::kBF16));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("'t'"), std::string::npos) << again.status().message();
  EXPECT_EQ(dest, new_);
}

TEST_F(DeltaGuarantees, WrongBaseIsRefusedBeforeTouchingMemory) {
  std::vector<uint8_t> dest = perturb(old_, 2, 0.001, 23);  // some other version
  const auto before = dest;
  auto r = apply_delta(parsed(), view_of(dest, DType::kBF16));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(dest, before);
}

TEST_F(DeltaGuarantees, TrackedChecksumSkipsTheScanButStillRefuses) {
  std::vector<uint8_t> dest = old_;
  ApplyOptions o;
  o.current_checksum = parsed().header.base_checksum + 1;  // the engine holds another version
  EXPECT_FALSE(apply_delta(parsed(), view_of(dest, DType::kBF16), o).ok());
  EXPECT_EQ(dest, old_);
  o.current_checksum = parsed().header.base_checksum;
  ASSERT_TRUE(apply_delta(parsed(), view_of(dest, DType::kBF16), o).ok());
  EXPECT_EQ(dest, new_);
}

TEST_F(DeltaGuarantees, DeltaShiftedByOneElementFailsTheChecksumAndReverts) {
  // The same changes one element later, carrying the true record's checksums: what an encoder
  // with an off-by-one in its positions would produce.
  std::vector<uint8_t> shifted = old_;
  const size_t n = old_.size() / 2;
  for (size_t i = 0; i + 1 < n; ++i) {
    uint16_t o, v, o1;
    std::memcpy(&o, old_.data() + 2 * i, 2);
    std::memcpy(&v, new_.data() + 2 * i, 2);
    std::memcpy(&o1, old_.data() + 2 * i + 2, 2);
    const uint16_t moved = static_cast<uint16_t>(o1 + (v - o));
    std::memcpy(shifted.data() + 2 * i + 2, &moved, 2);
  }
  for (uint32_t modes : {uint32_t{kAllowAllModes}, uint32_t{kAllowRaw}, uint32_t{kAllowBitmap}}) {
    auto bad = encode(old_, shifted, DType::kBF16, 4096, modes);
    ASSERT_TRUE(bad.ok());
    auto honest = parse_delta_record(bad->record);
    ASSERT_TRUE(honest.ok());
    testing::expect_chunk_modes(*bad, *honest, old_, shifted, modes);
    store_le<uint64_t>(bad->record.data() + kTargetChecksumOffset, parsed().header.target_checksum);
    reseal(&bad->record);
    auto rec = parse_delta_record(bad->record);
    ASSERT_TRUE(rec.ok());
    std::vector<uint8_t> dest = old_;
    auto r = apply_delta(*rec, view_of(dest, DType::kBF16));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kChecksumMismatch);
    EXPECT_EQ(dest, old_) << "a failed apply must leave the old version intact";
  }
}

TEST_F(DeltaGuarantees, RevertAlsoWorksOnThePool) {
  ThreadPool pool(2);
  std::vector<uint8_t> bad_record = record_;
  store_le<uint64_t>(bad_record.data() + kTargetChecksumOffset, 12345);
  reseal(&bad_record);
  auto rec = parse_delta_record(bad_record);
  ASSERT_TRUE(rec.ok());
  std::vector<uint8_t> dest = old_;
  ApplyOptions o;
  o.pool = &pool;
  EXPECT_FALSE(apply_delta(*rec, view_of(dest, DType::kBF16), o).ok());
  EXPECT_EQ(dest, old_);
}

TEST_F(DeltaGuarantees, WrongDtypeOrSizeIsRefusedWithNames) {
  std::vector<uint8_t> dest = old_;
  auto r = apply_delta(parsed(), view_of(dest, DType::kF16));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bf16"), std::string::npos);
  std::vector<uint8_t> small(old_.begin(), old_.begin() + 100);
  small.resize(small.size() + 2);  // 51 elements: a part without part checksums
  EXPECT_FALSE(apply_delta(parsed(), view_of(small, DType::kBF16)).ok());
}

TEST(DeltaViews, ApplyIntoAStridedSliceOfAPackedParameter) {
  // A packed [E=4, 64, 96] parameter; expert 2's "up" half is columns 48..95 (strided view).
  const int64_t E = 4, R = 64, C = 96, H = 48;
  auto packed = random_bytes(E * R * C * 2, 31);
  std::vector<uint8_t> slice_old(R * H * 2);
  for (int64_t r = 0; r < R; ++r) {
    std::memcpy(slice_old.data() + r * H * 2, packed.data() + ((2 * R + r) * C + H) * 2, H * 2);
  }
  const auto slice_new = perturb(slice_old, 2, 0.1, 32);
  auto enc = encode(slice_old, slice_new, DType::kBF16, 1024);
  ASSERT_TRUE(enc.ok());
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok());
  TensorRef view;
  view.name = "experts.2.up_proj";
  view.dtype = DType::kBF16;
  view.shape = {R, H};
  view.strides = {C, 1};
  view.offset = 2 * R * C + H;
  view.data = packed.data();
  const auto before = packed;
  ASSERT_TRUE(apply_delta(*rec, view).ok());
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        const size_t at = ((e * R + r) * C + c) * 2;
        const bool in_slice = e == 2 && c >= H;
        const uint8_t* want =
            in_slice ? slice_new.data() + (r * H + (c - H)) * 2 : before.data() + at;
        ASSERT_EQ(std::memcmp(packed.data() + at, want, 2), 0) << e << "," << r << "," << c;
      }
    }
  }
}

TEST(DeltaViews, ShardsApplyTheirPartWithPartChecksums) {
  const size_t n = 50000;
  const auto a = random_bytes(n * 2, 41);
  const auto b = perturb(a, 2, 0.05, 42);
  auto enc = encode(a, b, DType::kBF16, 4096);
  ASSERT_TRUE(enc.ok());
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok());
  // Two TP-style shards split at an element that is not a chunk boundary.
  const size_t cut = 20001;
  uint64_t sum_target = 0;
  for (auto [first, count] : {std::pair<size_t, size_t>{0, cut}, {cut, n - cut}}) {
    std::vector<uint8_t> shard(a.begin() + first * 2, a.begin() + (first + count) * 2);
    ApplyOptions o;
    o.dest_first_element = first;
    o.part_base_checksum = checksum_range(a.data() + first * 2, 2, count, first);
    o.part_target_checksum = checksum_range(b.data() + first * 2, 2, count, first);
    auto r = apply_delta(*rec, view_of(shard, DType::kBF16), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(0, std::memcmp(shard.data(), b.data() + first * 2, count * 2));
    sum_target += r->checksum;
    // A shard that declares the wrong offset is refused.
    std::vector<uint8_t> again(a.begin() + first * 2, a.begin() + (first + count) * 2);
    o.dest_first_element = first == 0 ? 1 : first - 1;
    EXPECT_FALSE(apply_delta(*rec, view_of(again, DType::kBF16), o).ok());
  }
  EXPECT_EQ(sum_target, rec->header.target_checksum);  // the parts add up to the whole
}

}  // namespace
}  // namespace weightcast
