// decode_envelope refuses every malformed or oversized frame with a message naming the
// problem, and every body kind survives encode -> decode.
#include "src/control/messages.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace weightcast {
namespace {

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

proto::Envelope envelope(uint32_t rank = 3) {
  proto::Envelope m;
  m.set_protocol(kProtocolMax);
  m.set_rank(rank);
  return m;
}

proto::Envelope offer_with(size_t checksums) {
  proto::Envelope m = envelope(0);
  m.set_from_coordinator(true);
  proto::Offer* offer = m.mutable_offer();
  offer->set_version(12);
  offer->set_has_base(true);
  offer->set_base_version(11);
  (*offer->mutable_live_descriptors())["shm"] = "descriptor";
  for (size_t i = 0; i < checksums; ++i) {
    proto::TensorChecksum* c = offer->add_checksums();
    c->set_name("layers." + std::to_string(i) + ".weight");
    c->set_checksum(0x1234567800000000ull + i);
  }
  return m;
}

// One envelope of every body kind, with every string and repeated field set.
std::vector<proto::Envelope> every_body_kind() {
  std::vector<proto::Envelope> all;
  proto::Envelope m = envelope();
  proto::Hello* hello = m.mutable_hello();
  hello->set_protocol_min(1);
  hello->set_protocol_max(1);
  hello->set_role(proto::ROLE_SUBSCRIBER);
  hello->set_rank(3);
  hello->set_holds_version(true);
  hello->set_held_version(11);
  hello->add_transports("shm");
  hello->add_transports("tcp");
  hello->set_host("node-7");
  hello->set_pid(4242);
  all.push_back(m);

  m = envelope(0);
  m.set_from_coordinator(true);
  proto::Welcome* welcome = m.mutable_welcome();
  welcome->set_protocol(1);
  welcome->set_has_head(true);
  welcome->set_head_version(12);
  welcome->set_committed_version(11);
  welcome->add_transports("shm");
  welcome->add_transports("fs");
  welcome->set_journal_root("/journal");
  welcome->set_plan("live");
  all.push_back(m);

  m = envelope(0);
  m.mutable_refuse()->set_reason("unknown rank 9");
  m.mutable_refuse()->set_fatal(true);
  all.push_back(m);

  all.push_back(offer_with(3));

  m = envelope();
  m.mutable_ack()->set_version(12);
  m.mutable_ack()->set_rank(3);
  m.mutable_ack()->set_apply_us(1500);
  *m.mutable_ack()->add_checksums() = offer_with(1).offer().checksums(0);
  all.push_back(m);

  m = envelope();
  m.mutable_nack()->set_version(12);
  m.mutable_nack()->set_rank(3);
  m.mutable_nack()->set_reason("checksum mismatch");
  m.mutable_nack()->add_tensors("layers.0.weight");
  all.push_back(m);

  m = envelope(0);
  m.mutable_recover()->set_target_version(12);
  m.mutable_recover()->set_from_anchor(true);
  m.mutable_recover()->set_reason("missed v10");
  all.push_back(m);

  m = envelope(0);
  m.mutable_commit()->set_version(12);
  all.push_back(m);

  m = envelope();
  m.mutable_heartbeat()->set_rank(3);
  m.mutable_heartbeat()->set_busy(true);
  all.push_back(m);

  m = envelope();
  m.mutable_leave()->set_rank(3);
  m.mutable_leave()->set_reason("shutting down");
  all.push_back(m);

  m = envelope();
  m.mutable_status_request();
  all.push_back(m);

  m = envelope(0);
  proto::StatusReply* reply = m.mutable_status_reply();
  reply->set_group_id("g1");
  reply->set_has_head(true);
  reply->set_head_version(12);
  proto::MemberStatus* member = reply->add_members();
  member->set_rank(3);
  member->set_state("live");
  member->set_transport("shm");
  member->set_host("node-7");
  all.push_back(m);

  m = envelope(0);
  proto::NcclEpoch* epoch = m.mutable_nccl_epoch();
  epoch->set_stage(proto::NCCL_JOIN);
  epoch->set_epoch(2);
  for (uint32_t r : {1u, 3u, 4u}) epoch->add_ranks(r);
  epoch->set_publishers(1);
  epoch->set_group_id(std::string(128, '\x01'));
  all.push_back(m);

  m = envelope();
  proto::NcclReport* report = m.mutable_nccl_report();
  report->set_epoch(2);
  report->set_stage(proto::NCCL_ROUND);
  report->set_version(12);
  report->set_reason("bucket 3: deadline exceeded");
  all.push_back(m);
  return all;
}

std::string decode_error(const proto::Envelope& m, const MessageLimits& limits = {}) {
  const std::string frame = encode_envelope(m);
  auto decoded = decode_envelope(as_bytes(frame), limits);
  EXPECT_FALSE(decoded.ok()) << describe_envelope(m);
  if (decoded.ok()) return "";
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument);
  return decoded.status().message();
}

