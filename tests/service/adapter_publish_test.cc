// Adapter publication and loading: the representation rule, exact values, independent
// storages after load, stale-format removal, and crash safety under SIGKILL.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "codec/workload/adapter_fixtures.h"
#include "src/adapter_load.h"
#include "src/adapter_publish.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;

GlmAdapterOptions small_glm() {
  GlmAdapterOptions o;
  o.layers = 2;
  o.experts = 16;
  o.hidden = 64;
  o.moe_intermediate = 32;
  o.rank = 8;
  return o;
}

Qwen3AdapterOptions small_dense() {
  Qwen3AdapterOptions o;
  o.layers = 2;
  o.hidden = 64;
  o.intermediate = 96;
  o.rank = 8;
  return o;
}

class AdapterPublishTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weightcast_adapter_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every key loads with its exact dtype, shape and bytes.
  static void expect_same(const AdapterFixture& f, const LoadedAdapter& a) {
    ASSERT_EQ(a.tensors.size(), f.tensors.size());
    for (size_t i = 0; i < f.tensors.size(); ++i) {
      const auto& want = f.tensors[i];
      const auto* got = &a.tensors[i];
      if (got->name != want.name) {
        auto it = std::find_if(a.tensors.begin(), a.tensors.end(),
                               [&](const LoadedTensor& t) { return t.name == want.name; });
        ASSERT_NE(it, a.tensors.end()) << want.name;
        got = &*it;
      }
      EXPECT_EQ(got->dtype, want.dtype) << want.name;
      EXPECT_EQ(got->shape, want.shape) << want.name;
      ASSERT_EQ(got->bytes.size(), want.bytes.size()) << want.name;
      ASSERT_EQ(std::memcmp(got->bytes.data(), want.bytes.data(), want.bytes.size()), 0)
          << want.name;
    }
  }

  fs::path dir_;
};

TEST_F(AdapterPublishTest, SharedExpertAdapterIsCompactAndExact) {
  const AdapterFixture f = make_glm_shared_expert_adapter(small_glm());
  auto pub = publish_adapter(dir_.string(), f.tensors, f.adapter_config_json);
  ASSERT_TRUE(pub.ok()) << pub.status().to_string();
  EXPECT_EQ(pub->format, AdapterFormat::kTorchCompact);
  EXPECT_TRUE(fs::exists(dir_ / kAdapterBinFile));
  EXPECT_FALSE(fs::exists(dir_ / kAdapterSafetensorsFile));
  EXPECT_EQ(pub->stats.unique_storages, f.storages.size());
  EXPECT_LE(pub->file_bytes, pub->stats.unique_bytes + pub->stats.unique_bytes / 100 + 65536);
  auto loaded = load_adapter(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->format, AdapterFormat::kTorchCompact);
  EXPECT_EQ(loaded->file_storages, f.storages.size());
  EXPECT_EQ(loaded->config_json, f.adapter_config_json);
  expect_same(f, *loaded);
}

TEST_F(AdapterPublishTest, DenseAdapterStaysSafetensors) {
  const AdapterFixture f = make_qwen3_dense_adapter(small_dense());
  auto pub = publish_adapter(dir_.string(), f.tensors, f.adapter_config_json);
  ASSERT_TRUE(pub.ok()) << pub.status().to_string();
  EXPECT_EQ(pub->format, AdapterFormat::kSafetensors);
  auto loaded = load_adapter(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_same(f, *loaded);
}

TEST_F(AdapterPublishTest, LoadedAliasesAreIndependentStorages) {
  const AdapterFixture f = make_glm_shared_expert_adapter(small_glm());
  ASSERT_TRUE(publish_adapter(dir_.string(), f.tensors, f.adapter_config_json).ok());
  auto loaded = load_adapter(dir_.string());
  ASSERT_TRUE(loaded.ok());
  // Two experts' lora_B of the same projection share one storage in the file.
  auto find = [&](const std::string& name) -> LoadedTensor& {
    for (auto& t : loaded->tensors)
      if (t.name == name) return t;
    throw std::runtime_error("missing " + name);
  };
  LoadedTensor& b0 = find("base_model.model.model.layers.0.mlp.experts.0.up_proj.lora_B.weight");
  LoadedTensor& b1 = find("base_model.model.model.layers.0.mlp.experts.1.up_proj.lora_B.weight");
  ASSERT_EQ(b0.bytes, b1.bytes);
  const auto before = b1.bytes;
  float* p = reinterpret_cast<float*>(b0.bytes.data());  // an engine scaling LoRA B in place
  for (size_t i = 0; i < b0.bytes.size() / 4; ++i) p[i] *= 2.0f;
  EXPECT_EQ(b1.bytes, before);
}

TEST_F(AdapterPublishTest, Bf16ConversionRoundsEachKey) {
  const AdapterFixture f = make_qwen3_dense_adapter(small_dense());
  ASSERT_TRUE(publish_adapter(dir_.string(), f.tensors, f.adapter_config_json).ok());
  auto loaded = load_adapter(dir_.string(), {.to_bf16 = true});
  ASSERT_TRUE(loaded.ok());
  auto it = std::find_if(loaded->tensors.begin(), loaded->tensors.end(),
                         [&](const LoadedTensor& x) { return x.name == f.tensors[0].name; });
  ASSERT_NE(it, loaded->tensors.end());
  const LoadedTensor& t = *it;
  EXPECT_EQ(t.dtype, DType::kBF16);
  ASSERT_EQ(t.bytes.size() * 2, f.tensors[0].bytes.size());
  uint16_t first;
  std::memcpy(&first, t.bytes.data(), 2);
  EXPECT_EQ(first, 0x8000);  // the fixture's -0.0 keeps its sign
}

TEST_F(AdapterPublishTest, FormatChangesRemoveTheStaleFile) {
  const AdapterFixture shared = make_glm_shared_expert_adapter(small_glm());
  const AdapterFixture dense = make_qwen3_dense_adapter(small_dense());
  ASSERT_TRUE(publish_adapter(dir_.string(), shared.tensors, shared.adapter_config_json).ok());
  EXPECT_TRUE(fs::exists(dir_ / kAdapterBinFile));
  ASSERT_TRUE(publish_adapter(dir_.string(), dense.tensors, dense.adapter_config_json).ok());
  EXPECT_FALSE(fs::exists(dir_ / kAdapterBinFile));
  EXPECT_TRUE(fs::exists(dir_ / kAdapterSafetensorsFile));
  ASSERT_TRUE(publish_adapter(dir_.string(), shared.tensors, shared.adapter_config_json).ok());
  EXPECT_TRUE(fs::exists(dir_ / kAdapterBinFile));
  EXPECT_FALSE(fs::exists(dir_ / kAdapterSafetensorsFile));
  auto loaded = load_adapter(dir_.string());
  ASSERT_TRUE(loaded.ok());
  expect_same(shared, *loaded);
}

TEST_F(AdapterPublishTest, BadInputIsRefusedWithNames) {
  AdapterFixture f = make_qwen3_dense_adapter(small_dense());
  f.tensors[1].name = f.tensors[0].name;
  auto dup = publish_adapter(dir_.string(), f.tensors, f.adapter_config_json);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find(f.tensors[0].name), std::string::npos);
  auto bad_config = publish_adapter(dir_.string(), {}, "{not json");
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.status().message().find("JSON"), std::string::npos);
  auto missing = load_adapter((dir_ / "nothing").string());
  EXPECT_FALSE(missing.ok());
}

