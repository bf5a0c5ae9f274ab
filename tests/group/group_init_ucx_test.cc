// `weightcast group init` (src/control/group_init.h) writes the ucx section it is given, and
// the config it writes parses back to those values.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "src/control/group_config.h"
#include "src/control/group_init.h"

namespace weightcast {
namespace {

class GroupInitUcx : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-group-init-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  proto::GroupConfig init(const GroupInitOptions& base) {
    GroupInitOptions o = base;
    o.dir = dir_;
    o.curve = false;
    o.overwrite = true;
    auto r = init_group(o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    auto cfg = load_group_config(r->config_path);
    EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
    return cfg.ok() ? *cfg : proto::GroupConfig();
  }
  std::string dir_;
};

TEST_F(GroupInitUcx, WritesTlsAndPublisherMemory) {
  GroupInitOptions o;
  o.ucx_tls = "shm,tcp";
  o.ucx_publisher_memory = "in_place";
  const proto::GroupConfig cfg = init(o);
  EXPECT_EQ(cfg.ucx().tls(), "shm,tcp");
  EXPECT_EQ(cfg.ucx().publisher_memory(), "in_place");
}

TEST_F(GroupInitUcx, PublisherMemoryAlone) {
  GroupInitOptions o;
  o.ucx_publisher_memory = "copy";
  const proto::GroupConfig cfg = init(o);
  EXPECT_EQ(cfg.ucx().tls(), "");
  EXPECT_EQ(cfg.ucx().publisher_memory(), "copy");
}

TEST_F(GroupInitUcx, NoUcxSectionByDefault) {
  const proto::GroupConfig cfg = init(GroupInitOptions{});
  EXPECT_FALSE(cfg.has_ucx());
}

}  // namespace
}  // namespace weightcast
