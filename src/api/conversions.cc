#include "src/api/conversions.h"

#include "codec/dtype.h"
#include "src/control/group_config.h"
#include "weightcast/config.h"
#include "weightcast/weightcast.h"

namespace weightcast::api {
namespace {

namespace in = ::weightcast;

static_assert(static_cast<int>(StatusCode::kOk) == static_cast<int>(in::StatusCode::kOk));
static_assert(static_cast<int>(StatusCode::kDeadlineExceeded) ==
              static_cast<int>(in::StatusCode::kDeadlineExceeded));
static_assert(static_cast<int>(StatusCode::kInternal) ==
              static_cast<int>(in::StatusCode::kInternal));
static_assert(static_cast<int>(StatusCode::kUnavailable) ==
              static_cast<int>(in::StatusCode::kUnavailable));
static_assert(static_cast<int>(DType::kBool) == static_cast<int>(in::DType::kBool));
static_assert(static_cast<int>(DType::kBF16) == static_cast<int>(in::DType::kBF16));
static_assert(static_cast<int>(DType::kF8E5M2) == static_cast<int>(in::DType::kF8E5M2));
static_assert(static_cast<int>(MemoryKind::kHost) == static_cast<int>(in::MemoryKind::kHost));
static_assert(static_cast<int>(MemoryKind::kHostPinned) ==
              static_cast<int>(in::MemoryKind::kHostPinned));
static_assert(static_cast<int>(MemoryKind::kCuda) == static_cast<int>(in::MemoryKind::kCuda));

const char* role_name(proto::Role role) {
  switch (role) {
    case proto::ROLE_PUBLISHER:
      return "publisher";
    case proto::ROLE_SUBSCRIBER:
      return "subscriber";
    case proto::ROLE_COORDINATOR:
      return "coordinator";
    default:
      return "unspecified";
  }
}

}  // namespace

std::string_view status_code_name(StatusCode code) {
  return in::status_code_name(static_cast<in::StatusCode>(code));
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

size_t dtype_size(DType dtype) {
  auto known = in::dtype_from_code(static_cast<uint8_t>(dtype));
  return known.ok() ? in::dtype_size(*known) : 0;
}

const char* version_string() {
  return WEIGHTCAST_VERSION_STRING " (" WEIGHTCAST_GIT_REVISION ")";
}

bool ucx_built() {
  return WEIGHTCAST_HAVE_UCX != 0;
}

Status from_internal(const in::Status& status) {
  if (status.ok()) return {};
  return Status(static_cast<StatusCode>(status.code()), status.message());
}

in::TensorRef to_internal(const TensorRef& ref) {
  in::TensorRef out;
  out.name = ref.name;
  out.dtype = static_cast<in::DType>(ref.dtype);
  out.shape = ref.shape;
  out.strides = ref.strides;
  out.offset = ref.offset;
  out.data = ref.data;
  out.memory = static_cast<in::MemoryKind>(ref.memory);
  out.device = ref.device;
  return out;
}

TensorRef from_internal(const in::TensorRef& ref) {
  TensorRef out;
  out.name = ref.name;
  out.dtype = static_cast<DType>(ref.dtype);
  out.shape = ref.shape;
  out.strides = ref.strides;
  out.offset = ref.offset;
  out.data = ref.data;
  out.memory = static_cast<MemoryKind>(ref.memory);
  out.device = ref.device;
  return out;
}

in::Result<proto::GroupConfig> load_config_for_role(const std::string& config_path, uint32_t rank,
                                                    proto::Role role) {
  ASSIGN_OR_RETURN(proto::GroupConfig config, in::load_group_config(config_path));
  ASSIGN_OR_RETURN(proto::RankConfig entry, in::find_rank(config, rank));
  if (entry.role() != role) {
    return in::invalid_argument(config_path + ": rank " + std::to_string(rank) + " is a " +
                                role_name(entry.role()) + " rank, not a " + role_name(role) +
                                " rank");
  }
  return config;
}

}  // namespace weightcast::api