MessageLimits small_strings() {
  MessageLimits limits;
  limits.max_string_bytes = 8;
  return limits;
}

const std::string kLong(9, 'x');

TEST(ControlMessageDecode, EmptyFrame) {
  auto decoded = decode_envelope({});
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(), "control message: empty frame");
}

TEST(ControlMessageDecode, RandomBytes) {
  // Wire type 7 does not exist, so no prefix of these bytes is a message.
  const std::vector<uint8_t> garbage = {0x0f, 0xff, 0x13, 0x37, 0x00, 0xfe, 0x99};
  auto decoded = decode_envelope(garbage);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(),
            "control message: frame of 7 bytes is not a valid Envelope (malformed protobuf, or a "
            "string that is not UTF-8)");
}

TEST(ControlMessageDecode, StringThatIsNotUtf8) {
  proto::Envelope m = envelope();
  m.mutable_leave()->set_reason("\xff\xfe bad");
  EXPECT_NE(decode_error(m).find("not UTF-8"), std::string::npos);
}

TEST(ControlMessageDecode, TruncatedValidFrame) {
  const std::string frame = encode_envelope(offer_with(4));
  for (size_t cut = 1; cut < frame.size(); ++cut) {
    auto decoded = decode_envelope(as_bytes(frame).first(cut));
    ASSERT_FALSE(decoded.ok()) << "prefix of " << cut << " bytes";
    EXPECT_FALSE(decoded.status().message().empty());
  }
}

TEST(ControlMessageDecode, OversizedFrame) {
  MessageLimits limits;
  limits.max_bytes = 64;
  const std::string frame = encode_envelope(offer_with(10));
  EXPECT_EQ(decode_error(offer_with(10), limits),
            "control message: frame of " + std::to_string(frame.size()) + " bytes, limit 64");
}

TEST(ControlMessageDecode, NoBody) {
  EXPECT_EQ(decode_error(envelope()), "control message: envelope has no body");
}

TEST(ControlMessageDecode, ProtocolZero) {
  proto::Envelope m = offer_with(1);
  m.set_protocol(0);
  EXPECT_EQ(decode_error(m),
            "control message: offer has protocol 0 (the sender must name its protocol)");
}

TEST(ControlMessageDecode, TooManyChecksums) {
  MessageLimits limits;
  limits.max_checksums = 4;
  EXPECT_EQ(decode_error(offer_with(5), limits), "control message: offer has 5 checksums, limit 4");

  proto::Envelope ack = envelope();
  for (int i = 0; i < 5; ++i) ack.mutable_ack()->add_checksums()->set_checksum(i);
  EXPECT_EQ(decode_error(ack, limits), "control message: ack has 5 checksums, limit 4");

  proto::Envelope nack = envelope();
  for (int i = 0; i < 5; ++i) nack.mutable_nack()->add_tensors("t");
  EXPECT_EQ(decode_error(nack, limits), "control message: nack has 5 tensors, limit 4");
}

