#include "codec/dtype.h"

#include <array>
#include <string>

namespace weightcast {
namespace {

constexpr std::array<DTypeInfo, 12> kTable = {{
    {DType::kBool, 1, "bool", "BOOL", "torch.bool", "BoolStorage", false},
    {DType::kU8, 1, "u8", "U8", "torch.uint8", "ByteStorage", false},
    {DType::kI8, 1, "i8", "I8", "torch.int8", "CharStorage", false},
    {DType::kI16, 2, "i16", "I16", "torch.int16", "ShortStorage", false},
    {DType::kI32, 4, "i32", "I32", "torch.int32", "IntStorage", false},
    {DType::kI64, 8, "i64", "I64", "torch.int64", "LongStorage", false},
    {DType::kF16, 2, "f16", "F16", "torch.float16", "HalfStorage", true},
    {DType::kBF16, 2, "bf16", "BF16", "torch.bfloat16", "BFloat16Storage", true},
    {DType::kF32, 4, "f32", "F32", "torch.float32", "FloatStorage", true},
    {DType::kF64, 8, "f64", "F64", "torch.float64", "DoubleStorage", true},
    {DType::kF8E4M3FN, 1, "f8_e4m3fn", "F8_E4M3", "torch.float8_e4m3fn", "Float8_e4m3fnStorage",
     true},
    {DType::kF8E5M2, 1, "f8_e5m2", "F8_E5M2", "torch.float8_e5m2", "Float8_e5m2Storage", true},
}};

// Accepted spellings besides the table's own: the common torch attribute names.
struct Alias {
  std::string_view name;
  DType dtype;
};
constexpr std::array<Alias, 14> kAliases = {{
    {"uint8", DType::kU8},
    {"int8", DType::kI8},
    {"int16", DType::kI16},
    {"int32", DType::kI32},
    {"int64", DType::kI64},
    {"float16", DType::kF16},
    {"half", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"float32", DType::kF32},
    {"float", DType::kF32},
    {"float64", DType::kF64},
    {"double", DType::kF64},
    {"float8_e4m3fn", DType::kF8E4M3FN},
    {"float8_e5m2", DType::kF8E5M2},
}};

}  // namespace

std::span<const DTypeInfo> all_dtypes() {
  return kTable;
}

const DTypeInfo& dtype_info(DType dtype) {
  return kTable[static_cast<size_t>(dtype) - 1];
}

Result<DType> dtype_from_code(uint8_t code) {
  if (code < 1 || code > kTable.size()) {
    return data_loss("unknown dtype code " + std::to_string(code));
  }
  return static_cast<DType>(code);
}

Result<DType> dtype_from_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const auto& info : kTable) {
    if (info.name == name || info.torch.substr(6) == name) return info.dtype;
  }
  for (const auto& alias : kAliases) {
    if (alias.name == name) return alias.dtype;
  }
  return invalid_argument("unknown dtype '" + std::string(name) +
                          "' (expected one of bool, u8, i8, i16, i32, i64, f16, bf16, f32, f64, "
                          "f8_e4m3fn, f8_e5m2)");
}

Result<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& info : kTable) {
    if (info.safetensors == name) return info.dtype;
  }
  return data_loss("unknown safetensors dtype '" + std::string(name) + "'");
}

Result<DType> dtype_from_torch_storage(std::string_view storage_class) {
  for (const auto& info : kTable) {
    if (info.torch_storage == storage_class) return info.dtype;
  }
  return data_loss("unknown torch storage class '" + std::string(storage_class) + "'");
}

}  // namespace weightcast
