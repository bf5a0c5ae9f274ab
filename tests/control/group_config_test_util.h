// Shared fixtures for the group config tests (group_config_test.cc and
// group_config_malformed_test.cc): a minimal valid config, a CURVE-enabled one, a one-edit
// helper and a parse wrapper with a fixed source name and base directory.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "src/control/group_config.h"

namespace weightcast::group_config_test {

// A valid pair from ZeroMQ's CURVE specification (RFC 26): quoted, since Z85 uses YAML syntax.
inline constexpr char kPub[] = "'Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID'";
inline constexpr char kPub2[] = "'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7'";

inline const std::string kMinimal = R"(group_id: demo
coordinator:
  endpoint: tcp://127.0.0.1:5555
journal:
  root: journal
ranks:
  - {rank: 0, role: coordinator, host: 127.0.0.1}
  - {rank: 1, role: publisher, host: 127.0.0.1}
  - {rank: 2, role: subscriber}
)";

inline std::string curve_config() {
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
inline std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the config";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

inline Result<proto::GroupConfig> parse(const std::string& text,
                                        const GroupConfigLimits& limits = {}) {
  return parse_group_config(text, "test.yaml", "/base", limits);
}

}  // namespace weightcast::group_config_test
