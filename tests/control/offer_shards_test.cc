// An Offer of a version several publisher ranks wrote carries each rank's live descriptors
// (control.proto Offer.shard_descriptors): their count and sizes are bounded when the message
// is decoded (refused by name past the limits), and the coordinator forwards each subscriber
// only the descriptors of the paths it was given, as it does the Offer's own.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "src/control/coordinator_state.h"
#include "src/control/messages.h"
#include "tests/control/coordinator_state_harness.h"

namespace weightcast::coordinator_test {
namespace {

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

proto::Envelope offer_of_shards(size_t shards, size_t descriptor_bytes) {
  proto::Envelope m;
  m.set_protocol(1);
  m.mutable_offer()->set_version(4);
  for (size_t k = 0; k < shards; ++k) {
    proto::ShardDescriptors& d = *m.mutable_offer()->add_shard_descriptors();
    d.set_shard(static_cast<uint32_t>(k));
    (*d.mutable_live_descriptors())["ucx"] = std::string(descriptor_bytes, 'b');
  }
  return m;
}

std::string decode_error(const proto::Envelope& m, const MessageLimits& limits) {
  auto decoded = decode_envelope(as_bytes(encode_envelope(m)), limits);
  EXPECT_FALSE(decoded.ok());
  if (decoded.ok()) return "";
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument);
  return decoded.status().message();
}

TEST(OfferShards, TooManyShardsOrAnOversizedOrUnnamedDescriptorIsRefusedByName) {
  MessageLimits limits;
  limits.max_members = 2;
  limits.max_blob_bytes = 64;
  EXPECT_TRUE(decode_envelope(as_bytes(encode_envelope(offer_of_shards(2, 64))), limits).ok());
  EXPECT_EQ(decode_error(offer_of_shards(3, 8), limits),
            "control message: offer has 3 shard descriptors, limit 2");
  EXPECT_EQ(decode_error(offer_of_shards(2, 65), limits),
            "control message: offer shard 0 live descriptor 'ucx' has 65 bytes, more than 64");
  proto::Envelope many = offer_of_shards(1, 8);
  for (int i = 0; i < 17; ++i) {
    (*many.mutable_offer()
          ->mutable_shard_descriptors(0)
          ->mutable_live_descriptors())["p" + std::to_string(i)] = "d";
  }
  EXPECT_EQ(decode_error(many, MessageLimits{}),
            "control message: offer shard 0 has 18 live descriptors, limit 16");
  proto::Envelope named = offer_of_shards(1, 8);
  (*named.mutable_offer()->mutable_shard_descriptors(0)->mutable_live_descriptors())[std::string(
      5000, 'n')] = "d";
  EXPECT_EQ(decode_error(named, MessageLimits{}),
            "control message: offer shard 0 live descriptor name is 5000 bytes, limit 4096");
}

TEST(OfferShards, EachSubscriberIsForwardedTheShardDescriptorsOfItsPathsOnly) {
  CoordinatorSettings s = test_settings();
  s.transports = {"ucx", "fs"};
  Group g(s);
  g.join(1);
  g.send(2, hello(2, proto::ROLE_SUBSCRIBER, "transports: ['fs', 'ucx']"));
  g.join(3);  // fs only
  proto::Envelope e = msg(1, "offer { version: 1 }");
  for (uint32_t shard : {0u, 1u}) {
    proto::ShardDescriptors& d = *e.mutable_offer()->add_shard_descriptors();
    d.set_shard(shard);
    (*d.mutable_live_descriptors())["ucx"] = "blob" + std::to_string(shard);
    (*d.mutable_live_descriptors())["shm"] = "not a path of this group";
  }
  std::map<std::string, std::vector<std::string>> got;
  for (const auto& m : g.send(1, e)) {
    if (!m.message.has_offer()) continue;
    got[m.peer];
    for (const auto& shard : m.message.offer().shard_descriptors()) {
      for (const auto& [path, d] : shard.live_descriptors()) {
        got[m.peer].push_back(std::to_string(shard.shard()) + ":" + path + "=" + d);
      }
    }
  }
  EXPECT_EQ(got, (std::map<std::string, std::vector<std::string>>{
                     {"sub2", {"0:ucx=blob0", "1:ucx=blob1"}}, {"sub3", {}}}));
}

}  // namespace
}  // namespace weightcast::coordinator_test
