// Control messages on the wire: one proto::Envelope per ZeroMQ frame.
//
// Every message from outside is bounded before it is parsed (total size) and after (counts
// of repeated fields, string lengths), so a hostile or broken peer costs at most one
// rejected frame: decode_envelope never crashes and says what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "codec/base/status.h"
#include "weightcast/control.pb.h"

namespace weightcast {

// The control protocol versions this build speaks (Hello carries a range; the coordinator
// picks the highest both sides speak).
inline constexpr uint32_t kProtocolMin = 1;
inline constexpr uint32_t kProtocolMax = 1;

struct MessageLimits {
  size_t max_bytes = size_t{16} << 20;      // one frame
  size_t max_checksums = size_t{1} << 20;   // Offer/Ack checksums, Nack tensors
  size_t max_members = 65536;               // StatusReply members
  size_t max_string_bytes = 4096;           // any string field (reason, names, host)
  size_t max_transports = 16;               // Hello/Welcome transports, Offer live descriptors
  size_t max_blob_bytes = size_t{8} << 20;  // one Offer live descriptor
  size_t max_group_id_bytes = 1024;         // NcclEpoch/NcclReport group_id (ncclUniqueId: 128)
};

// Serializes `message` (which must have a body).
std::string encode_envelope(const proto::Envelope& message);

// Parses one frame: kInvalidArgument for an oversized frame, bytes that are not an
// Envelope, an Envelope without a body, a zero protocol, or a field past `limits`; the
// message says which.
Result<proto::Envelope> decode_envelope(std::span<const uint8_t> frame,
                                        const MessageLimits& limits = {});

// "coordinator", "publisher", "subscriber", "observer"; "unspecified" otherwise.
std::string_view role_name(proto::Role role);

// "make_id", "join", ... for an NCCL epoch stage: for logs.
std::string_view nccl_stage_name(proto::NcclStage stage);

// "offer", "ack", ... ("empty" without a body): for logs.
std::string body_name(const proto::Envelope& message);

// One line for logs: "offer v12 base 11 (300 tensors)", "ack v12 from rank 3", ...
std::string describe_envelope(const proto::Envelope& message);

}  // namespace weightcast
