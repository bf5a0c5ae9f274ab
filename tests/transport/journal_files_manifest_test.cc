// The content checks of a journal MANIFEST (check_manifest through parse_manifest): one test
// per way a well-framed manifest can lie, each refused as kDataLoss naming the file and the
// problem, before any reader opens a part it names.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/transport/journal_files_test_manifests.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace {

using testing::kManifestWhat;
using testing::manifest_status;
using testing::valid_anchor;
using testing::valid_delta;
using testing::valid_parts;

void expect_refused(const proto::StepManifest& m, const std::vector<std::string>& needles,
                    const JournalFileLimits& limits = {}) {
  testing::expect_data_loss(manifest_status(m, limits), kManifestWhat, needles);
}

TEST(JournalFilesManifest, WrongFormatVersion) {
  for (const uint32_t v : {0u, 2u}) {
    auto m = valid_delta();
    m.set_format_version(v);
    expect_refused(m, {"format version " + std::to_string(v), "this build reads 1"});
  }
}

TEST(JournalFilesManifest, UnknownStepKind) {
  for (const int kind : {0, 4, -3}) {
    auto m = valid_parts();
    m.set_kind(static_cast<proto::StepKind>(kind));
    expect_refused(m, {"unknown step kind " + std::to_string(kind)});
  }
}

TEST(JournalFilesManifest, AnchorNamingAnotherAnchorVersion) {
  auto m = valid_anchor();
  m.set_anchor_version(4);
  expect_refused(m, {"anchor_version 4 instead of its own version 5"});
}

TEST(JournalFilesManifest, DeltaBaseNotTheVersionBefore) {
  auto m = valid_delta();
  m.set_base_version(5);
  expect_refused(m, {"delta versions are inconsistent", "version 7, base 5, anchor 5"});
}

TEST(JournalFilesManifest, DeltaAnchorAfterItsBase) {
  auto m = valid_delta();
  m.set_anchor_version(7);
  expect_refused(m, {"delta versions are inconsistent", "anchor 7"});
}

TEST(JournalFilesManifest, DeltaOfVersionZero) {
  auto m = valid_delta();
  m.set_version(0);
  m.set_base_version(UINT64_MAX);  // what version - 1 wraps to
  m.set_anchor_version(0);
  expect_refused(m, {"delta versions are inconsistent", "version 0"});
}

TEST(JournalFilesManifest, PartsStepListingTensors) {
  auto m = valid_parts();
  *m.add_tensors() = valid_delta().tensors(1);
  expect_refused(m, {"a parts step lists tensors"});
}

TEST(JournalFilesManifest, TooManyTensors) {
  JournalFileLimits limits;
  limits.max_tensors = 2;
  expect_refused(valid_delta(), {"more tensors or parts than the limits allow"}, limits);
}

TEST(JournalFilesManifest, TooManyParts) {
  JournalFileLimits limits;
  limits.max_parts = 1;
  expect_refused(valid_parts(), {"more tensors or parts than the limits allow"}, limits);
}

TEST(JournalFilesManifest, EmptyTensorName) {
  auto m = valid_delta();
  m.mutable_tensors(1)->clear_name();
  expect_refused(m, {"a tensor has an empty name"});
}

TEST(JournalFilesManifest, TensorNameOverTheLimit) {
  JournalFileLimits limits;
  limits.max_name_bytes = 13;  // "model.a.weight" is 14
  expect_refused(valid_delta(), {"a tensor name is longer than 13 bytes"}, limits);
}

TEST(JournalFilesManifest, DuplicateTensor) {
  auto m = valid_delta();
  m.mutable_tensors(2)->set_name("model.a.weight");
  expect_refused(m, {"tensor 'model.a.weight' listed twice"});
}

TEST(JournalFilesManifest, UnknownDtype) {
  for (const int dtype : {0, 200, 13, -1}) {
    auto m = valid_delta();
    m.mutable_tensors(1)->set_dtype(static_cast<proto::DType>(dtype));
    expect_refused(m, {"tensor 'model.b.scale'", "unknown dtype"});
  }
}

TEST(JournalFilesManifest, RankOverTheLimit) {
  JournalFileLimits limits;
  limits.max_rank = 2;
  auto m = valid_delta();
  m.mutable_tensors(1)->add_shape(1);
  m.mutable_tensors(1)->add_shape(1);
  expect_refused(m, {"tensor 'model.b.scale'", "rank 3 over the limit"}, limits);
}

TEST(JournalFilesManifest, NegativeDimension) {
  auto m = valid_delta();
  m.mutable_tensors(1)->add_shape(-2);
  expect_refused(m, {"tensor 'model.b.scale'", "negative size -2 in dim 1"});
}

