// weightcast_torch_trainer --config group.yaml --rank R --steps N [--lr X]: a trainer that
// embeds the public publisher API (<weightcast/publisher.h>, linked as weightcast::weightcast).
// A tiny torch::nn language model is trained with
// Adam on fp32 master weights; after every optimizer step the bf16 served copy (the tensors
// registered with the Publisher, incl. the strided q/k/v views of the packed projection) is
// refreshed and published as the next version.
//
// Versions: the initial weights, then one per step, numbered on from the journal's head
// (0 .. N on an empty journal). One line per version on stdout; at the end the last version
// is waited for until the group committed it, and its digest printed (the engine prints the
// same digest for the same weights). Exit status: 0 done, 1 failure, 2 bad command line.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <string>

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <weightcast/weightcast.h>

#include "examples/torch_example_model.h"
#include "examples/torch_tensor_ref.h"

namespace {

namespace wc = weightcast::api;
using namespace weightcast::examples;

// The fp32 master model: an embedding, a single-head causal attention with a packed qkv
// projection, and an output layer.
struct TinyLmImpl : torch::nn::Module {
  explicit TinyLmImpl(const ModelShape& s)
      : shape(s),
        embed(register_module("embed", torch::nn::Embedding(s.vocab, s.dim))),
        qkv(register_module(
            "qkv", torch::nn::Linear(torch::nn::LinearOptions(s.dim, 3 * s.dim).bias(false)))),
        out(register_module("out", torch::nn::Linear(s.dim, s.vocab))) {}

  // tokens [batch, time] -> logits [batch, time, vocab]
  torch::Tensor forward(const torch::Tensor& tokens) {
    const torch::Tensor x = embed->forward(tokens);
    const auto parts = qkv->forward(x).chunk(3, -1);
    const int64_t t = tokens.size(1);
    torch::Tensor scores = torch::matmul(parts[0], parts[1].transpose(-2, -1)) /
                           std::sqrt(static_cast<double>(shape.dim));
    const torch::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);
    scores = scores.masked_fill(future, -1e9);
    return out->forward(x + torch::matmul(torch::softmax(scores, -1), parts[2]));
  }

  // The served bf16 copy of the master weights (what the engine runs with).
  void copy_to(ServedWeights& w) {
    torch::NoGradGuard no_grad;
    w.embed.copy_(embed->weight);
    w.qkv_packed.copy_(qkv->weight.t());  // [3d, d] -> input-major [d, 3d]
    w.out.copy_(out->weight);
    w.out_bias.copy_(out->bias);
  }

  ModelShape shape;
  torch::nn::Embedding embed;
  torch::nn::Linear qkv;
  torch::nn::Linear out;
};
TORCH_MODULE(TinyLm);

// A synthetic task: predict (3 * token + 1) mod vocab for every position.
torch::Tensor train_step(TinyLm& model, torch::optim::Optimizer& opt, int64_t vocab) {
  const torch::Tensor tokens = torch::randint(vocab, {16, 32}, torch::kLong);
  const torch::Tensor target = (tokens * 3 + 1) % vocab;
  opt.zero_grad();
  const torch::Tensor logits = model->forward(tokens);
  torch::Tensor loss =
      torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}), target.reshape({-1}));
  loss.backward();
  opt.step();
  return loss.detach();
}

