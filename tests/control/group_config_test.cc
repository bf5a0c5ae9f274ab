// The group config loader on valid input: a full example with every field, defaults for what
// is left out, path resolution, loading from a file, and rank/role lookups. The malformed cases
// are in group_config_malformed_test.cc.
#include "src/control/group_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/control/group_config_test_util.h"

namespace weightcast::group_config_test {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / "group_config.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(GroupConfig, FullExampleParses) {
  const std::string text = std::string(R"(group_id: demo
coordinator: {endpoint: "tcp://coord.example:5555", bind: "tcp://*:5555"}
journal: {root: /data/journal, anchor_every: 5, retain_anchors: 3}
transports: [nccl, fs]
max_in_flight: 4
timeouts: {heartbeat_ms: 100, dead_after_ms: 1000, ack_timeout_ms: 2000, lease_ttl_ms: 3000}
curve:
  enabled: true
  coordinator_public_key: )") +
                           kPub + R"(
  coordinator_key_file: /keys/coordinator.key
  authorized_keys: [)" + kPub2 +
                           R"(]
  observer_key_file: keys/observer.key
ranks:
  - {rank: 0, role: coordinator, host: coord.example, key_file: keys/r0.key, public_key: )" +
                           kPub + R"(}
  - {rank: 7, role: publisher, host: trainer, key_file: keys/r7.key, public_key: )" +
                           kPub2 +
                           R"(}
demo: {parameters: 4096, density: 0.25, versions: 3, seed: 9, step_interval_ms: 50}
)";
  auto r = parse(text);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->group_id(), "demo");
  EXPECT_EQ(r->coordinator_endpoint(), "tcp://coord.example:5555");
  EXPECT_EQ(r->coordinator_bind(), "tcp://*:5555");
  EXPECT_EQ(r->journal_root(), "/data/journal");
  EXPECT_EQ(r->anchor_every(), 5u);
  EXPECT_EQ(r->retain_anchors(), 3u);
  ASSERT_EQ(r->transports_size(), 2);
  EXPECT_EQ(r->transports(0), "nccl");
  EXPECT_EQ(r->transports(1), "fs");
  EXPECT_EQ(r->max_in_flight(), 4u);
  EXPECT_EQ(r->timeouts().heartbeat_ms(), 100u);
  EXPECT_EQ(r->timeouts().dead_after_ms(), 1000u);
  EXPECT_EQ(r->timeouts().ack_timeout_ms(), 2000u);
  EXPECT_EQ(r->timeouts().lease_ttl_ms(), 3000u);
  EXPECT_TRUE(r->curve().enabled());
  EXPECT_EQ(r->curve().coordinator_key_file(), "/keys/coordinator.key");
  EXPECT_EQ(r->curve().observer_key_file(), "/base/keys/observer.key");
  ASSERT_EQ(r->curve().authorized_keys_size(), 1);
  EXPECT_EQ(r->curve().authorized_keys(0), "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
  ASSERT_EQ(r->ranks_size(), 2);
  EXPECT_EQ(r->ranks(1).rank(), 7u);
  EXPECT_EQ(r->ranks(1).role(), proto::ROLE_PUBLISHER);
  EXPECT_EQ(r->ranks(1).host(), "trainer");
  EXPECT_EQ(r->ranks(1).key_file(), "/base/keys/r7.key");
  EXPECT_EQ(r->ranks(0).public_key(), "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID");
  ASSERT_TRUE(r->has_demo());
  EXPECT_EQ(r->demo().parameters(), 4096u);
  EXPECT_DOUBLE_EQ(r->demo().density(), 0.25);
  EXPECT_EQ(r->demo().versions(), 3u);
  EXPECT_EQ(r->demo().seed(), 9u);
  EXPECT_EQ(r->demo().step_interval_ms(), 50u);
}

