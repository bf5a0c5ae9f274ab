// The group config loader: a full example with every field, defaults for what is left out,
// path resolution, and one test per malformed case, each checking that the error names the
// source, the field and the offending value.
#include "src/control/group_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace weightcast {
namespace {

// A valid pair from ZeroMQ's CURVE specification (RFC 26): quoted, since Z85 uses YAML syntax.
constexpr char kPub[] = "'Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID'";
constexpr char kPub2[] = "'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7'";

const std::string kMinimal = R"(group_id: demo
coordinator:
  endpoint: tcp://127.0.0.1:5555
journal:
  root: journal
ranks:
  - {rank: 0, role: coordinator, host: 127.0.0.1}
  - {rank: 1, role: publisher, host: 127.0.0.1}
  - {rank: 2, role: subscriber}
)";

std::string curve_config() {
  return std::string(R"(group_id: secure.group-1
coordinator:
  endpoint: tcp://127.0.0.1:5555
journal:
  root: journal
curve:
  coordinator_public_key: )") +
         kPub + R"(
  coordinator_key_file: keys/coordinator.key
ranks:
  - {rank: 0, role: coordinator, key_file: keys/rank0.key, public_key: )" +
         kPub + R"(}
  - {rank: 1, role: publisher, key_file: keys/rank1.key, public_key: )" +
         kPub2 + R"(}
)";
}

// `text` with its one occurrence of `from` replaced by `to` (fails the test if absent).
std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the config";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

Result<proto::GroupConfig> parse(const std::string& text, const GroupConfigLimits& limits = {}) {
  return parse_group_config(text, "test.yaml", "/base", limits);
}

// Parsing fails with `code` and a message naming the source and containing every needle.
::testing::AssertionResult rejects(const std::string& text, std::vector<std::string> needles,
                                   StatusCode code = StatusCode::kInvalidArgument,
                                   const GroupConfigLimits& limits = {}) {
  auto r = parse(text, limits);
  if (r.ok()) return ::testing::AssertionFailure() << "accepted:\n" << text;
  const std::string& msg = r.status().message();
  if (r.status().code() != code) {
    return ::testing::AssertionFailure() << "wrong code: " << r.status().to_string();
  }
  needles.push_back("test.yaml");
  for (const auto& n : needles) {
    if (msg.find(n) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << n << "' not in: " << msg;
    }
  }
  return ::testing::AssertionSuccess();
}

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
  EXPECT_EQ(r->ranks(2).role(), proto::ROLE_SUBSCRIBER);
  EXPECT_EQ(r->ranks(2).host(), "");
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

