// Between the public API's types (include/weightcast/, namespace weightcast::api) and the
// internal ones (codec/, src/endpoint/, namespace weightcast). The public enums carry the
// internal values, so converting is a cast checked by static_asserts in conversions.cc.
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"
#include "weightcast/group_config.pb.h"
#include "weightcast/status.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

Status from_internal(const ::weightcast::Status& status);
::weightcast::TensorRef to_internal(const TensorRef& ref);
TensorRef from_internal(const ::weightcast::TensorRef& ref);

// Loads `config_path` and checks that `rank` has `role` there; errors name the file and the
// rank.
::weightcast::Result<proto::GroupConfig> load_config_for_role(const std::string& config_path,
                                                              uint32_t rank, proto::Role role);

}  // namespace weightcast::api