TEST(GroupConfig, MinimalGetsDefaults) {
  auto r = parse(kMinimal);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->coordinator_bind(), "tcp://127.0.0.1:5555");
  EXPECT_EQ(r->anchor_every(), kDefaultAnchorEvery);
  EXPECT_EQ(r->retain_anchors(), kDefaultRetainAnchors);
  ASSERT_EQ(r->transports_size(), 1);
  EXPECT_EQ(r->transports(0), "fs");
  EXPECT_EQ(r->max_in_flight(), kDefaultMaxInFlight);
  EXPECT_EQ(r->timeouts().heartbeat_ms(), kDefaultHeartbeatMs);
  EXPECT_EQ(r->timeouts().dead_after_ms(), kDefaultDeadAfterMs);
  EXPECT_EQ(r->timeouts().ack_timeout_ms(), kDefaultAckTimeoutMs);
  EXPECT_EQ(r->timeouts().lease_ttl_ms(), kDefaultLeaseTtlMs);
  EXPECT_FALSE(r->curve().enabled());
  EXPECT_FALSE(r->has_demo());
  EXPECT_EQ(r->ucx().tls(), "");  // UCX chooses
  EXPECT_EQ(r->ranks(2).role(), proto::ROLE_SUBSCRIBER);
  EXPECT_EQ(r->ranks(2).host(), "");
}

TEST(GroupConfig, UcxTransportAndTls) {
  auto r = parse(kMinimal + "transports: [ucx, fs]\nucx: {tls: \"^cuda_ipc,shm,tcp\"}\n");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->transports_size(), 2);
  EXPECT_EQ(r->transports(0), "ucx");
  EXPECT_EQ(r->ucx().tls(), "^cuda_ipc,shm,tcp");
  EXPECT_EQ(r->ucx().publisher_memory(), "auto");
}

TEST(GroupConfig, UcxPublisherMemory) {
  for (const std::string m : {"auto", "in_place", "copy"}) {
    auto r = parse(kMinimal + "transports: [ucx, fs]\nucx: {publisher_memory: " + m + "}\n");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->ucx().publisher_memory(), m);
    EXPECT_EQ(r->ucx().tls(), "");
  }
}

// `fp8`: present means an FP8 group, with the default selection unless `quantize` names one.
TEST(GroupConfig, Fp8Section) {
  auto none = parse(kMinimal);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->fp8().enabled());
  auto defaults = parse(kMinimal + "fp8: {}\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_TRUE(defaults->fp8().enabled());
  EXPECT_EQ(defaults->fp8().quantize_size(), 0);
  auto chosen = parse(kMinimal + R"(fp8: {quantize: ['.*\.(q|k|v|o)_proj\.weight$', 'x'] })"
                                 "\n");
  ASSERT_TRUE(chosen.ok()) << chosen.status().to_string();
  ASSERT_EQ(chosen->fp8().quantize_size(), 2);
  EXPECT_EQ(chosen->fp8().quantize(0), R"(.*\.(q|k|v|o)_proj\.weight$)");
  auto off = parse(kMinimal + "fp8: {enabled: false, quantize: [x]}\n");
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_FALSE(off->fp8().enabled());
}

TEST(GroupConfig, DemoDefaultsAndCurveEnabledByDefault) {
  auto r = parse(curve_config() + "demo: {seed: 4}\n");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->curve().enabled());
  EXPECT_EQ(r->demo().parameters(), 268435456u);
  EXPECT_DOUBLE_EQ(r->demo().density(), 0.01);
  EXPECT_EQ(r->demo().versions(), 20u);
  EXPECT_EQ(r->demo().seed(), 4u);
  EXPECT_EQ(r->demo().step_interval_ms(), 0u);
}

