// The journal reader writing its destinations in place (transport/fs/catch_up_reader.h): a
// delta version is all or nothing (the tensors applied before one that fails are reverted, for
// every cause of failure, and when the tensors applied before it are strided views of packed
// parameters), the bytes written per version are the changed elements, strided views of packed
// parameters receive anchors and deltas without their neighbours being touched, a claimed version
// is verified before it is trusted, and the write window brackets every write. The journal holds
// versions 0..7 with anchors at 0, 3 and 6.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/delta_format.h"
#include "codec/delta_manifest.h"
#include "tests/transport/journal_robustness_util.h"
#include "tests/transport/record_forgery.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace {

using testing::contains;
using testing::JournalTestModel;

constexpr uint64_t kSeed = 17;
constexpr uint64_t kHead = 7;
constexpr int kVictim = 4;  // quant.codes: tensors 0..3 of delta 5 are applied before it

class InPlaceReader : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pristine_ = new testing::ScratchDir;
    JournalTestModel model(kSeed);
    auto writer = JournalWriter::open(testing::robustness_options(pristine_->path()));
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    ASSERT_TRUE(testing::publish_model_through(writer->get(), &model, kHead).ok());
  }
  static void TearDownTestSuite() {
    delete pristine_;
    pristine_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(testing::copy_tree(pristine_->path(), dir_.path())); }

  void forge_victim(const testing::RecordEdit& edit) {
    const Status forged = testing::forge_record(layout_, 5, kVictim, edit);
    ASSERT_TRUE(forged.ok()) << forged.to_string();
  }

  // A reader holding version 4, its write window recorded in `calls`; with a pool of two
  // threads small records apply side by side.
  std::unique_ptr<CatchUpReader> reader_at_4(std::vector<std::vector<uint8_t>>* storage) {
    CatchUpOptions o;
    o.pool = &pool_;
    o.before_write = [this](uint64_t v) { calls_.push_back("before " + std::to_string(v)); };
    o.after_write = [this](uint64_t v) { calls_.push_back("after " + std::to_string(v)); };
    auto r = std::make_unique<CatchUpReader>(dir_.path(),
                                             JournalTestModel(kSeed).destinations(storage), o);
    auto report = r->catch_up(4);
    EXPECT_TRUE(report.ok()) << report.status().to_string();
    calls_.clear();
    return r;
  }

  static testing::ScratchDir* pristine_;
  testing::ScratchDir dir_;
  JournalLayout layout_{dir_.path()};
  std::vector<std::string> calls_;
  ThreadPool pool_{2};
};

testing::ScratchDir* InPlaceReader::pristine_ = nullptr;

// Tensor 0 ([64, 128] bf16) as the right half of a [64, 256] allocation and tensor 1
// ([8, 33, 17] bf16) as the left half of [8, 33, 34]: slices of packed parameters whose other
// halves belong to other tensors, which the reader must never write (they keep their fill).
struct PackedHalves {
  static constexpr uint8_t kFill0 = 0xAB, kFill1 = 0xCD;
  std::vector<uint8_t> packed0 = std::vector<uint8_t>(64 * 256 * 2, kFill0);
  std::vector<uint8_t> packed1 = std::vector<uint8_t>(8 * 33 * 34 * 2, kFill1);

  void attach(std::vector<ReaderDestination>* dests) {
    TensorRef v0;
    v0.dtype = DType::kBF16;
    v0.shape = {64, 128};
    v0.strides = {256, 1};
    v0.offset = 128;
    v0.data = packed0.data();
    TensorRef v1;
    v1.dtype = DType::kBF16;
    v1.shape = {8, 33, 17};
    v1.strides = {33 * 34, 34, 1};
    v1.data = packed1.data();
    (*dests)[0].view = v0;
    (*dests)[1].view = v1;
  }

  // "" when the views hold tensors 0 and 1 of `want` and every other byte its fill; otherwise
  // the first element that differs.
  std::string mismatch(const JournalTestModel& want) const {
    for (int64_t r = 0; r < 64; ++r) {
      for (int64_t c = 0; c < 256; ++c) {
        const size_t at = static_cast<size_t>(r * 256 + c) * 2;
        const uint8_t fill[2] = {kFill0, kFill0};
        const uint8_t* expect = c >= 128 ? want.bytes(0).data() + (r * 128 + c - 128) * 2 : fill;
        if (std::memcmp(packed0.data() + at, expect, 2) != 0) {
          return "packed0 [" + std::to_string(r) + ", " + std::to_string(c) + "]";
        }
      }
    }
    for (int64_t row = 0; row < 8 * 33; ++row) {
      for (int64_t c = 0; c < 34; ++c) {
        const size_t at = static_cast<size_t>(row * 34 + c) * 2;
        const uint8_t fill[2] = {kFill1, kFill1};
        const uint8_t* expect = c < 17 ? want.bytes(1).data() + (row * 17 + c) * 2 : fill;
        if (std::memcmp(packed1.data() + at, expect, 2) != 0) {
          return "packed1 [" + std::to_string(row) + ", " + std::to_string(c) + "]";
        }
      }
    }
    return "";
  }
};

