// libFuzzer target: parse a CURVE key file (src/control/curve_keys.h). Invariants: a refusal
// carries a message naming the source; an accepted file holds two valid Z85 keys whose public
// half derives from the secret half (so printing it back parses to the same pair).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/control/curve_keys.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto pair = parse_curve_key_text(text, "fuzz.key");
  if (!pair.ok()) {
    if (pair.status().message().find("fuzz.key") == std::string::npos) std::abort();
    return 0;
  }
  if (!is_z85_key(pair->public_z85) || !is_z85_key(pair->secret_z85)) std::abort();
  const std::string again =
      "public-key = " + pair->public_z85 + "\nsecret-key = " + pair->secret_z85 + "\n";
  auto back = parse_curve_key_text(again, "fuzz.key");
  if (!back.ok() || back->public_z85 != pair->public_z85 || back->secret_z85 != pair->secret_z85) {
    std::abort();
  }
  return 0;
}