TEST(ControlMessageDecode, TooManyChecksumsAtTheDefaultLimit) {
  MessageLimits limits;
  limits.max_bytes = size_t{64} << 20;
  proto::Envelope m = envelope();
  m.mutable_offer()->mutable_checksums()->Reserve(2000000);
  for (int i = 0; i < 2000000; ++i) m.mutable_offer()->add_checksums()->set_checksum(i);
  EXPECT_EQ(decode_error(m, limits), "control message: offer has 2000000 checksums, limit 1048576");
}

TEST(ControlMessageDecode, TooManyTransports) {
  proto::Envelope m = every_body_kind()[0];
  for (int i = 0; i < 15; ++i) m.mutable_hello()->add_transports("t" + std::to_string(i));
  EXPECT_EQ(decode_error(m), "control message: hello has 17 transports, limit 16");
}

TEST(ControlMessageDecode, TooManyMembers) {
  MessageLimits limits;
  limits.max_members = 2;
  proto::Envelope m = every_body_kind()[11];
  m.mutable_status_reply()->add_members();
  m.mutable_status_reply()->add_members();
  EXPECT_EQ(decode_error(m, limits), "control message: status_reply has 3 members, limit 2");
  m = every_body_kind()[11];
  for (uint32_t r : {1u, 2u, 3u}) m.mutable_status_reply()->add_nccl_ranks(r);
  EXPECT_EQ(decode_error(m, limits), "control message: status_reply has 3 nccl ranks, limit 2");
}

