// The group config's `nccl:` section (src/control/group_config_nccl.h): defaults, values, and
// one test per malformed case.
#include <gtest/gtest.h>

#include "src/control/group_config_nccl.h"
#include "tests/control/group_config_test_util.h"

namespace weightcast {
namespace {

using group_config_test::kMinimal;

Result<proto::GroupConfig> parse_text(const std::string& text) {
  return parse_group_config(text, "test.yaml", "/base");
}

void expect_refused(const std::string& section, const std::string& needle) {
  auto r = parse_text(kMinimal + section);
  ASSERT_FALSE(r.ok()) << "accepted: " << section;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("test.yaml"), std::string::npos);
}

TEST(GroupConfigNccl, DefaultsWithoutTheSection) {
  auto r = parse_text(kMinimal);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->nccl().bucket_bytes(), kDefaultNcclBucketBytes);
  EXPECT_EQ(r->nccl().buffers(), kDefaultNcclBuffers);
  EXPECT_EQ(r->nccl().timeout_ms(), kDefaultNcclTimeoutMs);
  EXPECT_TRUE(r->nccl().env().empty());
}

TEST(GroupConfigNccl, ValuesAndEnvPassthrough) {
  auto r = parse_text(kMinimal +
                      "transports: [nccl, ucx, fs]\n"
                      "nccl:\n  bucket_bytes: 268435456\n  buffers: 3\n  timeout_ms: 5000\n"
                      "  env: {NCCL_IB_HCA: \"mlx5_0,mlx5_1\", NCCL_DEBUG: WARN}\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->transports(0), "nccl");
  EXPECT_EQ(r->nccl().bucket_bytes(), 268435456u);
  EXPECT_EQ(r->nccl().buffers(), 3u);
  EXPECT_EQ(r->nccl().timeout_ms(), 5000u);
  ASSERT_EQ(r->nccl().env().size(), 2u);
  EXPECT_EQ(r->nccl().env().at("NCCL_IB_HCA"), "mlx5_0,mlx5_1");
  EXPECT_EQ(r->nccl().env().at("NCCL_DEBUG"), "WARN");
}

TEST(GroupConfigNccl, UnknownKey) {
  expect_refused("nccl: {bucket: 4096}\n", "'bucket'");
}
TEST(GroupConfigNccl, BucketTooSmall) {
  expect_refused("nccl: {bucket_bytes: 100}\n", "bucket_bytes");
}
TEST(GroupConfigNccl, BucketTooLarge) {
  expect_refused("nccl: {bucket_bytes: 99999999999999}\n", "bucket_bytes");
}
TEST(GroupConfigNccl, ZeroBuffers) {
  expect_refused("nccl: {buffers: 0}\n", "buffers");
}
TEST(GroupConfigNccl, TooManyBuffers) {
  expect_refused("nccl: {buffers: 9}\n", "buffers");
}
TEST(GroupConfigNccl, NegativeTimeout) {
  expect_refused("nccl: {timeout_ms: -5}\n", "timeout_ms");
}
TEST(GroupConfigNccl, SectionIsAList) {
  expect_refused("nccl: [1]\n", "nccl");
}
TEST(GroupConfigNccl, EnvIsAList) {
  expect_refused("nccl: {env: [NCCL_DEBUG]}\n", "nccl.env");
}
TEST(GroupConfigNccl, EnvNameIsNotNccl) {
  expect_refused("nccl: {env: {LD_PRELOAD: /tmp/x.so}}\n", "'LD_PRELOAD'");
}
TEST(GroupConfigNccl, EnvNameLowercase) {
  expect_refused("nccl: {env: {NCCL_debug: INFO}}\n", "'NCCL_debug'");
}
TEST(GroupConfigNccl, EnvValueNotPrintable) {
  expect_refused("nccl: {env: {NCCL_DEBUG: \"a\\tb\"}}\n", "printable");
}
TEST(GroupConfigNccl, EnvValueIsAMapping) {
  expect_refused("nccl: {env: {NCCL_DEBUG: {a: b}}}\n", "nccl.env.NCCL_DEBUG");
}

}  // namespace
}  // namespace weightcast
