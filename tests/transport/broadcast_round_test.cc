// One version's round over a broadcast group (transport/nccl/broadcast_round.h), on the
// in-process loopback group: parts and version arrive verified on every member, a corrupt
// header or descriptor takes the group down on every member, a corrupt part fails only the
// member that got it, and limits are enforced on both ends.
#include "transport/nccl/broadcast_round.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "tests/support/loopback_broadcast_group.h"

namespace weightcast::nccl {
namespace {

using std::chrono::milliseconds;

std::vector<std::unique_ptr<BroadcastGroup>> group_of(int ranks) {
  auto members = make_loopback_group(ranks);
  EXPECT_TRUE(members.ok()) << members.status().to_string();
  return std::move(members).value();
}

// Flips one byte of destination `part` after broadcast call `call` (0-based) on this member.
class FlippingGroup final : public BroadcastGroup {
 public:
  FlippingGroup(std::unique_ptr<BroadcastGroup> inner, int call, size_t part, size_t byte)
      : inner_(std::move(inner)), call_(call), part_(part), byte_(byte) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status broadcast(std::span<const SchedulePart> parts,
                   std::span<const std::span<const uint8_t>> sources,
                   std::span<const std::span<uint8_t>> destinations, Deadline deadline) override {
    Status s = inner_->broadcast(parts, sources, destinations, deadline);
    if (s.ok() && calls_++ == call_) destinations[part_][byte_] ^= 0x01;
    return s;
  }
  void abort(const std::string& why) override { inner_->abort(why); }

