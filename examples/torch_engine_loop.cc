// weightcast_torch_engine --config group.yaml --rank R --until-version V [--timeout-s S]: an
// inference engine that embeds the public subscriber API (<weightcast/subscriber.h>, linked
// as weightcast::weightcast). It allocates the served
// bf16 weights of the tiny model (examples/torch_example_model.h, the trainer's names and
// shapes), registers them, incl. the strided q/k/v views of the packed projection, and lets
// versions arrive: the Subscriber pauses the engine around every copy into its tensors
// (before_apply / after_apply). Once it holds V it leaves the group and prints a summary
// (per tensor: shape, sum, weightcast checksum; and the digest the trainer prints).
//
// Exit status: 0 after reaching V, 1 on a failure or when V is not reached within S
// seconds, 2 for a bad command line or config.
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <weightcast/weightcast.h>

#include "examples/torch_example_model.h"
#include "examples/torch_tensor_ref.h"

namespace {

namespace wc = weightcast::api;
using namespace weightcast::examples;

std::string shape_text(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

int run(const std::string& config_path, uint32_t rank, uint64_t until, int64_t timeout_s,
        size_t threads, bool verbose) {
  auto fail = [](const char* what, const wc::Status& s) {
    std::fprintf(stderr, "engine: %s: %s\n", what, s.to_string().c_str());
    return 1;
  };

  ServedWeights served = make_served_weights();
  wc::SubscriberOptions so;
  so.threads = threads;
  if (verbose)
    so.log = [](const std::string& line) { std::fprintf(stderr, "[engine] %s\n", line.c_str()); };
  // A real engine drains its batches here and resumes them after the copy; the tensors hold
  // the previous verified version until before_apply and the new one after after_apply.
  so.before_apply = [](uint64_t v) {
    std::printf("pausing engine (applying v%llu)\n", static_cast<unsigned long long>(v));
    std::fflush(stdout);
  };
  so.after_apply = [](uint64_t v) {
    std::printf("resuming on v%llu\n", static_cast<unsigned long long>(v));
    std::fflush(stdout);
  };
  // The config is read here: a bad file or a rank that is not a subscriber is a bad command
  // line (exit 2).
  auto subscriber = wc::Subscriber::create(config_path, rank, so);
  if (!subscriber.ok()) {
    std::fprintf(stderr, "engine: %s\n", subscriber.status().to_string().c_str());
    return 2;
  }
  const auto tensors = served.published();
  for (const auto& [name, tensor] : tensors) {
    auto ref = tensor_ref_from_torch(name, tensor);
    if (!ref.ok()) return fail("cannot describe a tensor", ref.status());
    const wc::Status s = (*subscriber)->register_tensor(*ref);
    if (!s.ok()) return fail("cannot register a tensor", s);
  }
  const wc::Status connected = (*subscriber)->connect();
  if (!connected.ok()) return fail("cannot connect", connected);

  const wc::Status reached =
      (*subscriber)->wait_for_version(until, wc::deadline_after(std::chrono::seconds(timeout_s)));
  // Leaving first: no apply can change the tensors while the summary reads them.
  (*subscriber)->stop("engine done");
  if (!reached.ok()) return fail("target version not reached", reached);

  const auto held = (*subscriber)->current_version();
  std::printf("engine holds v%llu:\n", static_cast<unsigned long long>(held.value_or(0)));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i].second;
    std::printf("  %-12s %-10s sum %+.6e checksum %s\n", tensors[i].first.c_str(),
                shape_text(t).c_str(), t.to(torch::kDouble).sum().item<double>(),
                hex64((*subscriber)->checksum(i)).c_str());
  }
  std::printf("v%llu: digest %s\n", static_cast<unsigned long long>(held.value_or(0)),
              hex64(weights_digest(served)).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "weightcast_torch_engine: holds the tiny libtorch model's bf16 weights and receives "
      "every version through the weightcast Subscriber"};
  std::string config_path;
  // Signed, so that CLI::Range refuses "-1" (CLI11 reads unsigned flags with strtoull).
  int64_t rank = 2;
  int64_t until = 0;
  int64_t timeout_s = 120;
  int64_t threads = 1;
  bool verbose = false;
  app.add_option("--config", config_path, "Group config (YAML; see docs/CONFIG.md)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--rank", rank, "This subscriber's rank in the config")
      ->required()
      ->check(CLI::Range(int64_t{0}, int64_t{std::numeric_limits<uint32_t>::max()}));
  app.add_option("--until-version", until, "Exit once this version is held")
      ->required()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  app.add_option("--timeout-s", timeout_s, "Give up (exit 1) after this many seconds")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86'400}));
  app.add_option("--threads", threads, "Apply threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  app.add_flag("--verbose", verbose, "Print the endpoint's control log on stderr");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(config_path, static_cast<uint32_t>(rank), static_cast<uint64_t>(until), timeout_s,
               static_cast<size_t>(threads), verbose);
  } catch (const std::exception& e) {  // libtorch reports errors as c10::Error
    std::fprintf(stderr, "engine: %s\n", e.what());
    return 1;
  }
}
