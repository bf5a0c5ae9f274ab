// Which tensors an FP8 group quantises and what they become (docs/ARCHITECTURE.md §4 "FP8"):
// a selected weight `W` is published as float8_e4m3fn `W` (same name and shape) plus
// `W_scale_inv` fp32 [ceil(M/128), ceil(N/128)] (codec/fp8_quantize.h), as block-FP8
// checkpoints name them; every other tensor keeps its dtype. Used by `weightcast fp8 quantize`,
// the group config's `fp8` section and the publisher.
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"

namespace weightcast {

// The default selection: the linear projections (names ending in "_proj.weight"), leaving
// embeddings, norms, routers and the LM head in their dtype, as FP8 checkpoints do.
inline constexpr const char* kFp8DefaultPattern = R"(.*_proj\.weight$)";

// The scale tensor published beside FP8 weight `name`.
std::string fp8_scale_name(std::string_view name);

// The `quantization_config` object FP8 checkpoints carry in config.json, as JSON text:
// {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//  "weight_block_size": [128, 128]}.
std::string fp8_quantization_config_json();

class Fp8Selection {
 public:
  // ECMAScript regexes matched against whole names; empty: kFp8DefaultPattern. An invalid one
  // is kInvalidArgument naming it and `what` (the flag or config field it came from).
  static Result<Fp8Selection> compile(const std::vector<std::string>& patterns,
                                      const std::string& what);
  bool selects(const std::string& name) const;

 private:
  std::vector<std::regex> patterns_;
};

// OK when tensor `name` can be quantised: a 2-D bf16, fp16 or fp32 matrix. Otherwise
// kInvalidArgument naming it, its dtype and rank, and `remedy` (how to leave it out).
[[nodiscard]] Status check_fp8_source(const std::string& name, DType dtype,
                                      const std::vector<int64_t>& shape, const std::string& remedy);

}  // namespace weightcast
