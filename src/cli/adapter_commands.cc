// `weightcast adapter inspect|verify|publish`: compact LoRA adapter publication.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/base/file_io.h"
#include "codec/base/thread_pool.h"
#include "codec/dedup.h"
#include "src/adapter_inputs.h"
#include "src/adapter_load.h"
#include "src/adapter_publish.h"
#include "src/cli/commands.h"
#include "src/cli/number_flags.h"
#include "src/cli/path_flags.h"

namespace weightcast::cli {
namespace {

namespace fs = std::filesystem;

struct InspectArgs {
  std::string path;
  bool json = false;
};
struct PublishArgs {
  std::string from, config, out;
  size_t threads = 2;
};

Status run_inspect(const InspectArgs& a) {
  std::string file = a.path;
  if (fs::is_directory(a.path)) {
    ASSIGN_OR_RETURN(file, committed_adapter_file(a.path));
  }
  ASSIGN_OR_RETURN(auto input, read_adapter_input(file));
  ASSIGN_OR_RETURN(const DedupResult dedup, deduplicate(input->tensors));
  const DedupStats& s = dedup.stats;
  const uint64_t file_bytes = input->file.bytes().size();
  const char* representation =
      input->torch_format ? "torch-compact (adapter_model.bin)" : "safetensors";
  const char* rule = adapter_format_name(choose_adapter_format(s));
  if (a.json) {
    nlohmann::json j = {{"file", file},
                        {"representation", input->torch_format ? "torch-compact" : "safetensors"},
                        {"keys", s.keys},
                        {"file_storages", input->file_storages},
                        {"unique_storages", s.unique_storages},
                        {"logical_bytes", s.logical_bytes},
                        {"unique_bytes", s.unique_bytes},
                        {"file_bytes", file_bytes},
                        {"rule_chooses", rule}};
    std::printf("%s\n", j.dump(2).c_str());
    return ok_status();
  }
  std::printf("%s\n", file.c_str());
  std::printf("  representation   %s\n", representation);
  std::printf("  keys             %llu\n", static_cast<unsigned long long>(s.keys));
  std::printf("  storages         %llu in the file, %llu unique by content\n",
              static_cast<unsigned long long>(input->file_storages),
              static_cast<unsigned long long>(s.unique_storages));
  std::printf("  logical bytes    %llu\n", static_cast<unsigned long long>(s.logical_bytes));
  std::printf("  unique bytes     %llu (%.1f%% of logical)\n",
              static_cast<unsigned long long>(s.unique_bytes),
              s.logical_bytes == 0 ? 0.0 : 100.0 * s.unique_bytes / s.logical_bytes);
  std::printf("  file bytes       %llu\n", static_cast<unsigned long long>(file_bytes));
  std::printf("  the rule picks   %s\n", rule);
  return ok_status();
}

Status run_verify(const std::string& dir) {
  if (!fs::is_directory(dir)) return invalid_argument("'" + dir + "' is not a directory");
  ASSIGN_OR_RETURN(const LoadedAdapter adapter, load_adapter(dir));
  if (!nlohmann::json::accept(adapter.config_json)) {
    return data_loss("'" + (fs::path(dir) / kAdapterConfigFile).string() + "' is not valid JSON");
  }
  const AdapterFormat other = adapter.format == AdapterFormat::kTorchCompact
                                  ? AdapterFormat::kSafetensors
                                  : AdapterFormat::kTorchCompact;
  const bool stale = fs::exists(fs::path(dir) / adapter_file_name(other));
  std::printf("%s: OK: %s, %zu keys over %llu storages, %llu bytes%s\n", dir.c_str(),
              adapter_format_name(adapter.format), adapter.tensors.size(),
              static_cast<unsigned long long>(adapter.file_storages),
              static_cast<unsigned long long>(adapter.file_bytes),
              stale ? " (a stale file of the other format is still present: an interrupted "
                      "publication; the marker names the committed one)"
                    : "");
  return ok_status();
}

Status run_publish(const PublishArgs& a) {
  ASSIGN_OR_RETURN(auto input, read_adapter_input(a.from));
  if (input->tensors.empty()) {
    return invalid_argument("'" + a.from + "' has no tensors: nothing to publish");
  }
  ASSIGN_OR_RETURN(const auto config, read_whole_file(a.config, 1 << 24));
  ThreadPool pool(a.threads);
  auto pub =
      publish_adapter(a.out, input->tensors,
                      std::string_view(reinterpret_cast<const char*>(config.data()), config.size()),
                      &pool, std::nullopt, {a.from, a.config});
  if (!pub.ok()) return pub.status().with_context("publishing '" + a.from + "' to '" + a.out + "'");
  std::printf(
      "%s: %s, %llu keys, %llu unique storages, %llu of %llu logical bytes unique, "
      "%llu bytes written (dedup %.3f s, write %.3f s)\n",
      pub->model_path.c_str(), adapter_format_name(pub->format),
      static_cast<unsigned long long>(pub->stats.keys),
      static_cast<unsigned long long>(pub->stats.unique_storages),
      static_cast<unsigned long long>(pub->stats.unique_bytes),
      static_cast<unsigned long long>(pub->stats.logical_bytes),
      static_cast<unsigned long long>(pub->file_bytes), pub->dedup_s, pub->write_s);
  return ok_status();
}

}  // namespace

void register_adapter_commands(CLI::App& app, int& exit_code) {
  auto* adapter = app.add_subcommand("adapter", "Publish, inspect and verify LoRA adapters");
  adapter->require_subcommand(1);

  auto ins = std::make_shared<InspectArgs>();
  auto* i = adapter->add_subcommand(
      "inspect", "Keys, storages, logical vs unique bytes and representation of an adapter");
  i->add_option("path", ins->path, "Adapter directory or model file")
      ->required()
      ->check(existing_path());
  i->add_flag("--json", ins->json, "Print one JSON object");
  i->callback([ins, &exit_code] { exit_code = report(run_inspect(*ins)); });

  auto dir = std::make_shared<std::string>();
  auto* v = adapter->add_subcommand(
      "verify", "Load every key of a published adapter and check the directory");
  v->add_option("dir", *dir, "Adapter directory")->required();
  v->callback([dir, &exit_code] { exit_code = report(run_verify(*dir)); });

  auto pub = std::make_shared<PublishArgs>();
  auto* p = adapter->add_subcommand("publish",
                                    "Publish an adapter: a compact torch artifact when unique "
                                    "bytes < half the logical bytes, else safetensors");
  p->add_option("--from", pub->from, "safetensors file or torch.save'd dict of tensors")
      ->required()
      ->check(existing_regular_file());
  p->add_option("--config", pub->config, "adapter_config.json to publish with it")
      ->required()
      ->check(existing_regular_file());
  p->add_option("--out", pub->out, "Adapter directory (created if missing)")->required();
  p->add_option("--threads", pub->threads, "Threads fingerprinting tensors")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  p->callback([pub, &exit_code] { exit_code = report(run_publish(*pub)); });
}

}  // namespace weightcast::cli
