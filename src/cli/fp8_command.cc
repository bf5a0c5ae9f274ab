// `weightcast fp8 quantize`: a model rewritten as a block-FP8 checkpoint (src/fp8_export.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/fp8_selection.h"
#include "src/cli/commands.h"
#include "src/cli/path_flags.h"
#include "src/fp8_export.h"

namespace weightcast::cli {

void register_fp8_commands(CLI::App& app, int& exit_code) {
  auto* fp8 = app.add_subcommand("fp8", "Block-FP8 (float8_e4m3fn) checkpoints for FP8 engines");
  fp8->require_subcommand(1);
  auto c = std::make_shared<Fp8ExportOptions>();
  auto* q = fp8->add_subcommand(
      "quantize",
      "Write a model as a block-FP8 checkpoint: the selected 2-D weights as float8_e4m3fn in "
      "128x128 blocks with a <name>_scale_inv fp32 grid each, other tensors as they are, and a "
      "config.json with the quantization_config FP8 loaders read");
  q->add_option("--from", c->from, "MODEL.safetensors, or a model.safetensors.index.json of shards")
      ->required()
      ->check(existing_regular_file());
  q->add_option("--out", c->out_dir,
                "Output directory (created if missing): model.safetensors and config.json")
      ->required();
  q->add_option("--quantize", c->patterns,
                std::string("Regex over whole tensor names to quantise, repeatable (default: ") +
                    kFp8DefaultPattern + ", the linear projections)");
  q->callback([c, &exit_code] {
    c->log = [](const std::string& line) {
      std::fprintf(stderr, "weightcast: %s\n", line.c_str());
    };
    auto r = export_fp8_checkpoint(*c);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    const nlohmann::json j{{"model", r->model_file},           {"config", r->config_file},
                           {"quantised", r->quantised.size()}, {"kept", r->kept},
                           {"bytes_in", r->bytes_in},          {"bytes_out", r->bytes_out}};
    std::printf("%s\n", j.dump().c_str());
    exit_code = 0;
  });
}

}  // namespace weightcast::cli
