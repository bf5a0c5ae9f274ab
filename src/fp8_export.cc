#include "src/fp8_export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "codec/base/file_io.h"
#include "codec/fp8_quantize.h"
#include "codec/fp8_selection.h"
#include "src/model_files.h"
#include "transport/user_file_writer.h"

namespace weightcast {
namespace {

// The model's config.json beside --from (an object), or an empty object. Read as the project
// reads every file it is handed (codec/base/file_io.h: regular files only, a size limit).
Result<nlohmann::json> model_config(const std::string& from) {
  const std::filesystem::path path = std::filesystem::path(from).parent_path() / "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nlohmann::json::object();
  ASSIGN_OR_RETURN(const std::vector<uint8_t> text, read_whole_file(path.string(), 1 << 24));
  auto config = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return invalid_argument("'" + path.string() + "' is not a JSON object");
  }
  return config;
}

}  // namespace

Result<Fp8ExportReport> export_fp8_checkpoint(const Fp8ExportOptions& options) {
  ASSIGN_OR_RETURN(const Fp8Selection selection,
                   Fp8Selection::compile(options.patterns, "--quantize"));
  ASSIGN_OR_RETURN(std::unique_ptr<ModelFiles> model, read_model_files(options.from));
  ASSIGN_OR_RETURN(nlohmann::json config, model_config(options.from));
  Fp8ExportReport report;
  report.bytes_in = model->total_bytes;
  std::vector<std::vector<uint8_t>> values;  // the quantised bytes the views below point into
  std::vector<std::vector<float>> scales;
  std::vector<TensorBytesView> out;
  values.reserve(model->tensors.size());
  scales.reserve(model->tensors.size());
  for (const auto& t : model->tensors) {
    if (!selection.selects(t.name)) {
      out.push_back(t);
      ++report.kept;
      continue;
    }
    RETURN_IF_ERROR(check_fp8_source(t.name, t.dtype, t.shape, "narrow --quantize"));
    TensorRef ref = TensorRef::contiguous(t.name, t.dtype, const_cast<uint8_t*>(t.bytes.data()),
                                          t.shape[0] * t.shape[1]);
    ref.shape = t.shape;
    auto& q = values.emplace_back(static_cast<size_t>(t.shape[0] * t.shape[1]));
    auto& s = scales.emplace_back(
        static_cast<size_t>(fp8_scale_rows(t.shape[0]) * fp8_scale_cols(t.shape[1])));
    RETURN_IF_ERROR(quantize_fp8_blocks(ref, q, s));
    out.push_back({t.name, DType::kF8E4M3FN, t.shape, q});
    out.push_back({fp8_scale_name(t.name),
                   DType::kF32,
                   {fp8_scale_rows(t.shape[0]), fp8_scale_cols(t.shape[1])},
                   {reinterpret_cast<const uint8_t*>(s.data()), s.size() * sizeof(float)}});
    report.quantised.push_back(t.name);
    if (options.log && report.quantised.size() % 64 == 0) {
      options.log("fp8 quantize: " + std::to_string(report.quantised.size()) + " tensors");
    }
  }
  if (report.quantised.empty()) {
    return invalid_argument("no tensor of '" + options.from + "' matches the --quantize patterns");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) return io_error("cannot create '" + options.out_dir + "': " + ec.message());
  report.model_file = (std::filesystem::path(options.out_dir) / "model.safetensors").string();
  report.config_file = (std::filesystem::path(options.out_dir) / "config.json").string();
  UserFileOptions files;
  files.inputs = {options.from};
  for (const auto& f : model->files) files.inputs.push_back(f.path());
  RETURN_IF_ERROR(write_model_file(report.model_file, out, files));
  for (const auto& t : out) report.bytes_out += t.bytes.size();
  config["quantization_config"] = nlohmann::json::parse(fp8_quantization_config_json());
  const std::string text = config.dump(2) + "\n";
  ASSIGN_OR_RETURN(UserFileWriter writer, UserFileWriter::create(report.config_file, files));
  RETURN_IF_ERROR(writer.write({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  RETURN_IF_ERROR(writer.commit());
  return report;
}

}  // namespace weightcast