TEST(ControlMessageDecode, TooLongStringInHello) {
  proto::Envelope m = every_body_kind()[0];
  m.mutable_hello()->set_host(kLong);
  EXPECT_EQ(decode_error(m, small_strings()), "control message: hello host is 9 bytes, limit 8");
  m = every_body_kind()[0];
  m.mutable_hello()->set_transports(1, kLong);
  EXPECT_EQ(decode_error(m, small_strings()),
            "control message: hello transport 1 is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, TooLongStringInWelcome) {
  for (const char* field : {"transport 1", "journal_root", "plan"}) {
    proto::Envelope m = every_body_kind()[1];
    proto::Welcome* w = m.mutable_welcome();
    const std::string f = field;
    (f == "transport 1" ? *w->mutable_transports(1)
     : f == "plan"      ? *w->mutable_plan()
                        : *w->mutable_journal_root()) = kLong;
    EXPECT_EQ(decode_error(m, small_strings()),
              "control message: welcome " + f + " is 9 bytes, limit 8");
  }
}

TEST(ControlMessageDecode, TooLongStringInRefuse) {
  proto::Envelope m = every_body_kind()[2];
  m.mutable_refuse()->set_reason(kLong);
  EXPECT_EQ(decode_error(m, small_strings()), "control message: refuse reason is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, TooLongStringInOffer) {
  proto::Envelope m = offer_with(3);
  m.mutable_offer()->mutable_checksums(2)->set_name(std::string(5000, 'n'));
  EXPECT_EQ(decode_error(m), "control message: offer checksum 2 name is 5000 bytes, limit 4096");
  m = offer_with(0);
  (*m.mutable_offer()->mutable_live_descriptors())[kLong] = "d";
  EXPECT_EQ(decode_error(m, small_strings()),
            "control message: offer live descriptor name is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, OversizedOrTooManyLiveDescriptorsInOffer) {
  proto::Envelope m = offer_with(1);
  (*m.mutable_offer()->mutable_live_descriptors())["ucx"] = std::string(65, 'b');
  MessageLimits limits;
  limits.max_blob_bytes = 64;
  EXPECT_EQ(decode_error(m, limits),
            "control message: offer live descriptor 'ucx' has 65 bytes, more than 64");
  limits.max_transports = 1;
  EXPECT_EQ(decode_error(m, limits), "control message: offer has 2 live descriptors, limit 1");
  limits.max_transports = 2;
  limits.max_blob_bytes = 65;
  EXPECT_TRUE(decode_envelope(as_bytes(encode_envelope(m)), limits).ok());
}

TEST(ControlMessageDecode, TooLongStringInAck) {
  proto::Envelope m = every_body_kind()[4];
  m.mutable_ack()->mutable_checksums(0)->set_name(kLong);
  EXPECT_EQ(decode_error(m, small_strings()),
            "control message: ack checksum 0 name is 9 bytes, limit 8");
  m = every_body_kind()[4];
  m.mutable_ack()->clear_checksums();
  m.mutable_ack()->set_transport(kLong);
  EXPECT_EQ(decode_error(m, small_strings()), "control message: ack transport is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, TooLongStringInNack) {
  proto::Envelope m = every_body_kind()[5];
  m.mutable_nack()->set_reason(kLong);
  EXPECT_EQ(decode_error(m, small_strings()), "control message: nack reason is 9 bytes, limit 8");
  m = every_body_kind()[5];
  m.mutable_nack()->set_reason("short");
  m.mutable_nack()->set_tensors(0, kLong);
  EXPECT_EQ(decode_error(m, small_strings()), "control message: nack tensor 0 is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, TooLongStringInRecover) {
  proto::Envelope m = every_body_kind()[6];
  m.mutable_recover()->set_reason(kLong);
  EXPECT_EQ(decode_error(m, small_strings()),
            "control message: recover reason is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, TooLongStringInLeave) {
  proto::Envelope m = every_body_kind()[9];
  m.mutable_leave()->set_reason(kLong);
  EXPECT_EQ(decode_error(m, small_strings()), "control message: leave reason is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, TooLongStringInStatusReply) {
  proto::Envelope m = every_body_kind()[11];
  m.mutable_status_reply()->set_group_id(kLong);
  EXPECT_EQ(decode_error(m, small_strings()),
            "control message: status_reply group_id is 9 bytes, limit 8");
  for (const char* field : {"state", "transport", "host"}) {
    m = every_body_kind()[11];
    proto::MemberStatus* member = m.mutable_status_reply()->add_members();
    const std::string f = field;
    (f == "state"  ? *member->mutable_state()
     : f == "host" ? *member->mutable_host()
                   : *member->mutable_transport()) = kLong;
    EXPECT_EQ(decode_error(m, small_strings()),
              "control message: status_reply member 1 " + f + " is 9 bytes, limit 8");
  }
}

TEST(ControlMessageDecode, NcclEpochOutsideItsRules) {
  const proto::Envelope good = every_body_kind()[12];
  proto::Envelope m = good;
  m.mutable_nccl_epoch()->set_stage(proto::NCCL_STAGE_UNSPECIFIED);
  EXPECT_EQ(decode_error(m),
            "control message: nccl_epoch has stage unspecified (expected make_id, join, ready or "
            "end)");
  m = good;
  m.mutable_nccl_epoch()->set_stage(proto::NCCL_ROUND);
  EXPECT_NE(decode_error(m).find("nccl_epoch has stage round"), std::string::npos);
  m = good;
  m.mutable_nccl_epoch()->set_stage(static_cast<proto::NcclStage>(77));  // from a newer peer
  EXPECT_NE(decode_error(m).find("nccl_epoch has stage unspecified"), std::string::npos);
  m = good;
  m.mutable_nccl_epoch()->set_epoch(0);
  EXPECT_EQ(decode_error(m), "control message: nccl_epoch has epoch 0");
  m = good;
  m.mutable_nccl_epoch()->set_publishers(4);
  EXPECT_EQ(decode_error(m), "control message: nccl_epoch names 4 publishers among 3 ranks");
  MessageLimits limits;
  limits.max_members = 2;
  EXPECT_EQ(decode_error(good, limits), "control message: nccl_epoch has 3 ranks, limit 2");
  limits = {};
  limits.max_group_id_bytes = 127;
  EXPECT_EQ(decode_error(good, limits),
            "control message: nccl_epoch group_id is 128 bytes, limit 127");
  m = good;
  m.mutable_nccl_epoch()->set_reason(kLong);
  EXPECT_EQ(decode_error(m, small_strings()),
            "control message: nccl_epoch reason is 9 bytes, limit 8");
}

TEST(ControlMessageDecode, NcclReportOutsideItsRules) {
  const proto::Envelope good = every_body_kind()[13];
  proto::Envelope m = good;
  m.mutable_nccl_report()->set_stage(proto::NCCL_READY);
  EXPECT_EQ(decode_error(m),
            "control message: nccl_report has stage ready (expected make_id, join or round)");
  m = good;
  m.mutable_nccl_report()->set_group_id(std::string(2000, 'i'));
  EXPECT_EQ(decode_error(m), "control message: nccl_report group_id is 2000 bytes, limit 1024");
  EXPECT_EQ(decode_error(good, small_strings()),
            "control message: nccl_report reason is 27 bytes, limit 8");
}

TEST(ControlMessageRoundTrip, EveryBodyKind) {
  const std::vector<proto::Envelope> all = every_body_kind();
  ASSERT_EQ(all.size(), 14u);  // one per member of Envelope.body
  std::set<std::string> names;
  for (const proto::Envelope& m : all) {
    SCOPED_TRACE(body_name(m));
    names.insert(body_name(m));
    const std::string frame = encode_envelope(m);
    auto decoded = decode_envelope(as_bytes(frame));
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    EXPECT_EQ(decoded->DebugString(), m.DebugString());
    EXPECT_EQ(encode_envelope(*decoded), frame);
  }
  EXPECT_EQ(names.size(), all.size());
  EXPECT_EQ(names.count("empty"), 0u);
}

TEST(ControlMessageDescribe, OneLinePerBodyKind) {
  const std::vector<proto::Envelope> all = every_body_kind();
  std::vector<std::string> lines;
  for (const proto::Envelope& m : all) lines.push_back(describe_envelope(m));
  EXPECT_EQ(lines[0],
            "hello from rank 3 (subscriber, protocol 1-1, holds v11, transports shm,tcp, "
            "node-7:4242)");
  EXPECT_EQ(lines[1], "welcome protocol 1 (head v12, committed v11, transports shm,fs, plan live)");
  EXPECT_EQ(lines[2], "refuse (fatal): unknown rank 9");
  EXPECT_EQ(lines[3], "offer v12 base 11 (3 tensors, live shm)");
  EXPECT_EQ(lines[4], "ack v12 from rank 3");
  EXPECT_EQ(lines[5], "nack v12 from rank 3: checksum mismatch");
  EXPECT_EQ(lines[6], "recover to v12 from an anchor: missed v10");
  EXPECT_EQ(lines[7], "commit v12");
  EXPECT_EQ(lines[8], "heartbeat from rank 3 (holds nothing, busy)");
  EXPECT_EQ(lines[9], "leave from rank 3: shutting down");
  EXPECT_EQ(lines[10], "status_request from rank 3");
  EXPECT_EQ(lines[11], "status_reply group g1 (head v12, committed none, 1 members)");
  EXPECT_EQ(lines[12], "nccl_epoch 2 join (3 ranks)");
  EXPECT_EQ(lines[13], "nccl_report epoch 2 round from rank 3 failed: bucket 3: deadline exceeded");
  EXPECT_EQ(describe_envelope(envelope()), "empty");
  EXPECT_EQ(body_name(envelope()), "empty");
}

TEST(ControlMessageDescribe, LongReasonsAreCutToOneShortLine) {
  proto::Envelope m = every_body_kind()[9];
  m.mutable_leave()->set_reason(std::string(1000, 'r') + "\nsecond line");
  const std::string line = describe_envelope(m);
  EXPECT_LT(line.size(), 200u);
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace weightcast