// --- Malformed: structure and types.
TEST(GroupConfigMalformed, EmptyDocument) {
  EXPECT_TRUE(rejects("", {"top level", "mapping"}));
}
TEST(GroupConfigMalformed, TopLevelIsAList) {
  EXPECT_TRUE(rejects("[1, 2]", {"top level", "a sequence"}));
}
TEST(GroupConfigMalformed, YamlSyntaxError) {
  EXPECT_TRUE(rejects(with(kMinimal, "journal:\n", "journal: [\n"), {"line"}));
}
TEST(GroupConfigMalformed, UnknownTopLevelKey) {
  EXPECT_TRUE(rejects(kMinimal + "max_inflight: 3\n", {"top level", "'max_inflight'"}));
}
TEST(GroupConfigMalformed, UnknownNestedKey) {
  EXPECT_TRUE(rejects(with(kMinimal, "  endpoint:", "  endpont:"), {"coordinator", "'endpont'"}));
}
TEST(GroupConfigMalformed, UnknownRankKey) {
  EXPECT_TRUE(rejects(with(kMinimal, "role: subscriber", "role: subscriber, hots: x"),
                      {"ranks[2]", "'hots'"}));
}
TEST(GroupConfigMalformed, DuplicateKey) {
  EXPECT_TRUE(rejects(kMinimal + "group_id: other\n", {"group_id", "duplicate"}));
}
TEST(GroupConfigMalformed, SectionIsNull) {
  EXPECT_TRUE(rejects(with(kMinimal, "  root: journal\n", ""), {"journal", "null"}));
}
TEST(GroupConfigMalformed, IntegerIsAList) {
  EXPECT_TRUE(rejects(kMinimal + "max_in_flight: [2]\n", {"max_in_flight", "a sequence"}));
}
TEST(GroupConfigMalformed, IntegerIsAWord) {
  EXPECT_TRUE(rejects(kMinimal + "max_in_flight: two\n", {"max_in_flight", "'two'"}));
}
TEST(GroupConfigMalformed, IntegerIsFractional) {
  EXPECT_TRUE(rejects(kMinimal + "max_in_flight: 1.5\n", {"max_in_flight", "'1.5'"}));
}
// --- Group id and coordinator.
TEST(GroupConfigMalformed, MissingGroupId) {
  EXPECT_TRUE(rejects(with(kMinimal, "group_id: demo\n", ""), {"group_id", "missing"}));
}
TEST(GroupConfigMalformed, BadGroupId) {
  EXPECT_TRUE(
      rejects(with(kMinimal, "group_id: demo", "group_id: demo/x"), {"group_id", "demo/x"}));
}
TEST(GroupConfigMalformed, MissingCoordinator) {
  EXPECT_TRUE(rejects(with(kMinimal, "coordinator:\n  endpoint: tcp://127.0.0.1:5555\n", ""),
                      {"coordinator", "missing"}));
}
TEST(GroupConfigMalformed, EndpointScheme) {
  EXPECT_TRUE(rejects(with(kMinimal, "tcp://127.0.0.1:5555", "http://127.0.0.1:5555"),
                      {"coordinator.endpoint", "http://127.0.0.1:5555"}));
}
TEST(GroupConfigMalformed, EndpointPortOutOfRange) {
  EXPECT_TRUE(rejects(with(kMinimal, "tcp://127.0.0.1:5555", "tcp://127.0.0.1:70000"),
                      {"coordinator.endpoint", "tcp://127.0.0.1:70000"}));
}
TEST(GroupConfigMalformed, EndpointWildcardOnlyForBind) {
  EXPECT_TRUE(rejects(with(kMinimal, "tcp://127.0.0.1:5555", "tcp://*:5555"),
                      {"coordinator.endpoint", "tcp://*:5555"}));
  EXPECT_TRUE(parse(with(kMinimal, "coordinator:\n", "coordinator:\n  bind: tcp://*:1\n")).ok());
}
TEST(GroupConfigMalformed, BadBind) {
  EXPECT_TRUE(rejects(with(kMinimal, "coordinator:\n", "coordinator:\n  bind: ipc://\n"),
                      {"coordinator.bind", "ipc://"}));
}
// --- Journal, transports, flow control, timeouts.
TEST(GroupConfigMalformed, MissingJournalRoot) {
  EXPECT_TRUE(rejects(with(kMinimal, "root: journal", "anchor_every: 3"), {"journal.root"}));
}
TEST(GroupConfigMalformed, RetainAnchorsZero) {
  EXPECT_TRUE(rejects(with(kMinimal, "root: journal", "root: j\n  retain_anchors: 0"),
                      {"journal.retain_anchors", "'0'"}));
}
TEST(GroupConfigMalformed, NegativeAnchorEvery) {
  EXPECT_TRUE(rejects(with(kMinimal, "root: journal", "root: j\n  anchor_every: -1"),
                      {"journal.anchor_every", "'-1'"}));
}
TEST(GroupConfigMalformed, UnknownTransport) {
  EXPECT_TRUE(rejects(kMinimal + "transports: [fs, tcp]\n", {"transports[1]", "tcp"}));
}
TEST(GroupConfigMalformed, DuplicateTransport) {
  EXPECT_TRUE(rejects(kMinimal + "transports: [ucx, fs, ucx]\n", {"transports[2]", "ucx"}));
}
TEST(GroupConfigMalformed, EmptyTransports) {
  EXPECT_TRUE(rejects(kMinimal + "transports: []\n", {"transports", "at least one"}));
}
TEST(GroupConfigMalformed, MaxInFlightZero) {
  EXPECT_TRUE(rejects(kMinimal + "max_in_flight: 0\n", {"max_in_flight", "'0'"}));
}
TEST(GroupConfigMalformed, MaxInFlightOverflowsUint32) {
  EXPECT_TRUE(rejects(kMinimal + "max_in_flight: 4294967296\n", {"max_in_flight", "4294967296"}));
}
TEST(GroupConfigMalformed, DeadAfterNotAboveTwoHeartbeats) {
  EXPECT_TRUE(rejects(kMinimal + "timeouts: {heartbeat_ms: 500, dead_after_ms: 1000}\n",
                      {"timeouts.dead_after_ms", "1000"}));
}
TEST(GroupConfigMalformed, HeartbeatZero) {
  EXPECT_TRUE(
      rejects(kMinimal + "timeouts: {heartbeat_ms: 0}\n", {"timeouts.heartbeat_ms", "'0'"}));
}
TEST(GroupConfigMalformed, UnknownTimeout) {
  EXPECT_TRUE(rejects(kMinimal + "timeouts: {heartbeat: 5}\n", {"timeouts", "'heartbeat'"}));
}
// --- Ranks.
TEST(GroupConfigMalformed, MissingRanks) {
  EXPECT_TRUE(rejects(kMinimal.substr(0, kMinimal.find("ranks:")), {"ranks", "missing"}));
}
TEST(GroupConfigMalformed, EmptyRanks) {
  EXPECT_TRUE(rejects(kMinimal.substr(0, kMinimal.find("ranks:")) + "ranks: []\n",
                      {"ranks", "at least one"}));
}
TEST(GroupConfigMalformed, RanksIsAMapping) {
  EXPECT_TRUE(rejects(kMinimal.substr(0, kMinimal.find("ranks:")) + "ranks: {rank: 0}\n",
                      {"ranks", "a mapping"}));
}
TEST(GroupConfigMalformed, DuplicateRank) {
  EXPECT_TRUE(rejects(with(kMinimal, "rank: 2", "rank: 1"), {"ranks[2].rank", "1"}));
}
TEST(GroupConfigMalformed, NegativeRank) {
  EXPECT_TRUE(rejects(with(kMinimal, "rank: 2", "rank: -2"), {"ranks[2].rank", "'-2'"}));
}
TEST(GroupConfigMalformed, RankOverflowsUint32) {
  EXPECT_TRUE(
      rejects(with(kMinimal, "rank: 2", "rank: 4294967296"), {"ranks[2].rank", "4294967296"}));
}
TEST(GroupConfigMalformed, MissingRole) {
  EXPECT_TRUE(rejects(with(kMinimal, ", role: subscriber", ""), {"ranks[2].role", "missing"}));
}
TEST(GroupConfigMalformed, UnknownRole) {
  EXPECT_TRUE(
      rejects(with(kMinimal, "role: subscriber", "role: trainer"), {"ranks[2].role", "'trainer'"}));
}
TEST(GroupConfigMalformed, ObserverIsNotARankRole) {
  EXPECT_TRUE(rejects(with(kMinimal, "role: subscriber", "role: observer"),
                      {"ranks[2].role", "'observer'"}));
}
TEST(GroupConfigMalformed, NoCoordinator) {
  EXPECT_TRUE(rejects(with(kMinimal, "role: coordinator", "role: subscriber"),
                      {"ranks", "exactly one coordinator", "found 0"}));
}
TEST(GroupConfigMalformed, TwoCoordinators) {
  EXPECT_TRUE(rejects(with(kMinimal, "role: subscriber", "role: coordinator"),
                      {"ranks", "exactly one coordinator", "found 2"}));
}
TEST(GroupConfigMalformed, NoPublisher) {
  EXPECT_TRUE(
      rejects(with(kMinimal, "role: publisher", "role: subscriber"), {"ranks", "publisher"}));
}
// --- CURVE.
TEST(GroupConfigMalformed, CurveBadCoordinatorKey) {
  EXPECT_TRUE(rejects(with(curve_config(), std::string("coordinator_public_key: ") + kPub,
                           "coordinator_public_key: tooshort"),
                      {"curve.coordinator_public_key", "'tooshort'"}));
}
TEST(GroupConfigMalformed, CurveMissingCoordinatorKeyFile) {
  EXPECT_TRUE(rejects(with(curve_config(), "  coordinator_key_file: keys/coordinator.key\n", ""),
                      {"curve.coordinator_key_file", "missing"}));
}
TEST(GroupConfigMalformed, CurveRankWithoutKeyFile) {
  EXPECT_TRUE(rejects(with(curve_config(), "key_file: keys/rank1.key, ", ""),
                      {"ranks[1].key_file", "missing"}));
}
TEST(GroupConfigMalformed, CurveRankWithoutPublicKey) {
  EXPECT_TRUE(rejects(with(curve_config(), std::string(", public_key: ") + kPub2, ""),
                      {"ranks[1].public_key", "missing"}));
}
TEST(GroupConfigMalformed, CurveRankBadPublicKey) {
  // 40 characters of the alphabet whose groups overflow 32 bits.
  EXPECT_TRUE(rejects(with(curve_config(), kPub2, "'########################################'"),
                      {"ranks[1].public_key", "'####"}));
}
TEST(GroupConfigMalformed, CurveBadAuthorizedKey) {
  EXPECT_TRUE(rejects(with(curve_config(), "ranks:", "  authorized_keys: [abc]\nranks:"),
                      {"curve.authorized_keys[0]", "'abc'"}));
}
TEST(GroupConfigMalformed, CurveEnabledNotABool) {
  EXPECT_TRUE(rejects(with(curve_config(), "curve:\n", "curve:\n  enabled: maybe\n"),
                      {"curve.enabled", "'maybe'"}));
}
// --- Demo model.
TEST(GroupConfigMalformed, DemoDensityZero) {
  EXPECT_TRUE(rejects(kMinimal + "demo: {density: 0}\n", {"demo.density", "'0'"}));
}
TEST(GroupConfigMalformed, DemoDensityAboveHalf) {
  EXPECT_TRUE(rejects(kMinimal + "demo: {density: 0.75}\n", {"demo.density", "'0.75'"}));
}
TEST(GroupConfigMalformed, DemoDensityNotANumber) {
  EXPECT_TRUE(rejects(kMinimal + "demo: {density: .nan}\n", {"demo.density", "'.nan'"}));
}
TEST(GroupConfigMalformed, DemoTooFewParameters) {
  EXPECT_TRUE(rejects(kMinimal + "demo: {parameters: 1023}\n", {"demo.parameters", "'1023'"}));
}
TEST(GroupConfigMalformed, DemoZeroVersions) {
  EXPECT_TRUE(rejects(kMinimal + "demo: {versions: 0}\n", {"demo.versions", "'0'"}));
}
// --- Limits.
TEST(GroupConfigMalformed, FileTooLarge) {
  GroupConfigLimits limits;
  limits.max_file_bytes = 64;
  EXPECT_TRUE(rejects(kMinimal, {"max_file_bytes", "64"}, StatusCode::kOutOfRange, limits));
}
TEST(GroupConfigMalformed, TooManyRanks) {
  GroupConfigLimits limits;
  limits.max_ranks = 2;
  EXPECT_TRUE(rejects(kMinimal, {"ranks", "max_ranks", "3"}, StatusCode::kOutOfRange, limits));
}
TEST(GroupConfigMalformed, StringTooLong) {
  GroupConfigLimits limits;
  limits.max_string_bytes = 8;
  EXPECT_TRUE(rejects(kMinimal, {"coordinator.endpoint", "max_string_bytes", "20"},
                      StatusCode::kOutOfRange, limits));
}
TEST(GroupConfigMalformed, TooManyListEntries) {
  GroupConfigLimits limits;
  limits.max_list_entries = 1;
  EXPECT_TRUE(rejects(kMinimal + "transports: [fs, ucx]\n", {"transports", "max_list_entries"},
                      StatusCode::kOutOfRange, limits));
}

}  // namespace
}  // namespace weightcast