struct FailureCause {
  const char* name;
  StatusCode code;
  testing::RecordEdit edit;
};

class InPlaceReaderFailure : public InPlaceReader,
                             public ::testing::WithParamInterface<FailureCause> {};

TEST_P(InPlaceReaderFailure, TheTensorsAppliedBeforeTheFailingOneAreReverted) {
  forge_victim(GetParam().edit);
  std::vector<std::vector<uint8_t>> storage;
  auto reader = reader_at_4(&storage);
  const uint64_t written_before = reader->bytes_written();
  auto failed = reader->catch_up(5);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), GetParam().code) << failed.status().to_string();
  EXPECT_TRUE(contains(failed.status().message(), "quant.codes")) << failed.status().to_string();
  EXPECT_TRUE(contains(failed.status().message(), "4 tensors already applied were reverted"))
      << failed.status().to_string();
  // Tensors 0..3 were written and then written back: bytes moved both ways.
  EXPECT_GT(reader->bytes_written(), written_before);
  EXPECT_EQ(reader->held(), std::optional<uint64_t>(4));
  JournalTestModel v4(kSeed);
  v4.advance_to(4);
  for (size_t i = 0; i < storage.size(); ++i) EXPECT_EQ(storage[i], v4.bytes(i)) << "tensor " << i;
  EXPECT_EQ(testing::held_mismatch(*reader, storage, kSeed), "");
  // The window opened for 5 and closed on 4, the version the tensors hold.
  EXPECT_EQ(calls_, (std::vector<std::string>{"before 5", "after 4"}));
  // HEAD is still reached, around the forged step, through anchor 6.
  auto report = reader->catch_up();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(reader->held(), std::optional<uint64_t>(kHead));
  EXPECT_EQ(testing::held_mismatch(*reader, storage, kSeed), "");
}

// The same failure with tensors 0 and 1 written through strided views of packed parameters:
// their revert goes through the strided path (element by element, not the contiguous kernel)
// and must restore every byte of the views without touching the halves beside them.
TEST_P(InPlaceReaderFailure, StridedViewsAppliedBeforeTheFailingOneAreRevertedAlone) {
  forge_victim(GetParam().edit);
  auto m5 = read_manifest_file(layout_.manifest(5));
  ASSERT_TRUE(m5.ok());
  ASSERT_TRUE(m5->tensors(0).changed() && m5->tensors(1).changed()) << "nothing to revert";
  JournalTestModel model(kSeed);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<ReaderDestination> dests = model.destinations(&storage);
  PackedHalves halves;
  halves.attach(&dests);
  CatchUpOptions o;
  o.pool = &pool_;
  CatchUpReader reader(dir_.path(), dests, o);
  auto at4 = reader.catch_up(4);
  ASSERT_TRUE(at4.ok()) << at4.status().to_string();
  JournalTestModel v4(kSeed);
  v4.advance_to(4);
  ASSERT_EQ(halves.mismatch(v4), "");
  const std::vector<uint8_t> packed0 = halves.packed0, packed1 = halves.packed1;

  auto failed = reader.catch_up(5);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), GetParam().code) << failed.status().to_string();
  EXPECT_TRUE(contains(failed.status().message(), "4 tensors already applied were reverted"))
      << failed.status().to_string();
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(4));
  EXPECT_TRUE(halves.packed0 == packed0 && halves.packed1 == packed1)
      << "not as before the failed version, first difference from version 4: "
      << halves.mismatch(v4);
  for (size_t i = 2; i < storage.size(); ++i) EXPECT_EQ(storage[i], v4.bytes(i)) << "tensor " << i;

  // HEAD is still reached through anchor 6, the halves beside the views still untouched.
  auto report = reader.catch_up();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  JournalTestModel head(kSeed);
  head.advance_to(kHead);
  EXPECT_EQ(halves.mismatch(head), "");
}

