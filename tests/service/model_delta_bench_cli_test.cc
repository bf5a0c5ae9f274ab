// `weightcast bench model-delta` as a user runs it: help, a small-scale run whose JSON is
// consistent with the model's shape list, and the errors a user meets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "codec/workload/model_shapes.h"
#include "tests/service/run_command.h"

namespace weightcast {
namespace {

using testing::run_cli;

// The JSON object a run printed on stdout; progress lines on stderr come first in `output`.
nlohmann::json parse_json(const std::string& output) {
  const size_t at = output.find('{');
  if (at == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(output.substr(at), nullptr, /*allow_exceptions=*/false);
}

TEST(ModelDeltaBenchCli, HasHelp) {
  auto r = run_cli("bench model-delta --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* option :
       {"Usage", "--family", "--scale", "--density", "--threads", "--seed", "--json"}) {
    EXPECT_NE(r.output.find(option), std::string::npos) << option << "\n" << r.output;
  }
}

TEST(ModelDeltaBenchCli, SmallQwenRunIsConsistent) {
  auto r = run_cli(
      "bench model-delta --scale 0.01 --density 0.01 --threads 2 --verify-every 50 "
      "--json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;

  const auto specs = model_layer_list(ModelFamily::kQwen3_30B_A3B, 0.01);
  EXPECT_EQ(j["family"], "qwen3-30b-a3b");
  EXPECT_EQ(j["tensors"].get<uint64_t>(), specs.size());
  EXPECT_EQ(j["elements"].get<uint64_t>(), total_elements(specs));
  EXPECT_EQ(j["raw_bf16_bytes"].get<uint64_t>(), 2 * j["elements"].get<uint64_t>());
  const uint64_t delta = j["delta_bytes"].get<uint64_t>();
  EXPECT_GT(delta, 0u);
  const double ratio = j["ratio"].get<double>();
  EXPECT_GT(ratio, 0.001) << r.output;
  EXPECT_LT(ratio, 0.2) << r.output;
  EXPECT_NEAR(ratio, static_cast<double>(delta) / j["raw_bf16_bytes"].get<double>(), 1e-12);
  // Calibration holds the measured density near the target (sampling noise on small tensors).
  EXPECT_NEAR(j["measured_density"].get<double>(), 0.01, 0.002) << r.output;
  EXPECT_LE(j["records"].get<uint64_t>(), specs.size());
  EXPECT_GE(j["verified_tensors"].get<uint64_t>(), specs.size() / 50);
  // Journal parts add one 16-byte header each; NCCL carries exactly those parts.
  EXPECT_EQ(j["journal_delta_bytes"].get<uint64_t>(),
            delta + 16 * j["journal_parts"].get<uint64_t>());
  EXPECT_EQ(j["nccl_broadcast_bytes"], j["journal_delta_bytes"]);
  EXPECT_EQ(j["nccl_bucket_bytes"].get<uint64_t>(), uint64_t{1} << 30);
  const uint64_t buckets = j["nccl_buckets"].get<uint64_t>();
  EXPECT_GE(buckets, 1u);
  EXPECT_EQ(buckets, (j["journal_delta_bytes"].get<uint64_t>() + (uint64_t{1} << 30) - 1) >> 30);
  EXPECT_GT(j["seconds"].get<double>(), 0.0);
}

// The synthetic update and the encoder do not depend on the thread count.
TEST(ModelDeltaBenchCli, SameSeedSameBytes) {
  auto a = run_cli("bench model-delta --scale 0.1 --threads 1 --seed 7 --json");
  auto b = run_cli("bench model-delta --scale 0.1 --threads 2 --seed 7 --json");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const nlohmann::json ja = parse_json(a.output), jb = parse_json(b.output);
  ASSERT_TRUE(ja.is_object() && jb.is_object()) << a.output << "\n" << b.output;
  EXPECT_EQ(ja["changed"], jb["changed"]);
  EXPECT_EQ(ja["delta_bytes"], jb["delta_bytes"]);
  EXPECT_GT(ja["delta_bytes"].get<uint64_t>(), 0u);
}

TEST(ModelDeltaBenchCli, RejectsBadOptions) {
  for (const char* args :
       {"--family llama", "--scale 0", "--density 0", "--density 0.95", "--threads 0"}) {
    auto r = run_cli(std::string("bench model-delta ") + args);
    EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace weightcast
