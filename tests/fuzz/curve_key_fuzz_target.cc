// libFuzzer target: parse a CURVE key file (src/control/curve_keys.h). Invariants: a refusal
// carries a message naming the source; an accepted file holds two valid Z85 keys whose public
// half derives from the secret half (so printing it back parses to the same pair).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "src/control/curve_keys.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kBadPublicLine, kRefused, kAccepted };
}  // namespace

// The public key derives from the secret key: a mutation inside a key is refused after both
// lines parse, so acceptance needs mutations in blanks, comments and line ends.
std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused at the public-key line", 10},
      {"refused later (secret-key line, extra lines, key derivation)", 10},
      {"accepted, and printed back parses to the same pair", 0.8},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The parser's first check, independently: the first line that is neither blank nor a '#'
// comment reads "public-key = <Z85 key>".
bool has_public_line(std::string_view text) {
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = trim(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    if (line.empty() || line.front() == '#') continue;
    const size_t eq = line.find('=');
    return eq != std::string_view::npos && trim(line.substr(0, eq)) == "public-key" &&
           weightcast::is_z85_key(trim(line.substr(eq + 1)));
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto pair = parse_curve_key_text(text, "fuzz.key");
  if (!pair.ok()) {
    if (pair.status().message().find("fuzz.key") == std::string::npos) std::abort();
    fuzzing::fuzz_reached(has_public_line(text) ? fuzzing::kRefused : fuzzing::kBadPublicLine);
    return 0;
  }
  if (!is_z85_key(pair->public_z85) || !is_z85_key(pair->secret_z85)) std::abort();
  const std::string again =
      "public-key = " + pair->public_z85 + "\nsecret-key = " + pair->secret_z85 + "\n";
  auto back = parse_curve_key_text(again, "fuzz.key");
  if (!back.ok() || back->public_z85 != pair->public_z85 || back->secret_z85 != pair->secret_z85) {
    std::abort();
  }
  fuzzing::fuzz_reached(fuzzing::kAccepted);
  return 0;
}