TEST(JournalFilesManifest, ByteSizeOverflow) {
  // 2^62 f64 elements pass the element count check; their bytes do not fit 64 bits.
  auto m = valid_delta();
  auto* t = m.mutable_tensors(1);
  t->set_dtype(proto::DTYPE_F64);
  t->clear_shape();
  t->add_shape(int64_t{1} << 31);
  t->add_shape(int64_t{1} << 31);
  expect_refused(m, {"tensor 'model.b.scale'", "byte size overflows"});
  // More elements than that are refused counting them.
  t->add_shape(INT64_MAX);
  expect_refused(m, {"tensor 'model.b.scale'", "more than 2^62 elements"});
}

TEST(JournalFilesManifest, UnsafePartFileNames) {
  for (const std::string& name : std::vector<std::string>{
           "", ".", "..", "a/b", "../MANIFEST", "a b", "ctl\x01", "cr\r", std::string(256, 'p')}) {
    auto m = valid_parts();
    m.mutable_parts(1)->set_file(name);
    expect_refused(m, {"unsafe part file name '" + name + "'"});
  }
}

TEST(JournalFilesManifest, DuplicatePartName) {
  auto m = valid_parts();
  m.mutable_parts(1)->set_file("blob-0.bin");
  expect_refused(m, {"part file 'blob-0.bin' listed twice"});
}

TEST(JournalFilesManifest, UncompressedPartWithOtherRawBytes) {
  auto m = valid_delta();
  m.mutable_parts(0)->set_raw_bytes(101);
  expect_refused(m, {"uncompressed part 'part-00000.wcd' has raw_bytes 101 != bytes 100"});
}

TEST(JournalFilesManifest, UnknownCompression) {
  auto m = valid_delta();
  m.mutable_parts(1)->set_compression(static_cast<proto::PartCompression>(9));
  expect_refused(m, {"part 'part-00001.wcd' has unknown compression 9"});
}

TEST(JournalFilesManifest, ChangedTensorNamingAPartOutOfRange) {
  auto m = valid_delta();
  m.mutable_tensors(2)->set_part(2);
  expect_refused(m, {"tensor 'model.c.weight' names part 2 of 2"});
}

TEST(JournalFilesManifest, RecordRangeOutsideItsPart) {
  struct Case {
    uint64_t offset, bytes;
  };
  // Part 1 holds 300 bytes after decompression.
  for (const Case c : {Case{200, 101}, Case{301, 0}, Case{0, 301}, Case{UINT64_MAX, 2},
                       Case{2, UINT64_MAX}, Case{UINT64_MAX - 10, 20}}) {
    auto m = valid_delta();
    m.mutable_tensors(2)->set_offset(c.offset);
    m.mutable_tensors(2)->set_bytes(c.bytes);
    expect_refused(m, {"tensor 'model.c.weight' lies at [" + std::to_string(c.offset),
                       "outside its part of 300 bytes"});
  }
  // An unchanged tensor has no record, so its range is not looked at.
  auto m = valid_delta();
  m.mutable_tensors(1)->set_offset(UINT64_MAX);
  m.mutable_tensors(1)->set_part(99);
  EXPECT_TRUE(manifest_status(m).ok());
}

TEST(JournalFilesManifest, AnchorTensorBytesDisagreeWithDtypeAndShape) {
  auto m = valid_anchor();
  m.mutable_tensors(0)->set_bytes(63);
  expect_refused(m, {"tensor 'model.a.weight' is 63 bytes, its dtype and shape say 64"});
}

TEST(JournalFilesManifest, AnchorExtentChecksNameTheFile) {
  auto gap = valid_anchor();
  gap.mutable_extents(1)->set_bytes(60);
  expect_refused(gap, {"anchor manifest", "does not continue at 188"});
  auto no_parts = valid_anchor();
  no_parts.clear_parts();
  no_parts.clear_tensors();
  expect_refused(no_parts, {"anchor manifest: no parts"});
}

TEST(JournalFilesManifest, AnchorExtentNamingAShardPastTheLast) {
  // The shard index follows the previous one but there is no such part.
  auto m = valid_anchor();
  auto* x = m.add_extents();
  x->set_shard(1);
  x->set_bytes(8);
  expect_refused(m, {"anchor manifest: extent 3 names shard 1 of 1"});
}

}  // namespace
}  // namespace weightcast