INSTANTIATE_TEST_SUITE_P(
    Causes, InPlaceReaderFailure,
    ::testing::Values(FailureCause{"base_mismatch", StatusCode::kFailedPrecondition,
                                   [](DeltaRecordHeader* h, std::vector<std::vector<uint8_t>>*) {
                                     h->base_checksum ^= 0x1234;
                                   }},
                      FailureCause{"target_mismatch", StatusCode::kChecksumMismatch,
                                   [](DeltaRecordHeader* h, std::vector<std::vector<uint8_t>>*) {
                                     h->target_checksum ^= 0x5a5a;
                                   }},
                      // A chunk whose mode byte names no mode: it parses, and fails when decoded.
                      FailureCause{
                          "corrupt_chunk", StatusCode::kDataLoss,
                          [](DeltaRecordHeader*, std::vector<std::vector<uint8_t>>* chunks) {
                            for (auto& c : *chunks) {
                              if (!c.empty()) c[0] = 0x7F;
                            }
                          }}),
    [](const ::testing::TestParamInfo<FailureCause>& info) { return info.param.name; });

TEST_F(InPlaceReader, BytesWrittenPerDeltaAreTheChangedElements) {
  std::vector<std::vector<uint8_t>> storage;
  auto reader = reader_at_4(&storage);
  const uint64_t before = reader->bytes_written();
  auto report = reader->catch_up(5);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  auto m = read_manifest_file(layout_.manifest(5));
  ASSERT_TRUE(m.ok());
  uint64_t changed_bytes = 0;
  for (const auto& t : m->tensors()) {
    auto dtype = dtype_from_proto(t.dtype());
    ASSERT_TRUE(dtype.ok());
    changed_bytes += t.changed_elements() * dtype_size(*dtype);
  }
  ASSERT_GT(changed_bytes, 0u);
  EXPECT_EQ(reader->bytes_written() - before, changed_bytes);
  EXPECT_EQ(report->bytes_written, changed_bytes);
  EXPECT_EQ(calls_, (std::vector<std::string>{"before 5", "after 5"}));
}

TEST_F(InPlaceReader, StridedViewsOfPackedParametersReceiveAnchorsAndDeltasAlone) {
  JournalTestModel model(kSeed);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<ReaderDestination> dests = model.destinations(&storage);
  PackedHalves halves;
  halves.attach(&dests);
  CatchUpReader reader(dir_.path(), dests);
  for (const uint64_t target : {uint64_t{2}, kHead}) {  // anchor 0 + deltas; then across 6
    auto report = reader.catch_up(target);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    JournalTestModel want(kSeed);
    want.advance_to(target);
    EXPECT_EQ(halves.mismatch(want), "");
    for (size_t i = 2; i < storage.size(); ++i) EXPECT_EQ(storage[i], want.bytes(i)) << i;
  }
}

TEST_F(InPlaceReader, AClaimedVersionIsTrustedOnlyWhenEveryChecksumMatches) {
  JournalTestModel v4(kSeed);
  v4.advance_to(4);
  for (const bool tamper : {false, true}) {
    std::vector<std::vector<uint8_t>> storage;
    CatchUpReader reader(dir_.path(), v4.destinations(&storage));
    for (size_t i = 0; i < storage.size(); ++i) storage[i] = v4.bytes(i);  // loaded by the engine
    if (tamper) storage[2][5] ^= 0x40;  // one element of layers.0.norm.weight differs
    const Status adopted = reader.adopt(4);
    if (!tamper) {
      ASSERT_TRUE(adopted.ok()) << adopted.to_string();
      EXPECT_EQ(reader.held(), std::optional<uint64_t>(4));
    } else {
      ASSERT_FALSE(adopted.ok());
      EXPECT_EQ(adopted.code(), StatusCode::kChecksumMismatch);
      EXPECT_TRUE(contains(adopted.message(), "layers.0.norm.weight")) << adopted.to_string();
      EXPECT_FALSE(reader.held().has_value());
    }
    auto report = reader.catch_up();
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    EXPECT_EQ(report->anchors_loaded, tamper ? 1u : 0u);
    EXPECT_EQ(reader.held(), std::optional<uint64_t>(kHead));
    EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");
  }
}

TEST_F(InPlaceReader, AClaimOfAVersionTheJournalDoesNotHaveIsRefused) {
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(dir_.path(), JournalTestModel(kSeed).destinations(&storage));
  const Status adopted = reader.adopt(40);
  ASSERT_FALSE(adopted.ok());
  EXPECT_FALSE(reader.held().has_value());
}

}  // namespace
}  // namespace weightcast
