// Every numeric field of the group config against its documented range (docs/CONFIG.md):
// the bounds themselves are accepted, one past them is refused, and so are a negative number,
// a fraction and a word, each with a message naming the file, the field and the value.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "src/control/group_config.h"
#include "tests/control/group_config_test_util.h"

namespace weightcast::group_config_test {
namespace {

struct NumericField {
  std::string field;                             // as errors name it
  std::function<std::string(std::string)> yaml;  // kMinimal with the field set to a value
  std::vector<std::string> accepted;             // includes both bounds where reachable
  std::vector<std::string> refused;              // beyond the bounds, besides the common ones
  bool integer = true;
};

std::string in_journal(const std::string& key, const std::string& v) {
  return with(kMinimal, "  root: journal\n", "  root: journal\n  " + key + ": " + v + "\n");
}
std::string top(const std::string& key, const std::string& v) {
  return kMinimal + key + ": " + v + "\n";
}
std::string section(const std::string& name, const std::string& key, const std::string& v) {
  return kMinimal + name + ": {" + key + ": " + v + "}\n";
}

const std::vector<NumericField>& fields() {
  using S = std::string;
  static const std::vector<NumericField> kFields = {
      {"journal.anchor_every",
       [](S v) { return in_journal("anchor_every", v); },
       {"0", "4294967295"},
       {"4294967296", "18446744073709551615"}},
      {"journal.retain_anchors",
       [](S v) { return in_journal("retain_anchors", v); },
       {"1", "4096"},
       {"0", "4097"}},
      {"max_in_flight",
       [](S v) { return top("max_in_flight", v); },
       {"1", "1024"},
       {"0", "1025", "4294967295"}},
      // heartbeat_ms at its maximum needs dead_after_ms above twice that: out of range too.
      {"timeouts.heartbeat_ms",
       [](S v) { return section("timeouts", "heartbeat_ms", v); },
       {"1", "2499"},
       {"0", "86400001"}},
      {"timeouts.dead_after_ms",
       [](S v) { return section("timeouts", "dead_after_ms", v); },
       {"1001", "86400000"},
       {"0", "86400001", "4294967295"}},
      {"timeouts.ack_timeout_ms",
       [](S v) { return section("timeouts", "ack_timeout_ms", v); },
       {"1", "86400000"},
       {"0", "86400001"}},
      {"timeouts.lease_ttl_ms",
       [](S v) { return section("timeouts", "lease_ttl_ms", v); },
       {"1", "86400000"},
       {"0", "86400001"}},
      {"ranks[2].rank",
       [](S v) {
         return with(kMinimal, "{rank: 2, role: subscriber}",
                     "{rank: " + v + ", role: subscriber}");
       },
       {"2", "4294967295"},
       {"4294967296"}},
      {"demo.parameters",
       [](S v) { return section("demo", "parameters", v); },
       {"1024", "34359738368"},
       {"1023", "34359738369", "2000000000000"}},
      {"demo.density",
       [](S v) { return section("demo", "density", v); },
       {"0.5", "1e-9", "0.01"},
       {"0", "0.5000001", "1", "nan", "inf"},
       false},
      {"demo.versions",
       [](S v) { return section("demo", "versions", v); },
       {"1", "1000000000"},
       {"0", "1000000001"}},
      {"demo.seed",
       [](S v) { return section("demo", "seed", v); },
       {"0", "18446744073709551615"},
       {"18446744073709551616"}},
      {"demo.step_interval_ms",
       [](S v) { return section("demo", "step_interval_ms", v); },
       {"0", "86400000"},
       {"86400001"}},
      {"nccl.bucket_bytes",
       [](S v) { return section("nccl", "bucket_bytes", v); },
       {"4096", "68719476736"},
       {"4095", "68719476737"}},
      {"nccl.buffers", [](S v) { return section("nccl", "buffers", v); }, {"1", "8"}, {"0", "9"}},
      {"nccl.timeout_ms",
       [](S v) { return section("nccl", "timeout_ms", v); },
       {"1", "3600000"},
       {"0", "3600001"}},
  };
  return kFields;
}

TEST(GroupConfigRanges, BoundsAreAccepted) {
  for (const auto& f : fields()) {
    for (const auto& v : f.accepted) {
      auto r = parse(f.yaml(v));
      EXPECT_TRUE(r.ok()) << f.field << " = " << v << ": " << r.status().to_string();
    }
  }
}

TEST(GroupConfigRanges, OutOfRangeNegativeFractionAndWordsAreRefused) {
  for (const auto& f : fields()) {
    std::vector<std::string> bad = f.refused;
    bad.insert(bad.end(), {"-1", "abc", "0x10"});
    if (f.integer) bad.insert(bad.end(), {"1.5", "1e3", "+5"});
    for (const auto& v : bad) {
      auto r = parse(f.yaml(v));
      ASSERT_FALSE(r.ok()) << f.field << " = " << v << " was accepted";
      const std::string& msg = r.status().message();
      EXPECT_NE(msg.find("test.yaml"), std::string::npos) << msg;
      EXPECT_NE(msg.find(f.field), std::string::npos) << f.field << " = " << v << ": " << msg;
      EXPECT_NE(msg.find("'" + v + "'"), std::string::npos) << f.field << " = " << v << ": " << msg;
    }
  }
}

// A config asking for two trillion demo parameters used to load, after which the publisher
// died of std::bad_alloc building the model.
TEST(GroupConfigRanges, TwoTrillionDemoParametersAreRefusedAtLoad) {
  auto r = parse(kMinimal + "demo:\n  parameters: 2000000000000\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("demo.parameters"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("at most 34359738368"), std::string::npos)
      << r.status().message();
}

TEST(GroupConfigRanges, DeclaredBoundsMatchTheDocumentedOnes) {
  EXPECT_EQ(kMaxDemoParameters, 34359738368u);
  EXPECT_EQ(kMaxTimeoutMs, 86400000u);
  EXPECT_EQ(kMaxInFlight, 1024u);
  EXPECT_EQ(kMaxRetainAnchors, 4096u);
  EXPECT_EQ(kMaxAnchorEvery, 4294967295u);
  EXPECT_EQ(kMaxDemoVersions, 1000000000u);
}

}  // namespace
}  // namespace weightcast::group_config_test
