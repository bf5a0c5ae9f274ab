// Control message codec: bounds every frame before and after parsing (messages.h).
#include "src/control/messages.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>
#include <string_view>

namespace weightcast {
namespace {

constexpr std::string_view kPrefix = "control message: ";

Status too_many(std::string_view what, size_t count, std::string_view items, size_t limit) {
  return invalid_argument(std::string(kPrefix) + std::string(what) + " has " +
                          std::to_string(count) + " " + std::string(items) + ", limit " +
                          std::to_string(limit));
}

// `what` names the field for the error ("nack reason", "offer checksum 3 name").
Status check_string(const std::string& value, const std::string& what, const MessageLimits& l) {
  if (value.size() <= l.max_string_bytes) return ok_status();
  return invalid_argument(std::string(kPrefix) + what + " is " + std::to_string(value.size()) +
                          " bytes, limit " + std::to_string(l.max_string_bytes));
}

template <typename Checksums>
Status check_checksums(const Checksums& checksums, std::string_view body, const MessageLimits& l) {
  if (static_cast<size_t>(checksums.size()) > l.max_checksums)
    return too_many(body, checksums.size(), "checksums", l.max_checksums);
  for (int i = 0; i < checksums.size(); ++i) {
    RETURN_IF_ERROR(check_string(checksums.Get(i).name(),
                                 std::string(body) + " checksum " + std::to_string(i) + " name",
                                 l));
  }
  return ok_status();
}

Status check_hello(const proto::Hello& m, const MessageLimits& l) {
  if (static_cast<size_t>(m.transports_size()) > l.max_transports)
    return too_many("hello", m.transports_size(), "transports", l.max_transports);
  for (int i = 0; i < m.transports_size(); ++i)
    RETURN_IF_ERROR(check_string(m.transports(i), "hello transport " + std::to_string(i), l));
  RETURN_IF_ERROR(check_string(m.held_journal_id(), "hello held_journal_id", l));
  return check_string(m.host(), "hello host", l);
}

Status check_welcome(const proto::Welcome& m, const MessageLimits& l) {
  if (static_cast<size_t>(m.transports_size()) > l.max_transports)
    return too_many("welcome", m.transports_size(), "transports", l.max_transports);
  for (int i = 0; i < m.transports_size(); ++i)
    RETURN_IF_ERROR(check_string(m.transports(i), "welcome transport " + std::to_string(i), l));
  RETURN_IF_ERROR(check_string(m.journal_root(), "welcome journal_root", l));
  RETURN_IF_ERROR(check_string(m.journal_id(), "welcome journal_id", l));
  return check_string(m.plan(), "welcome plan", l);
}

template <typename Map>
Status check_live_descriptors(const Map& descriptors, const std::string& what,
                              const MessageLimits& l) {
  if (static_cast<size_t>(descriptors.size()) > l.max_transports)
    return too_many(what, descriptors.size(), "live descriptors", l.max_transports);
  for (const auto& [path, descriptor] : descriptors) {
    RETURN_IF_ERROR(check_string(path, what + " live descriptor name", l));
    if (descriptor.size() > l.max_blob_bytes) {
      return invalid_argument(std::string(kPrefix) + what + " live descriptor '" + path + "' has " +
                              std::to_string(descriptor.size()) + " bytes, more than " +
                              std::to_string(l.max_blob_bytes));
    }
  }
  return ok_status();
}

Status check_offer(const proto::Offer& m, const MessageLimits& l) {
  RETURN_IF_ERROR(check_checksums(m.checksums(), "offer", l));
  RETURN_IF_ERROR(check_live_descriptors(m.live_descriptors(), "offer", l));
  if (static_cast<size_t>(m.shard_descriptors_size()) > l.max_members)
    return too_many("offer", m.shard_descriptors_size(), "shard descriptors", l.max_members);
  for (const auto& shard : m.shard_descriptors()) {
    RETURN_IF_ERROR(check_live_descriptors(shard.live_descriptors(),
                                           "offer shard " + std::to_string(shard.shard()), l));
  }
  return check_string(m.journal_id(), "offer journal_id", l);
}

Status check_nack(const proto::Nack& m, const MessageLimits& l) {
  RETURN_IF_ERROR(check_string(m.reason(), "nack reason", l));
  if (static_cast<size_t>(m.tensors_size()) > l.max_checksums)
    return too_many("nack", m.tensors_size(), "tensors", l.max_checksums);
  for (int i = 0; i < m.tensors_size(); ++i)
    RETURN_IF_ERROR(check_string(m.tensors(i), "nack tensor " + std::to_string(i), l));
  return ok_status();
}

Status check_status_reply(const proto::StatusReply& m, const MessageLimits& l) {
  RETURN_IF_ERROR(check_string(m.group_id(), "status_reply group_id", l));
  if (static_cast<size_t>(m.members_size()) > l.max_members)
    return too_many("status_reply", m.members_size(), "members", l.max_members);
  if (static_cast<size_t>(m.nccl_ranks_size()) > l.max_members)
    return too_many("status_reply", m.nccl_ranks_size(), "nccl ranks", l.max_members);
  for (int i = 0; i < m.members_size(); ++i) {
    const proto::MemberStatus& member = m.members(i);
    const std::string where = "status_reply member " + std::to_string(i) + " ";
    RETURN_IF_ERROR(check_string(member.state(), where + "state", l));
    RETURN_IF_ERROR(check_string(member.transport(), where + "transport", l));
    RETURN_IF_ERROR(check_string(member.host(), where + "host", l));
  }
  return ok_status();
}

Status check_group_id(const std::string& id, std::string_view body, const MessageLimits& l) {
  if (id.size() <= l.max_group_id_bytes) return ok_status();
  return invalid_argument(std::string(kPrefix) + std::string(body) + " group_id is " +
                          std::to_string(id.size()) + " bytes, limit " +
                          std::to_string(l.max_group_id_bytes));
}

Status check_nccl_epoch(const proto::NcclEpoch& m, const MessageLimits& l) {
  if (m.stage() != proto::NCCL_MAKE_ID && m.stage() != proto::NCCL_JOIN &&
      m.stage() != proto::NCCL_READY && m.stage() != proto::NCCL_END) {
    return invalid_argument(std::string(kPrefix) + "nccl_epoch has stage " +
                            std::string(nccl_stage_name(m.stage())) +
                            " (expected make_id, join, ready or end)");
  }
  if (m.epoch() == 0) return invalid_argument(std::string(kPrefix) + "nccl_epoch has epoch 0");
  if (static_cast<size_t>(m.ranks_size()) > l.max_members)
    return too_many("nccl_epoch", m.ranks_size(), "ranks", l.max_members);
  if (m.publishers() > static_cast<uint32_t>(m.ranks_size())) {
    return invalid_argument(std::string(kPrefix) + "nccl_epoch names " +
                            std::to_string(m.publishers()) + " publishers among " +
                            std::to_string(m.ranks_size()) + " ranks");
  }
  RETURN_IF_ERROR(check_group_id(m.group_id(), "nccl_epoch", l));
  return check_string(m.reason(), "nccl_epoch reason", l);
}

Status check_nccl_report(const proto::NcclReport& m, const MessageLimits& l) {
  if (m.stage() != proto::NCCL_MAKE_ID && m.stage() != proto::NCCL_JOIN &&
      m.stage() != proto::NCCL_ROUND) {
    return invalid_argument(std::string(kPrefix) + "nccl_report has stage " +
                            std::string(nccl_stage_name(m.stage())) +
                            " (expected make_id, join or round)");
  }
  RETURN_IF_ERROR(check_group_id(m.group_id(), "nccl_report", l));
  return check_string(m.reason(), "nccl_report reason", l);
}

Status check_body(const proto::Envelope& m, const MessageLimits& l) {
  switch (m.body_case()) {
    case proto::Envelope::kHello:
      return check_hello(m.hello(), l);
    case proto::Envelope::kWelcome:
      return check_welcome(m.welcome(), l);
    case proto::Envelope::kRefuse:
      return check_string(m.refuse().reason(), "refuse reason", l);
    case proto::Envelope::kOffer:
      return check_offer(m.offer(), l);
    case proto::Envelope::kAck:
      RETURN_IF_ERROR(check_checksums(m.ack().checksums(), "ack", l));
      return check_string(m.ack().transport(), "ack transport", l);
    case proto::Envelope::kNack:
      return check_nack(m.nack(), l);
    case proto::Envelope::kRecover:
      RETURN_IF_ERROR(check_string(m.recover().journal_id(), "recover journal_id", l));
      return check_string(m.recover().reason(), "recover reason", l);
    case proto::Envelope::kLeave:
      return check_string(m.leave().reason(), "leave reason", l);
    case proto::Envelope::kStatusReply:
      return check_status_reply(m.status_reply(), l);
    case proto::Envelope::kNcclEpoch:
      return check_nccl_epoch(m.nccl_epoch(), l);
    case proto::Envelope::kNcclReport:
      return check_nccl_report(m.nccl_report(), l);
    case proto::Envelope::kCommit:
    case proto::Envelope::kHeartbeat:
    case proto::Envelope::kStatusRequest:
      return ok_status();
    case proto::Envelope::BODY_NOT_SET:
      break;
  }
  return invalid_argument(std::string(kPrefix) + "envelope has no body");
}

// Reasons come from peers: cut them short so one log line stays one short line.
std::string short_text(const std::string& s) {
  constexpr size_t kMax = 160;
  std::string out = s.size() > kMax ? s.substr(0, kMax) + "..." : s;
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::string list_text(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string text;
  for (const std::string& t : items) text += (text.empty() ? "" : ",") + t;
  return text;
}

std::string held(bool holds, uint64_t version) {
  return holds ? "holds v" + std::to_string(version) : "holds nothing";
}

std::string describe_hello(const proto::Hello& m) {
  return "hello from rank " + std::to_string(m.rank()) + " (" + std::string(role_name(m.role())) +
         ", protocol " + std::to_string(m.protocol_min()) + "-" + std::to_string(m.protocol_max()) +
         ", " + held(m.holds_version(), m.held_version()) + ", transports " +
         short_text(list_text(m.transports())) + ", " + short_text(m.host()) + ":" +
         std::to_string(m.pid()) + ")";
}

std::string describe_welcome(const proto::Welcome& m) {
  return "welcome protocol " + std::to_string(m.protocol()) + " (head " +
         (m.has_head() ? "v" + std::to_string(m.head_version()) : std::string("none")) +
         ", committed v" + std::to_string(m.committed_version()) + ", transports " +
         short_text(list_text(m.transports())) + ", plan " + short_text(m.plan()) + ")";
}

std::string describe_status_reply(const proto::StatusReply& m) {
  return "status_reply group " + short_text(m.group_id()) + " (head " +
         (m.has_head() ? "v" + std::to_string(m.head_version()) : std::string("none")) +
         ", committed " +
         (m.has_committed() ? "v" + std::to_string(m.committed_version()) : std::string("none")) +
         ", " + std::to_string(m.members_size()) + " members)";
}

}  // namespace

std::string_view role_name(proto::Role role) {
  switch (role) {
    case proto::ROLE_COORDINATOR:
      return "coordinator";
    case proto::ROLE_PUBLISHER:
      return "publisher";
    case proto::ROLE_SUBSCRIBER:
      return "subscriber";
    case proto::ROLE_OBSERVER:
      return "observer";
    default:
      return "unspecified";
  }
}

std::string_view nccl_stage_name(proto::NcclStage stage) {
  switch (stage) {
    case proto::NCCL_MAKE_ID:
      return "make_id";
    case proto::NCCL_JOIN:
      return "join";
    case proto::NCCL_READY:
      return "ready";
    case proto::NCCL_END:
      return "end";
    case proto::NCCL_ROUND:
      return "round";
    default:
      return "unspecified";
  }
}

std::string encode_envelope(const proto::Envelope& message) {
  // Deterministic (map entries such as Offer.live_descriptors in key order), so that a
  // frame re-encodes to the same bytes.
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

Result<proto::Envelope> decode_envelope(std::span<const uint8_t> frame,
                                        const MessageLimits& limits) {
  if (frame.empty()) return invalid_argument(std::string(kPrefix) + "empty frame");
  if (frame.size() > limits.max_bytes || frame.size() > static_cast<size_t>(INT_MAX)) {
    return invalid_argument(std::string(kPrefix) + "frame of " + std::to_string(frame.size()) +
                            " bytes, limit " + std::to_string(limits.max_bytes));
  }
  proto::Envelope message;
  if (!message.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return invalid_argument(
        std::string(kPrefix) + "frame of " + std::to_string(frame.size()) +
        " bytes is not a valid Envelope (malformed protobuf, or a string that is not "
        "UTF-8)");
  }
  if (message.body_case() == proto::Envelope::BODY_NOT_SET)
    return invalid_argument(std::string(kPrefix) + "envelope has no body");
  if (message.protocol() == 0) {
    return invalid_argument(std::string(kPrefix) + body_name(message) +
                            " has protocol 0 (the sender must name its protocol)");
  }
  RETURN_IF_ERROR(check_body(message, limits));
  return message;
}

std::string body_name(const proto::Envelope& message) {
  switch (message.body_case()) {
    case proto::Envelope::kHello:
      return "hello";
    case proto::Envelope::kWelcome:
      return "welcome";
    case proto::Envelope::kRefuse:
      return "refuse";
    case proto::Envelope::kOffer:
      return "offer";
    case proto::Envelope::kAck:
      return "ack";
    case proto::Envelope::kNack:
      return "nack";
    case proto::Envelope::kRecover:
      return "recover";
    case proto::Envelope::kCommit:
      return "commit";
    case proto::Envelope::kHeartbeat:
      return "heartbeat";
    case proto::Envelope::kLeave:
      return "leave";
    case proto::Envelope::kStatusRequest:
      return "status_request";
    case proto::Envelope::kStatusReply:
      return "status_reply";
    case proto::Envelope::kNcclEpoch:
      return "nccl_epoch";
    case proto::Envelope::kNcclReport:
      return "nccl_report";
    case proto::Envelope::BODY_NOT_SET:
      break;
  }
  return "empty";
}

std::string describe_envelope(const proto::Envelope& message) {
  const auto v = [](uint64_t version) { return "v" + std::to_string(version); };
  switch (message.body_case()) {
    case proto::Envelope::kHello:
      return describe_hello(message.hello());
    case proto::Envelope::kWelcome:
      return describe_welcome(message.welcome());
    case proto::Envelope::kRefuse:
      return std::string("refuse") + (message.refuse().fatal() ? " (fatal)" : "") + ": " +
             short_text(message.refuse().reason());
    case proto::Envelope::kOffer: {
      const proto::Offer& m = message.offer();
      const std::string base = m.has_base() ? " base " + std::to_string(m.base_version()) : "";
      std::string paths;
      for (const auto& [path, descriptor] : m.live_descriptors()) {
        paths += (paths.empty() ? "" : ",") + path;
      }
      return "offer " + v(m.version()) + base + (m.anchor() ? " anchor" : "") + " (" +
             std::to_string(m.checksums_size()) + " tensors" +
             (paths.empty() ? "" : ", live " + short_text(paths)) + ")";
    }
    case proto::Envelope::kAck:
      return "ack " + v(message.ack().version()) + " from rank " +
             std::to_string(message.ack().rank());
    case proto::Envelope::kNack:
      return "nack " + v(message.nack().version()) + " from rank " +
             std::to_string(message.nack().rank()) + ": " + short_text(message.nack().reason());
    case proto::Envelope::kRecover:
      return "recover to " + v(message.recover().target_version()) +
             (message.recover().from_anchor() ? " from an anchor" : "") + ": " +
             short_text(message.recover().reason());
    case proto::Envelope::kCommit:
      return "commit " + v(message.commit().version());
    case proto::Envelope::kHeartbeat: {
      const proto::Heartbeat& m = message.heartbeat();
      return "heartbeat from rank " + std::to_string(m.rank()) + " (" +
             held(m.holds_version(), m.held_version()) + (m.busy() ? ", busy" : "") + ")";
    }
    case proto::Envelope::kLeave:
      return "leave from rank " + std::to_string(message.leave().rank()) + ": " +
             short_text(message.leave().reason());
    case proto::Envelope::kStatusRequest:
      return "status_request from rank " + std::to_string(message.rank());
    case proto::Envelope::kStatusReply:
      return describe_status_reply(message.status_reply());
    case proto::Envelope::kNcclEpoch: {
      const proto::NcclEpoch& m = message.nccl_epoch();
      return "nccl_epoch " + std::to_string(m.epoch()) + " " +
             std::string(nccl_stage_name(m.stage())) + " (" + std::to_string(m.ranks_size()) +
             " ranks" + (m.reason().empty() ? "" : ": " + short_text(m.reason())) + ")";
    }
    case proto::Envelope::kNcclReport: {
      const proto::NcclReport& m = message.nccl_report();
      return "nccl_report epoch " + std::to_string(m.epoch()) + " " +
             std::string(nccl_stage_name(m.stage())) + " from rank " +
             std::to_string(message.rank()) +
             (m.ok() ? " ok" : " failed: " + short_text(m.reason()));
    }
    case proto::Envelope::BODY_NOT_SET:
      break;
  }
  return "empty";
}

}  // namespace weightcast
