// UcxSubscriberTransport::fetch_range (transport/ucx/ucx_transport.h), as an engine rank reads
// one record of a publisher rank's part: over shm and tcp, from parts registered in place and
// from shared-memory copies, any byte range arrives exactly (several gets, an odd offset, the
// last byte, nothing), a range past the part is refused naming it, and the part's XXH3 is not
// what a range is checked against (a corrupt byte elsewhere leaves the range readable, while
// the whole part's fetch is kDataLoss).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tests/transport_ucx/ucx_made.h"
#include "transport/ucx/rendezvous_store.h"
#include "transport/ucx/ucx_transport.h"

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(gen());
  return out;
}

// (UCX_TLS, copies)
class UcxRange : public ::testing::TestWithParam<std::tuple<const char*, bool>> {
 protected:
  std::string tls() const { return std::get<0>(GetParam()); }
  UcxPublisherOptions publisher_options() const {
    UcxPublisherOptions o{store_, tls(), 2};
    if (std::get<1>(GetParam())) o.memory = UcxPublisherOptions::Memory::kCopyToSharedMemory;
    return o;
  }
  UcxSubscriberOptions subscriber_options() const {
    UcxSubscriberOptions o;
    o.store = store_;
    o.tls = tls();
    o.chunk_bytes = 64 << 10;  // a range of several gets
    o.mapped_chunk_bytes = 64 << 10;
    return o;
  }
  std::shared_ptr<InMemoryStore> store_ = std::make_shared<InMemoryStore>();
};

TEST_P(UcxRange, AnyRangeOfAPartArrivesExactlyAndARangePastItIsRefused) {
  UCX_PUBLISHER_OR_SKIP(publisher, publisher_options());
  UCX_SUBSCRIBER(subscriber, subscriber_options());
  const std::vector<uint8_t> part = random_bytes((1 << 20) + 13, 7);
  const PartPayload payload{"r1-part-0.wcd", part};
  ASSERT_TRUE(publisher.publish(3, {&payload, 1}, deadline_in(seconds(10))).ok());
  auto described = subscriber.describe(3, deadline_in(seconds(10)));
  ASSERT_TRUE(described.ok()) << described.status().to_string();
  ASSERT_EQ(described->parts.size(), 1u);
  const PartDescriptor& d = described->parts[0];
  const std::pair<uint64_t, uint64_t> ranges[] = {
      {0, 100}, {12345, 300000}, {part.size() - 1, 1}, {777, 0}, {0, part.size()}};
  for (const auto& [offset, bytes] : ranges) {
    std::vector<uint8_t> got(bytes, 0xee);
    const Status s = subscriber.fetch_range(3, d, offset, got, deadline_in(seconds(10)));
    ASSERT_TRUE(s.ok()) << "[" << offset << ", +" << bytes << "): " << s.to_string();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), part.begin() + static_cast<ptrdiff_t>(offset)))
        << "[" << offset << ", +" << bytes << ")";
  }
  std::vector<uint8_t> two(2);
  const Status past = subscriber.fetch_range(3, d, part.size() - 1, two, deadline_in(seconds(10)));
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("r1-part-0.wcd"), std::string::npos) << past.message();
  std::vector<uint8_t> one(1);
  const Status beyond =
      subscriber.fetch_range(3, d, part.size() + 5, one, deadline_in(seconds(10)));
  EXPECT_EQ(beyond.code(), StatusCode::kInvalidArgument) << beyond.to_string();
}

TEST_P(UcxRange, ARangeIsNotCheckedAgainstThePartsHash) {
  UCX_PUBLISHER_OR_SKIP(publisher, publisher_options());
  UCX_SUBSCRIBER(subscriber, subscriber_options());
  std::vector<uint8_t> part = random_bytes(200000, 9);
  const std::vector<uint8_t> expected = part;
  const PartPayload payload{"r0-part-0.wcd", part};
  ASSERT_TRUE(publisher.publish(1, {&payload, 1}, deadline_in(seconds(10))).ok());
  auto stored = store_->get(ucx_version_key(1));
  ASSERT_TRUE(stored.ok() && *stored);
  auto blob = decode_ucx_version_blob(**stored);
  ASSERT_TRUE(blob.ok()) << blob.status().to_string();
  // The served bytes (the part itself in place, the publisher's copy otherwise), in this process.
  reinterpret_cast<uint8_t*>(blob->parts[0].remote_address)[150000] ^= 0x40;
  auto described = subscriber.describe(1, deadline_in(seconds(10)));
  ASSERT_TRUE(described.ok());
  std::vector<uint8_t> head(1000);
  ASSERT_TRUE(
      subscriber.fetch_range(1, described->parts[0], 0, head, deadline_in(seconds(10))).ok());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), expected.begin()));
  std::vector<uint8_t> whole(part.size());
  const Status full = subscriber.fetch(1, described->parts[0], whole, deadline_in(seconds(10)));
  EXPECT_EQ(full.code(), StatusCode::kDataLoss) << full.to_string();
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxRange,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_copy" : "_in_place");
                         });

}  // namespace
}  // namespace weightcast::testing
