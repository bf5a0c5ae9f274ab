// The UCX version blob's decoder, one test per malformed case, and its round trip.
#include "transport/ucx/ucx_version_blob.h"

#include <gtest/gtest.h>

#include <cstring>

namespace weightcast {
namespace {

UcxVersionBlob sample() {
  UcxVersionBlob b;
  b.version = 42;
  b.worker_address = std::vector<uint8_t>(40, 0x11);
  b.parts.push_back({"part-0", 1 << 20, 0xabcdef, 0x7f0000001000, std::vector<uint8_t>(30, 2)});
  b.parts.push_back({"part-1", 0, 0x2d06800538d394c2ull, 0, {}});
  return b;
}

std::vector<uint8_t> encoded() {
  return encode_ucx_version_blob(sample()).value();
}

// Expects decoding `bytes` to fail with kDataLoss and a message containing `what`.
void expect_refused(const std::vector<uint8_t>& bytes, const std::string& what) {
  auto r = decode_ucx_version_blob(bytes);
  ASSERT_FALSE(r.ok()) << "accepted; expected a refusal mentioning '" << what << "'";
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
}

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  std::memcpy(b.data() + at, &v, 4);
}

// Offsets in the encoding of sample(): magic 0, format 4, version 8, worker address length 16
// and bytes 20..60, segment flag 60, part count 64, part 0 name length 68.
constexpr size_t kFormatAt = 4, kWorkerLengthAt = 16, kSegmentFlagAt = 60, kCountAt = 64,
                 kFirstNameLengthAt = 68;

// sample() with its parts in a shared segment; the host id's length sits at kSegmentFlagAt + 4.
UcxVersionBlob with_segment() {
  UcxVersionBlob b = sample();
  b.has_segment = true;
  b.segment.host = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc";
  b.segment.pid_namespace = 4026531836;
  b.segment.pid = 4321;
  b.segment.fd = 17;
  b.segment.nonce.fill(0x5a);
  b.segment.bytes = (1 << 20) + 64;
  b.parts[0].segment_offset = 64;
  return b;
}

TEST(UcxVersionBlob, RoundTrip) {
  auto back = decode_ucx_version_blob(encoded());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->version, 42u);
  EXPECT_EQ(back->worker_address, sample().worker_address);
  ASSERT_EQ(back->parts.size(), 2u);
  EXPECT_EQ(back->parts[0].name, "part-0");
  EXPECT_EQ(back->parts[0].bytes, 1u << 20);
  EXPECT_EQ(back->parts[0].remote_address, 0x7f0000001000u);
  EXPECT_EQ(back->parts[0].rkey, std::vector<uint8_t>(30, 2));
  EXPECT_TRUE(back->parts[1].rkey.empty());
}

TEST(UcxVersionBlob, RoundTripsASegment) {
  auto back = decode_ucx_version_blob(encode_ucx_version_blob(with_segment()).value());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_TRUE(back->has_segment);
  EXPECT_EQ(back->segment.host, with_segment().segment.host);
  EXPECT_EQ(back->segment.pid_namespace, 4026531836u);
  EXPECT_EQ(back->segment.pid, 4321u);
  EXPECT_EQ(back->segment.fd, 17u);
  EXPECT_EQ(back->segment.nonce, with_segment().segment.nonce);
  EXPECT_EQ(back->segment.bytes, (1u << 20) + 64);
  EXPECT_EQ(back->parts[0].segment_offset, 64u);
  EXPECT_FALSE(decode_ucx_version_blob(encoded())->has_segment);
}

TEST(UcxVersionBlob, RefusesASegmentFlagOtherThanZeroOrOne) {
  auto b = encoded();
  put_u32(b, kSegmentFlagAt, 2);
  expect_refused(b, "segment flag 2");
}

TEST(UcxVersionBlob, RefusesAnOversizedSegmentHostLength) {
  auto b = encode_ucx_version_blob(with_segment()).value();
  put_u32(b, kSegmentFlagAt + 4, kSharedSegmentMaxHostBytes + 1);
  expect_refused(b, "segment host length");
}

