// The frame of the journal's small files (HEAD, MANIFEST, lease): every kind round-trips, and
// every way a file can be torn, corrupted or forged is refused as kDataLoss naming the file
// and the problem. The manifest's content checks are in journal_files_manifest_test.cc.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>

#include "codec/base/byte_io.h"
#include "tests/transport/journal_files_test_manifests.h"
#include "tests/transport/journal_test_model.h"
#include "transport/fs/anchor_writer.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace {

using testing::expect_data_loss;
using testing::framed;
using testing::kManifestWhat;
using Bytes = std::vector<uint8_t>;

constexpr const char* kHeadWhat = "journal/HEAD";
constexpr const char* kLeaseWhat = "journal/leases/reader-1.lease";

proto::JournalHead valid_head() {
  proto::JournalHead h;
  h.set_version(7);
  h.set_anchor_version(5);
  h.set_committed_unix_ms(1'700'000'000'123);
  return h;
}

proto::Lease valid_lease() {
  proto::Lease l;
  l.set_holder("reader-1.host-a.4242");
  l.set_version(5);
  l.set_expires_unix_ms(1'700'000'060'000);
  return l;
}

// A frame around arbitrary payload bytes, with a correct length and XXH3 trailer.
Bytes frame_raw(const char* magic, const Bytes& payload) {
  Bytes out(magic, magic + 4);
  append_le<uint32_t>(&out, static_cast<uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  append_le<uint64_t>(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

template <typename Message>
void expect_same(const Message& a, const Message& b) {
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString()) << a.DebugString() << b.DebugString();
}

TEST(JournalFiles, HeadAndLeaseRoundTrip) {
  const auto head =
      parse_head(frame_journal_message(JournalFileKind::kHead, valid_head()), kHeadWhat);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  expect_same(*head, valid_head());
  const auto lease =
      parse_lease(frame_journal_message(JournalFileKind::kLease, valid_lease()), kLeaseWhat);
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  expect_same(*lease, valid_lease());
  // A head of version 0 with its anchor 0 is the first publication.
  const auto zero =
      parse_head(frame_journal_message(JournalFileKind::kHead, proto::JournalHead()), kHeadWhat);
  EXPECT_TRUE(zero.ok()) << zero.status().to_string();
}

TEST(JournalFiles, ManifestsOfEveryStepKindRoundTrip) {
  for (const auto& m : {testing::valid_anchor(), testing::valid_delta(), testing::valid_parts()}) {
    const Bytes bytes = framed(m);
    ASSERT_EQ(bytes.size(), 16 + m.ByteSizeLong());
    EXPECT_EQ(std::memcmp(bytes.data(), "WCMF", 4), 0);
    const auto parsed = parse_manifest(bytes, kManifestWhat);
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    expect_same(*parsed, m);
  }
}

TEST(JournalFiles, WrittenAnchorManifestPassesAndFilesRoundTripOnDisk) {
  testing::ScratchDir dir;
  std::vector<Bytes> data;
  std::vector<AnchorTensor> tensors;
  for (int i = 0; i < 5; ++i) {
    data.emplace_back(static_cast<size_t>(2 * 64 * (i + 1)), static_cast<uint8_t>(i));
    tensors.push_back({"layers." + std::to_string(i) + ".weight", DType::kBF16, {64, i + 1}, {}});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = data[i];
  AnchorWriteOptions options;
  options.shard_bytes = 512;
  options.slice_bytes = 128;
  options.threads = 2;
  proto::StepManifest m;
  ASSERT_TRUE(write_anchor(dir / "step", tensors, options, &m).ok());
  m.set_format_version(1);
  m.set_version(12);
  m.set_anchor_version(12);
  ASSERT_GT(m.parts_size(), 1);
  ASSERT_TRUE(write_journal_file(dir / "MANIFEST", JournalFileKind::kManifest, m).ok());
  ASSERT_TRUE(write_journal_file(dir / "HEAD", JournalFileKind::kHead, valid_head()).ok());
  ASSERT_TRUE(write_journal_file(dir / "x.lease", JournalFileKind::kLease, valid_lease()).ok());
  const auto manifest = read_manifest_file(dir / "MANIFEST");
  ASSERT_TRUE(manifest.ok()) << manifest.status().to_string();
  expect_same(*manifest, m);
  const auto head = read_head_file(dir / "HEAD");
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  expect_same(*head, valid_head());
  const auto lease = read_lease_file(dir / "x.lease");
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  expect_same(*lease, valid_lease());
  EXPECT_EQ(read_head_file(dir / "missing").status().code(), StatusCode::kNotFound);
}

TEST(JournalFiles, TooShortIsDataLoss) {
  const Bytes full = frame_journal_message(JournalFileKind::kHead, proto::JournalHead());
  ASSERT_EQ(full.size(), 16u);
  for (const size_t n : {size_t{0}, size_t{4}, size_t{15}}) {
    const Bytes bytes(full.begin(), full.begin() + static_cast<long>(n));
    expect_data_loss(parse_head(bytes, kHeadWhat).status(), kHeadWhat, {"too short"});
  }
}

TEST(JournalFiles, WrongMagicIsDataLoss) {
  Bytes bytes = frame_journal_message(JournalFileKind::kHead, valid_head());
  bytes[0] = 'X';
  expect_data_loss(parse_head(bytes, kHeadWhat).status(), kHeadWhat, {"wrong magic", "WCHD"});
}

TEST(JournalFiles, HeadGivenToParseManifestIsWrongMagic) {
  const Bytes head = frame_journal_message(JournalFileKind::kHead, valid_head());
  expect_data_loss(parse_manifest(head, kManifestWhat).status(), kManifestWhat,
                   {"wrong magic", "WCMF"});
  expect_data_loss(parse_lease(head, kLeaseWhat).status(), kLeaseWhat, {"wrong magic", "WCLS"});
}

TEST(JournalFiles, LengthOverTheKindsLimitIsDataLoss) {
  const Bytes bytes = framed(testing::valid_delta());
  JournalFileLimits limits;
  limits.max_manifest_bytes = static_cast<uint32_t>(bytes.size() - 17);
  expect_data_loss(parse_manifest(bytes, kManifestWhat, limits).status(), kManifestWhat,
                   {"exceeds the limit " + std::to_string(limits.max_manifest_bytes)});
  // A forged length near 4 GiB is refused before anything is trusted, whatever follows.
  Bytes forged = frame_journal_message(JournalFileKind::kHead, valid_head());
  store_le<uint32_t>(forged.data() + 4, 0xFFFFFFFFu);
  expect_data_loss(parse_head(forged, kHeadWhat).status(), kHeadWhat,
                   {"4294967295 bytes exceeds the limit 4096"});
}

TEST(JournalFiles, TruncatedFileIsDataLoss) {
  const Bytes full = frame_journal_message(JournalFileKind::kLease, valid_lease());
  const Bytes cut(full.begin(), full.end() - 1);
  expect_data_loss(parse_lease(cut, kLeaseWhat).status(), kLeaseWhat,
                   {"file is " + std::to_string(cut.size()) + " bytes", "truncated"});
  // The length field says more than the file holds.
  Bytes longer = full;
  store_le<uint32_t>(longer.data() + 4, load_le<uint32_t>(full.data() + 4) + 1);
  expect_data_loss(parse_lease(longer, kLeaseWhat).status(), kLeaseWhat,
                   {"the frame says " + std::to_string(full.size() + 1), "truncated"});
}

TEST(JournalFiles, TrailingBytesAreDataLoss) {
  Bytes bytes = framed(testing::valid_parts());
  bytes.push_back(0);
  expect_data_loss(parse_manifest(bytes, kManifestWhat).status(), kManifestWhat,
                   {"trailing bytes"});
}

TEST(JournalFiles, FlippedPayloadByteIsXxh3Mismatch) {
  const Bytes good = framed(testing::valid_anchor());
  for (const size_t at : {size_t{8}, good.size() / 2, good.size() - 9}) {
    Bytes bytes = good;
    bytes[at] ^= 0x10;
    expect_data_loss(parse_manifest(bytes, kManifestWhat).status(), kManifestWhat,
                     {"XXH3 mismatch"});
  }
  Bytes trailer = good;
  trailer.back() ^= 1;
  expect_data_loss(parse_manifest(trailer, kManifestWhat).status(), kManifestWhat,
                   {"XXH3 mismatch"});
}

TEST(JournalFiles, PayloadThatIsNotAProtobufIsDataLoss) {
  // A truncated varint, then a field number 0 (an invalid tag), under a valid frame.
  for (const Bytes& payload : {Bytes{0x08, 0xFF, 0xFF}, Bytes{0x00, 0x01}}) {
    expect_data_loss(parse_manifest(frame_raw("WCMF", payload), kManifestWhat).status(),
                     kManifestWhat, {"does not parse as weightcast.proto.StepManifest"});
    expect_data_loss(parse_head(frame_raw("WCHD", payload), kHeadWhat).status(), kHeadWhat,
                     {"does not parse as weightcast.proto.JournalHead"});
    expect_data_loss(parse_lease(frame_raw("WCLS", payload), kLeaseWhat).status(), kLeaseWhat,
                     {"does not parse as weightcast.proto.Lease"});
  }
}

TEST(JournalFiles, HeadWithAnchorNewerThanVersionIsDataLoss) {
  proto::JournalHead h = valid_head();
  h.set_anchor_version(8);
  expect_data_loss(parse_head(frame_journal_message(JournalFileKind::kHead, h), kHeadWhat).status(),
                   kHeadWhat, {"anchor 8 is newer than the head version 7"});
}

TEST(JournalFiles, LeaseWithEmptyHolderIsDataLoss) {
  proto::Lease l = valid_lease();
  l.clear_holder();
  expect_data_loss(
      parse_lease(frame_journal_message(JournalFileKind::kLease, l), kLeaseWhat).status(),
      kLeaseWhat, {"lease holder '' is not a safe name"});
}

TEST(JournalFiles, LeaseWithUnsafeHolderIsDataLoss) {
  for (const std::string& holder :
       std::vector<std::string>{"..", "../../etc/passwd", "a b", std::string("a\0b", 3)}) {
    proto::Lease l = valid_lease();
    l.set_holder(holder);
    expect_data_loss(
        parse_lease(frame_journal_message(JournalFileKind::kLease, l), kLeaseWhat).status(),
        kLeaseWhat, {"lease holder", "is not a safe name"});
  }
}

TEST(JournalFiles, SafePartFileNames) {
  for (const std::string& ok :
       std::vector<std::string>{"part-00000.wcd", "model-00001-of-00002.safetensors", "a", "...",
                                ".hidden", "a..b", "~x_y+z=1", std::string(255, 'n')}) {
    EXPECT_TRUE(is_safe_part_file_name(ok)) << ok;
  }
  for (const std::string& bad : std::vector<std::string>{
           "", ".", "..", "a/b", "/abs", "dir/", "a b", " ", "tab\there", "new\nline",
           std::string("nul\0x", 5), "del\x7f", "caf\xc3\xa9", std::string(256, 'n')}) {
    EXPECT_FALSE(is_safe_part_file_name(bad)) << bad;
  }
}

}  // namespace
}  // namespace weightcast