int run(const std::string& config_path, uint32_t rank, uint64_t steps, double lr, int64_t timeout_s,
        size_t threads, bool verbose) {
  const auto timeout = std::chrono::seconds(timeout_s);
  auto fail = [](const char* what, const wc::Status& s) {
    std::fprintf(stderr, "trainer: %s: %s\n", what, s.to_string().c_str());
    return 1;
  };

  torch::manual_seed(1);
  const ModelShape shape;
  TinyLm model(shape);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(lr));
  ServedWeights served = make_served_weights(shape);
  model->copy_to(served);

  wc::PublisherOptions po;
  po.threads = threads;
  if (verbose)
    po.log = [](const std::string& line) { std::fprintf(stderr, "[trainer] %s\n", line.c_str()); };
  // The config is read here: a bad file or a rank that is not a publisher is a bad command
  // line (exit 2).
  auto publisher = wc::Publisher::start(config_path, rank, po);
  if (!publisher.ok()) {
    std::fprintf(stderr, "trainer: %s\n", publisher.status().to_string().c_str());
    return 2;
  }
  // Registered once: the endpoint reads these tensors (the bf16 copies, not the fp32
  // masters) at every publication.
  for (const auto& [name, tensor] : served.published()) {
    auto ref = tensor_ref_from_torch(name, tensor);
    if (!ref.ok()) return fail("cannot describe a tensor", ref.status());
    const wc::Status s = (*publisher)->register_tensor(*ref);
    if (!s.ok()) return fail("cannot register a tensor", s);
  }

  const uint64_t first = (*publisher)->head() ? *(*publisher)->head() + 1 : 0;
  auto published = (*publisher)->publish(first);
  if (!published.ok()) return fail("cannot publish the initial weights", published.status());
  wc::PublishHandle last = *published;
  std::printf("v%llu: initial weights published\n", static_cast<unsigned long long>(first));
  std::fflush(stdout);

  for (uint64_t step = 1; step <= steps; ++step) {
    // The optimizer changes only the fp32 masters, so it overlaps the publisher's read of
    // the previous version; the bf16 copies change only after that read finished.
    const double loss = train_step(model, opt, shape.vocab).item<double>();
    const wc::Status read = last.wait_for_reads(wc::deadline_after(timeout));
    if (!read.ok()) return fail("the previous version was not read", read);
    model->copy_to(served);
    const uint64_t v = first + step;
    auto h = (*publisher)->publish(v);
    if (!h.ok()) return fail("cannot publish", h.status());
    last = *h;
    std::printf("v%llu: step %llu loss %.4f published\n", static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(step), loss);
    std::fflush(stdout);
  }

  const wc::Status committed = last.wait_committed(wc::deadline_after(timeout));
  if (!committed.ok()) return fail("the last version was not committed", committed);
  std::printf("v%llu: committed by the group; digest %s\n",
              static_cast<unsigned long long>(last.version()),
              hex64(weights_digest(served)).c_str());
  (*publisher)->stop("trainer done");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "weightcast_torch_trainer: trains a tiny libtorch model and publishes its bf16 weights "
      "after every optimizer step through the weightcast Publisher"};
  std::string config_path;
  // Signed, so that CLI::Range refuses "-1" (CLI11 reads unsigned flags with strtoull).
  int64_t rank = 1;
  int64_t steps = 10;
  double lr = 1e-2;
  int64_t timeout_s = 120;
  int64_t threads = 1;
  bool verbose = false;
  app.add_option("--config", config_path, "Group config (YAML; see docs/CONFIG.md)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--rank", rank, "This publisher's rank in the config")
      ->required()
      ->check(CLI::Range(int64_t{0}, int64_t{std::numeric_limits<uint32_t>::max()}));
  app.add_option("--steps", steps, "Optimizer steps (one version each)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  app.add_option("--lr", lr, "Adam learning rate")
      ->capture_default_str()
      ->check(CLI::Range(1e-12, 1.0));
  app.add_option("--timeout-s", timeout_s, "Bound of every wait on the group")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86'400}));
  app.add_option("--threads", threads, "Publisher threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  app.add_flag("--verbose", verbose, "Print the endpoint's control log on stderr");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(config_path, static_cast<uint32_t>(rank), static_cast<uint64_t>(steps), lr,
               timeout_s, static_cast<size_t>(threads), verbose);
  } catch (const std::exception& e) {  // libtorch reports errors as c10::Error
    std::fprintf(stderr, "trainer: %s\n", e.what());
    return 1;
  }
}
