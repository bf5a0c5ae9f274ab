#include "codec/fp8_selection.h"

namespace weightcast {

std::string fp8_scale_name(std::string_view name) {
  return std::string(name) + "_scale_inv";
}

std::string fp8_quantization_config_json() {
  return R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", )"
         R"("weight_block_size": [128, 128]})";
}

Result<Fp8Selection> Fp8Selection::compile(const std::vector<std::string>& patterns,
                                           const std::string& what) {
  Fp8Selection s;
  const std::vector<std::string> sources =
      patterns.empty() ? std::vector<std::string>{kFp8DefaultPattern} : patterns;
  for (const auto& p : sources) {
    try {
      s.patterns_.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return invalid_argument(what + " pattern '" + p + "' is not a valid regex: " + e.what());
    }
  }
  return s;
}

bool Fp8Selection::selects(const std::string& name) const {
  for (const auto& re : patterns_) {
    if (std::regex_match(name, re)) return true;
  }
  return false;
}

Status check_fp8_source(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                        const std::string& remedy) {
  if (shape.size() == 2 &&
      (dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32)) {
    return ok_status();
  }
  return invalid_argument("tensor '" + name + "' (" + std::string(dtype_name(dtype)) + ", " +
                          std::to_string(shape.size()) +
                          "-D) is selected for FP8 but is not a 2-D bf16, fp16 or fp32 matrix (" +
                          remedy + ")");
}

}  // namespace weightcast
