// Element types weightcast moves, with every name the outside world uses for them.
// One table (dtype.cc) is the single source of element sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "codec/base/status.h"

namespace weightcast {

// Values are stable: they appear in the delta wire format and in proto/ (DType + 0).
enum class DType : uint8_t {
  kBool = 1,
  kU8 = 2,
  kI8 = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kF16 = 7,
  kBF16 = 8,
  kF32 = 9,
  kF64 = 10,
  kF8E4M3FN = 11,
  kF8E5M2 = 12,
};

struct DTypeInfo {
  DType dtype;
  uint8_t size;                    // bytes per element
  std::string_view name;           // weightcast's own short name: "bf16"
  std::string_view safetensors;    // "BF16"
  std::string_view torch;          // "torch.bfloat16"
  std::string_view torch_storage;  // legacy typed storage class: "BFloat16Storage"
  bool is_float;
};

// Every dtype, in enum order.
std::span<const DTypeInfo> all_dtypes();

// Never fails for a valid enumerator; the enum is closed.
const DTypeInfo& dtype_info(DType dtype);
inline size_t dtype_size(DType dtype) {
  return dtype_info(dtype).size;
}
inline std::string_view dtype_name(DType dtype) {
  return dtype_info(dtype).name;
}

// Lookups from outside input; errors name the unknown string.
Result<DType> dtype_from_code(uint8_t code);
Result<DType> dtype_from_name(std::string_view name);  // weightcast or torch short names
Result<DType> dtype_from_safetensors(std::string_view name);
Result<DType> dtype_from_torch_storage(std::string_view storage_class);

}  // namespace weightcast