TEST(GroupConfig, RelativePathsResolveAgainstBaseDir) {
  auto r = parse_group_config(curve_config(), "c.yaml", "/etc/wc", {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->journal_root(), "/etc/wc/journal");
  EXPECT_EQ(r->curve().coordinator_key_file(), "/etc/wc/keys/coordinator.key");
  EXPECT_EQ(r->ranks(0).key_file(), "/etc/wc/keys/rank0.key");
  auto as_written = parse_group_config(curve_config(), "c.yaml", "", {});
  ASSERT_TRUE(as_written.ok()) << as_written.status().to_string();
  EXPECT_EQ(as_written->journal_root(), "journal");
  EXPECT_EQ(as_written->ranks(1).key_file(), "keys/rank1.key");
}

TEST(GroupConfig, CurveDisabledNeedsNoKeys) {
  auto r = parse(with(kMinimal, "ranks:", "curve: {enabled: false}\nranks:"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->curve().enabled());
}

TEST(GroupConfig, LoadResolvesAgainstTheFilesDirectory) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/group.yaml";
  std::ofstream(path) << kMinimal;
  auto r = load_group_config(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->journal_root(), dir.path() + "/journal");
}

TEST(GroupConfig, LoadMissingFileNamesThePath) {
  TempDir dir;
  const std::string path = dir.path() + "/absent.yaml";
  auto r = load_group_config(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
}

TEST(GroupConfig, LoadErrorsNameTheFile) {
  TempDir dir;
  const std::string path = dir.path() + "/bad.yaml";
  std::ofstream(path) << with(kMinimal, "role: subscriber", "role: watcher");
  auto r = load_group_config(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path + ": ranks[2].role"), std::string::npos)
      << r.status().message();
}

TEST(GroupConfig, FindRankAndRoleName) {
  auto r = parse(kMinimal);
  ASSERT_TRUE(r.ok());
  auto one = find_rank(*r, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->role(), proto::ROLE_PUBLISHER);
  auto nine = find_rank(*r, 9);
  ASSERT_FALSE(nine.ok());
  EXPECT_EQ(nine.status().code(), StatusCode::kNotFound);
  EXPECT_NE(nine.status().message().find("rank 9"), std::string::npos);
  EXPECT_NE(nine.status().message().find("0, 1, 2"), std::string::npos);
  EXPECT_EQ(role_name(proto::ROLE_COORDINATOR), "coordinator");
  EXPECT_EQ(role_name(proto::ROLE_PUBLISHER), "publisher");
  EXPECT_EQ(role_name(proto::ROLE_SUBSCRIBER), "subscriber");
  EXPECT_EQ(role_name(proto::ROLE_OBSERVER), "observer");
  EXPECT_EQ(role_name(proto::ROLE_UNSPECIFIED), "unspecified");
}

// ucx.publisher_memory: explicit choices as written; auto copies unless the host has RDMA
// devices (which this test reads the same way, from /sys/class/infiniband).
TEST(UcxLivePublisherMemory, ExplicitChoicesAndAuto) {
  EXPECT_TRUE(ucx_live_serves_copies("copy"));
  EXPECT_FALSE(ucx_live_serves_copies("in_place"));
  std::error_code ec;
  const bool rdma = std::filesystem::is_directory("/sys/class/infiniband", ec) &&
                    std::filesystem::directory_iterator("/sys/class/infiniband", ec) !=
                        std::filesystem::directory_iterator();
  EXPECT_EQ(ucx_live_serves_copies("auto"), !rdma);
  EXPECT_EQ(ucx_live_serves_copies(""), !rdma);
}

// publisher.snapshot: host by default, device when asked; anything else is refused by name.
TEST(GroupConfig, PublisherSnapshotMemory) {
  auto absent = parse(kMinimal);
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent->publisher().snapshot(), "");
  for (const std::string where : {"host", "device"}) {
    auto r = parse(kMinimal + "publisher: {snapshot: " + where + "}\n");
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->publisher().snapshot(), where);
  }
  auto bad = parse(kMinimal + "publisher: {snapshot: gpu}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("publisher.snapshot"), std::string::npos)
      << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("'gpu'"), std::string::npos) << bad.status().to_string();
  EXPECT_FALSE(parse(kMinimal + "publisher: {snapshots: host}\n").ok());
}

}  // namespace
}  // namespace weightcast::group_config_test