// A publication killed at random instants leaves a directory that loads as the old adapter
// or the new one. Old and new alternate between the two formats, so the interesting window
// (both files present, marker deciding) is crossed too.
TEST_F(AdapterPublishTest, KilledPublicationLeavesOldOrNew) {
  const AdapterFixture shared = make_glm_shared_expert_adapter(small_glm());
  Qwen3AdapterOptions big = small_dense();
  big.layers = 6;
  big.hidden = 256;
  big.intermediate = 512;
  AdapterFixture dense = make_qwen3_dense_adapter(big);
  // RL steps republish the same LoRA config; the model file is what changes (DECISIONS.md).
  dense.adapter_config_json = shared.adapter_config_json;
  const AdapterFixture* versions[2] = {&shared, &dense};
  ASSERT_TRUE(publish_adapter(dir_.string(), shared.tensors, shared.adapter_config_json).ok());
  // How long one publication takes, to spread the kill instants over it.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(publish_adapter(dir_.string(), shared.tensors, shared.adapter_config_json).ok());
  // A forked child also pays for fork and copy-on-write faults, so instants run well past one
  // publication: late kills must let some publications finish.
  auto span_us = std::max<int64_t>(500, 4 * std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::steady_clock::now() - t0)
                                                .count());
  std::mt19937 rng(11);
  int current = 0, saw_old = 0, saw_new = 0, saw_both_files = 0;
  // At least kTrials kills; more (up to kMaxTrials) until both outcomes were seen, the span
  // doubling every 20 kills that finished none: on a loaded machine a child's publication can
  // take many times the parent's measured one.
  constexpr int kTrials = 60, kMaxTrials = 300;
  for (int trial = 0; trial < kMaxTrials && (trial < kTrials || saw_old == 0 || saw_new == 0);
       ++trial) {
    if (trial > 0 && trial % 20 == 0 && saw_new == 0) span_us *= 2;
    const int next = 1 - current;
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const auto& v = *versions[next];
      auto r = publish_adapter(dir_.string(), v.tensors, v.adapter_config_json);
      _exit(r.ok() ? 0 : 3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % span_us));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    saw_both_files +=
        fs::exists(dir_ / kAdapterBinFile) && fs::exists(dir_ / kAdapterSafetensorsFile);
    auto loaded = load_adapter(dir_.string());
    ASSERT_TRUE(loaded.ok()) << "trial " << trial << ": " << loaded.status().to_string();
    const bool is_new = loaded->tensors.size() == versions[next]->tensors.size();
    expect_same(*versions[is_new ? next : current], *loaded);
    EXPECT_EQ(loaded->config_json, shared.adapter_config_json);
    if (::testing::Test::HasFatalFailure()) return;
    if (is_new) {
      ++saw_new;
      current = next;
    } else {
      ++saw_old;
    }
  }
  std::printf(
      "killed publications: %d left the old adapter, %d the new one, %d both files (the "
      "marker decided); kill instants spread over %lld us\n",
      saw_old, saw_new, saw_both_files, static_cast<long long>(span_us));
  EXPECT_GT(saw_old, 0);
  EXPECT_GT(saw_new, 0);
}

}  // namespace
}  // namespace weightcast