namespace weightcast {
namespace {

// A delta listing the checksum of rows [0, 16) and [16, 32) of model.a.weight [32].
proto::StepManifest with_slices() {
  auto m = testing::valid_delta();
  for (int64_t first : {0, 16}) {
    auto* e = m.add_slice_checksums();
    e->set_tensor("model.a.weight");
    e->mutable_slice()->add_offsets(first);
    e->mutable_slice()->add_sizes(16);
    e->set_checksum(static_cast<uint64_t>(first) + 1);
  }
  return m;
}

TEST(JournalFilesManifestSlices, ValidSliceChecksumsPass) {
  EXPECT_TRUE(testing::manifest_status(with_slices()).ok())
      << testing::manifest_status(with_slices()).to_string();
}

TEST(JournalFilesManifestSlices, ASliceChecksumOfATensorNotListed) {
  auto m = with_slices();
  m.mutable_slice_checksums(1)->set_tensor("model.z.weight");
  testing::expect_data_loss(testing::manifest_status(m), testing::kManifestWhat,
                            {"a slice checksum names tensor 'model.z.weight'"});
}

TEST(JournalFilesManifestSlices, ASliceOutsideItsTensor) {
  auto m = with_slices();
  m.mutable_slice_checksums(1)->mutable_slice()->set_offsets(0, 20);
  testing::expect_data_loss(testing::manifest_status(m), testing::kManifestWhat,
                            {"slice [20:36] leaves the tensor along dimension 0"});
  auto flat = with_slices();
  auto* s = flat.mutable_slice_checksums(0)->mutable_slice();
  s->Clear();
  s->set_flat(true);
  s->set_begin(10);
  s->set_end(40);
  testing::expect_data_loss(testing::manifest_status(flat), testing::kManifestWhat,
                            {"elements [10, 40) is not a range of its 32 elements"});
  auto dims = with_slices();
  for (int k = 0; k < 70; ++k) dims.mutable_slice_checksums(0)->mutable_slice()->add_offsets(0);
  testing::expect_data_loss(testing::manifest_status(dims), testing::kManifestWhat,
                            {"a slice of tensor 'model.a.weight' has too many dimensions"});
}

TEST(JournalFilesManifestSlices, ASliceWithTwoChecksums) {
  auto m = with_slices();
  m.mutable_slice_checksums(1)->mutable_slice()->set_offsets(0, 0);
  testing::expect_data_loss(testing::manifest_status(m), testing::kManifestWhat,
                            {"slice [0:16] of tensor 'model.a.weight' has two checksums"});
}

TEST(JournalFilesManifestSlices, MoreSliceChecksumsThanTheLimit) {
  JournalFileLimits limits;
  limits.max_slice_checksums = 1;
  testing::expect_data_loss(testing::manifest_status(with_slices(), limits), testing::kManifestWhat,
                            {"2 slice checksums exceed the limit 1"});
}

// A rank's FRAGMENT may list the descriptors its live paths returned (rank_fragments.h), within
// limits; a committed step never does.
TEST(JournalFilesManifestLive, ACommittedStepWithLiveDescriptors) {
  auto m = valid_delta();
  (*m.mutable_live_descriptors())["ucx"] = "blob";
  expect_refused(m, {"a committed step carries live descriptors"});
}

TEST(JournalFilesManifestLive, AFragmentsDescriptorsWithinAndPastTheLimits) {
  const auto fragment_status = [](const proto::StepManifest& m) {
    return check_manifest_covering(m, kManifestWhat, {}, RangeCoverage::kPartial);
  };
  auto m = valid_delta();
  (*m.mutable_live_descriptors())["ucx"] = std::string(kMaxRankLiveDescriptorBytes, 'b');
  EXPECT_TRUE(fragment_status(m).ok()) << fragment_status(m).to_string();
  auto big = m;
  (*big.mutable_live_descriptors())["ucx"] += "b";
  testing::expect_data_loss(fragment_status(big), kManifestWhat,
                            {"live descriptor 'ucx' (1048577 bytes)", "over 1048576 bytes"});
  auto unnamed = valid_delta();
  (*unnamed.mutable_live_descriptors())[""] = "blob";
  testing::expect_data_loss(fragment_status(unnamed), kManifestWhat,
                            {"live descriptor '' (4 bytes) has an empty or long name"});
  auto many = valid_delta();
  for (size_t i = 0; i <= kMaxRankLiveDescriptors; ++i) {
    (*many.mutable_live_descriptors())["p" + std::to_string(i)] = "d";
  }
  testing::expect_data_loss(fragment_status(many), kManifestWhat,
                            {"17 live descriptors, more than 16"});
}

}  // namespace
}  // namespace weightcast