TEST(UcxVersionBlob, RefusesAnEmptySegmentHost) {
  auto b = encode_ucx_version_blob(with_segment()).value();
  put_u32(b, kSegmentFlagAt + 4, 0);
  expect_refused(b, "host id is empty");
}

TEST(UcxVersionBlob, RefusesAPartOutsideItsSegment) {
  UcxVersionBlob s = with_segment();
  s.parts[0].segment_offset = 65;  // one byte past the end
  expect_refused(encode_ucx_version_blob(s).value(), "lies outside its");
  s.parts[0].segment_offset = UINT64_MAX;  // offset + bytes would wrap
  expect_refused(encode_ucx_version_blob(s).value(), "lies outside its");
}

TEST(UcxVersionBlob, RefusesEveryTruncationOfASegmentBlob) {
  const auto b = encode_ucx_version_blob(with_segment()).value();
  for (size_t n = 0; n < b.size(); ++n) {
    auto r = decode_ucx_version_blob(std::span<const uint8_t>(b.data(), n));
    ASSERT_FALSE(r.ok()) << "accepted a blob cut to " << n << " of " << b.size() << " bytes";
  }
}

TEST(UcxVersionBlob, RefusesEmpty) {
  expect_refused({}, "truncated at magic");
}

TEST(UcxVersionBlob, RefusesBadMagic) {
  auto b = encoded();
  b[0] ^= 1;
  expect_refused(b, "bad magic");
}

TEST(UcxVersionBlob, RefusesUnknownFormat) {
  auto b = encoded();
  put_u32(b, kFormatAt, 9);
  expect_refused(b, "unknown format 9");
}

TEST(UcxVersionBlob, RefusesEveryTruncation) {
  const auto b = encoded();
  for (size_t n = 0; n < b.size(); ++n) {
    auto r = decode_ucx_version_blob(std::span<const uint8_t>(b.data(), n));
    ASSERT_FALSE(r.ok()) << "accepted a blob cut to " << n << " of " << b.size() << " bytes";
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(UcxVersionBlob, RefusesAnOversizedWorkerAddressLength) {
  auto b = encoded();
  put_u32(b, kWorkerLengthAt, kUcxBlobMaxKeyBytes + 1);
  expect_refused(b, "worker address length");
}

TEST(UcxVersionBlob, RefusesAnEmptyWorkerAddress) {
  UcxVersionBlob s = sample();
  s.worker_address.clear();
  expect_refused(encode_ucx_version_blob(s).value(), "empty worker address");
}

TEST(UcxVersionBlob, RefusesAPartCountOverTheLimit) {
  auto b = encoded();
  put_u32(b, kCountAt, kUcxBlobMaxParts + 1);
  expect_refused(b, "exceeds");
}

TEST(UcxVersionBlob, RefusesAPartCountTheBytesCannotHold) {
  auto b = encoded();
  put_u32(b, kCountAt, 1000);
  expect_refused(b, "does not fit");
}

TEST(UcxVersionBlob, RefusesAnOversizedNameLength) {
  auto b = encoded();
  put_u32(b, kFirstNameLengthAt, kUcxBlobMaxNameBytes + 1);
  expect_refused(b, "part 0 name length");
}

TEST(UcxVersionBlob, RefusesADuplicateName) {
  UcxVersionBlob s = sample();
  s.parts[1].name = "part-0";
  expect_refused(encode_ucx_version_blob(s).value(), "repeats the name 'part-0'");
}

TEST(UcxVersionBlob, RefusesBytesWithoutAnRkey) {
  UcxVersionBlob s = sample();
  s.parts[0].rkey.clear();
  expect_refused(encode_ucx_version_blob(s).value(), "but no rkey");
}

TEST(UcxVersionBlob, RefusesTrailingBytes) {
  auto b = encoded();
  b.push_back(0);
  expect_refused(b, "trailing bytes");
}

TEST(UcxVersionBlob, EncodeRefusesAnEmptyName) {
  UcxVersionBlob s = sample();
  s.parts[0].name.clear();
  auto r = encode_ucx_version_blob(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast
