// The group config loader on malformed input: one test per case, each checking that the error
// names the source, the field and the offending value.
#include "src/control/group_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/control/group_config_test_util.h"

namespace weightcast::group_config_test {
namespace {

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
TEST(GroupConfigMalformed, Fp8Section) {
  EXPECT_TRUE(rejects(kMinimal + "fp8: {quantise: [x]}\n", {"fp8", "'quantise'"}));
  EXPECT_TRUE(rejects(kMinimal + "fp8: {quantize: x}\n", {"fp8.quantize"}));
  EXPECT_TRUE(rejects(kMinimal + "fp8: {quantize: ['(unclosed']}\n",
                      {"fp8.quantize[0]", "'(unclosed'", "regex"}));
  EXPECT_TRUE(rejects(kMinimal + "fp8: {enabled: maybe}\n", {"fp8.enabled"}));
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
// --- UCX.
TEST(GroupConfigMalformed, UcxUnknownKey) {
  EXPECT_TRUE(rejects(kMinimal + "ucx: {tls: shm, rndv: get}\n", {"ucx", "rndv"}));
}
TEST(GroupConfigMalformed, UcxTlsNotAList) {
  EXPECT_TRUE(rejects(kMinimal + "ucx: {tls: \"shm; rm -rf\"}\n", {"ucx.tls", "'shm; rm -rf'"}));
}
TEST(GroupConfigMalformed, UcxTlsEmpty) {
  EXPECT_TRUE(rejects(kMinimal + "ucx: {tls: \"\"}\n", {"ucx.tls"}));
}
TEST(GroupConfigMalformed, UcxPublisherMemoryUnknown) {
  EXPECT_TRUE(rejects(kMinimal + "ucx: {publisher_memory: rdma}\n",
                      {"ucx.publisher_memory", "'rdma'", "in_place"}));
}
TEST(GroupConfigMalformed, UcxNotAMapping) {
  EXPECT_TRUE(rejects(kMinimal + "ucx: shm\n", {"ucx"}));
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
}  // namespace weightcast::group_config_test