 private:
  std::unique_ptr<BroadcastGroup> inner_;
  int call_, calls_ = 0;
  size_t part_, byte_;
};

struct Payload {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<RoundPart> parts;
};

Payload payload(uint64_t version, std::vector<size_t> sizes) {
  Payload p;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> b(sizes[i]);
    for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(version * 13 + i * 7 + k);
    p.bytes.push_back(std::move(b));
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    p.parts.push_back({"part-" + std::to_string(i), p.bytes[i]});
  return p;
}

// Runs one round on every member (one thread each); root `root` sends `p`.
std::vector<Result<ReceivedRound>> run_all(std::vector<std::unique_ptr<BroadcastGroup>>& members,
                                           int root, uint64_t version, const Payload& p,
                                           const RoundLimits& root_limits = {},
                                           const RoundLimits& receiver_limits = {}) {
  std::vector<Result<ReceivedRound>> out(members.size(), internal_error("not run"));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < members.size(); ++r) {
    threads.emplace_back([&, r] {
      const bool is_root = int(r) == root;
      out[r] = run_round(*members[r], root, is_root ? version : 0,
                         is_root ? std::span(p.parts) : std::span<const RoundPart>(), false,
                         is_root ? root_limits : receiver_limits, deadline_in(milliseconds(5000)));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void expect_received(const Result<ReceivedRound>& got, uint64_t version, const Payload& p) {
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->version, version);
  ASSERT_EQ(got->parts.size(), p.parts.size());
  uint64_t total = 0;
  for (size_t i = 0; i < p.parts.size(); ++i) {
    EXPECT_EQ(got->parts[i].name, p.parts[i].name);
    EXPECT_EQ(got->parts[i].bytes, p.bytes[i]);
    total += p.bytes[i].size();
  }
  EXPECT_EQ(got->bytes, total);
}

TEST(BroadcastRound, ThreeMembersReceiveEveryPartAndTheVersion) {
  auto members = group_of(3);
  for (uint64_t version : {7u, 8u}) {
    const Payload p = payload(version, {1000, 0, 3, 65536});
    auto got = run_all(members, 1, version, p);
    expect_received(got[0], version, p);
    expect_received(got[2], version, p);
    ASSERT_TRUE(got[1].ok()) << got[1].status().to_string();  // root, receive=false
    EXPECT_EQ(got[1]->version, version);
    EXPECT_TRUE(got[1]->parts.empty());
  }
}

TEST(BroadcastRound, ZeroPartRoundCarriesItsVersion) {
  auto members = group_of(3);
  const Payload none = payload(9, {});
  auto got = run_all(members, 0, 9, none);
  for (int r : {1, 2}) expect_received(got[r], 9, none);
  const Payload next = payload(10, {5});  // the group is still in step
  got = run_all(members, 0, 10, next);
  for (int r : {1, 2}) expect_received(got[r], 10, next);
}

TEST(BroadcastRound, OneMemberIsPublisherAndSubscriber) {
  auto members = group_of(1);
  const Payload p = payload(3, {0, 17, 4096});
  auto got = run_round(*members[0], 0, 3, p.parts, true, {}, deadline_in(milliseconds(5000)));
  expect_received(got, 3, p);
  auto quiet = run_round(*members[0], 0, 4, p.parts, false, {}, deadline_in(milliseconds(5000)));
  ASSERT_TRUE(quiet.ok()) << quiet.status().to_string();
  EXPECT_TRUE(quiet->parts.empty());
}

TEST(BroadcastRound, OnHeaderSeesTheVersionBeforeTheParts) {
  auto members = group_of(2);
  const Payload p = payload(42, {10});
  uint64_t seen = 0;
  std::thread root([&] {
    auto r = run_round(*members[0], 0, 42, p.parts, false, {}, deadline_in(milliseconds(5000)));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
  });
  auto got = run_round(*members[1], 0, 0, {}, false, {}, deadline_in(milliseconds(5000)),
                       [&](uint64_t v) { seen = v; });
  root.join();
  expect_received(got, 42, p);
  EXPECT_EQ(seen, 42u);
}

// Corrupts broadcast `call` on rank 2 of a 3-member group and returns every member's result.
std::vector<Result<ReceivedRound>> run_corrupted(int call, size_t part, size_t byte,
                                                 const Payload& p) {
  auto members = group_of(3);
  members[2] = std::make_unique<FlippingGroup>(std::move(members[2]), call, part, byte);
  auto got = run_all(members, 0, 5, p);
  if (call == 2) {  // a corrupt part leaves the group usable
    const Payload next = payload(6, {8});
    auto again = run_all(members, 0, 6, next);
    expect_received(again[2], 6, next);
  }
  return got;
}

TEST(BroadcastRound, CorruptHeaderFailsEveryMember) {
  const Payload p = payload(5, {100});
  auto got = run_corrupted(0, 0, 1, p);  // the magic
  EXPECT_EQ(got[2].status().code(), StatusCode::kDataLoss) << got[2].status().to_string();
  EXPECT_NE(got[2].status().message().find("magic"), std::string::npos);
  for (int r : {0, 1}) {
    ASSERT_FALSE(got[r].ok());
    EXPECT_NE(got[r].status().message().find("magic"), std::string::npos)
        << got[r].status().to_string();
  }
}

TEST(BroadcastRound, CorruptDescriptorFailsEveryMember) {
  const Payload p = payload(5, {100, 3});
  auto got = run_corrupted(1, 0, 8, p);  // a byte of the first name
  // The member that found it reports kDataLoss; the others the group's failure, naming it.
  EXPECT_EQ(got[2].status().code(), StatusCode::kDataLoss) << got[2].status().to_string();
  for (int r : {0, 1, 2}) {
    ASSERT_FALSE(got[r].ok());
    EXPECT_NE(got[r].status().message().find("descriptor does not match"), std::string::npos)
        << got[r].status().to_string();
    EXPECT_NE(got[r].status().message().find("version 5"), std::string::npos)
        << got[r].status().to_string();
  }
}

TEST(BroadcastRound, CorruptPartFailsOnlyItsReceiverNamingPartAndVersion) {
  const Payload p = payload(5, {100, 3000});
  auto got = run_corrupted(2, 1, 2999, p);
  EXPECT_EQ(got[2].status().code(), StatusCode::kDataLoss) << got[2].status().to_string();
  EXPECT_NE(got[2].status().message().find("'part-1'"), std::string::npos);
  EXPECT_NE(got[2].status().message().find("version 5"), std::string::npos);
  EXPECT_TRUE(got[0].ok());
  expect_received(got[1], 5, p);
}

TEST(BroadcastRound, LimitsAreEnforcedOnBothEnds) {
  const Payload p = payload(5, {4, 4, 4});
  {
    auto members = group_of(2);
    RoundLimits receiver;
    receiver.max_parts = 2;
    auto got = run_all(members, 0, 5, p, {}, receiver);
    EXPECT_EQ(got[1].status().code(), StatusCode::kOutOfRange) << got[1].status().to_string();
    EXPECT_NE(got[1].status().message().find("3 parts"), std::string::npos);
    EXPECT_FALSE(got[0].ok());  // the round is down for everyone
  }
  {
    auto members = group_of(2);
    RoundLimits root;
    root.max_total_bytes = 10;
    auto got = run_all(members, 0, 5, p, root, {});
    EXPECT_EQ(got[0].status().code(), StatusCode::kOutOfRange) << got[0].status().to_string();
    EXPECT_NE(got[0].status().message().find("'part-2'"), std::string::npos);
    EXPECT_FALSE(got[1].ok());
  }
  {
    auto members = group_of(2);
    RoundLimits receiver;
    receiver.max_descriptor_bytes = 16;
    auto got = run_all(members, 0, 5, p, {}, receiver);
    EXPECT_EQ(got[1].status().code(), StatusCode::kOutOfRange) << got[1].status().to_string();
    EXPECT_NE(got[1].status().message().find("round header"), std::string::npos);
  }
}

TEST(BroadcastRound, MisuseIsInvalidArgument) {
  auto members = group_of(1);
  auto bad_root = run_round(*members[0], 1, 1, {}, false, {}, deadline_in(milliseconds(1000)));
  EXPECT_EQ(bad_root.status().code(), StatusCode::kInvalidArgument);
  auto two = group_of(2);
  const Payload p = payload(1, {3});
  auto receiver_parts =
      run_round(*two[1], 0, 0, p.parts, false, {}, deadline_in(milliseconds(1000)));
  EXPECT_EQ(receiver_parts.status().code(), StatusCode::kInvalidArgument);
}

TEST(BroadcastRoundDescriptor, RoundTripsAndRefusesMalformedBytes) {
  const std::vector<PartDescriptor> parts{{"a", 10, 1}, {"", 0, 2}, {"long-name", 1 << 30, 3}};
  auto bytes = encode_round_descriptor(parts, {});
  ASSERT_TRUE(bytes.ok());
  auto back = parse_round_descriptor(*bytes, {});
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[2].name, "long-name");
  EXPECT_EQ((*back)[2].bytes, uint64_t{1} << 30);
  EXPECT_EQ((*back)[2].xxh3, 3u);

  auto truncated = parse_round_descriptor(std::span(*bytes).first(bytes->size() - 1), {});
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("part 2 'long-name'"), std::string::npos)
      << truncated.status().to_string();
  auto trailing = *bytes;
  trailing.push_back(0);
  EXPECT_EQ(parse_round_descriptor(trailing, {}).status().code(), StatusCode::kDataLoss);
  std::vector<uint8_t> huge_count{0xff, 0xff, 0x0f, 0x00};
  EXPECT_EQ(parse_round_descriptor(huge_count, {}).status().code(), StatusCode::kDataLoss);
  RoundLimits names;
  names.max_name_bytes = 4;
  auto long_name = parse_round_descriptor(*bytes, names);
  EXPECT_EQ(long_name.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(long_name.status().message().find("part 2"), std::string::npos);
}

TEST(BroadcastRoundDescriptor, HeaderRoundTripsAndChecksFormat) {
  auto h = encode_round_header({77, 24, 0x1234});
  auto back = parse_round_header(h, {});
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->version, 77u);
  EXPECT_EQ(back->descriptor_bytes, 24u);
  EXPECT_EQ(back->descriptor_xxh3, 0x1234u);
  h[4] = 2;  // format version
  EXPECT_NE(parse_round_header(h, {}).status().message().find("format version 2"),
            std::string::npos);
  EXPECT_EQ(parse_round_header(std::span(h).first(31), {}).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace weightcast::nccl
