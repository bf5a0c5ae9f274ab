#include "tests/fuzz/curve_key_fuzz_seeds.h"

#include <string>

#include "src/control/curve_keys.h"

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_curve_key_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  auto add = [&](const std::string& text) { seeds.emplace_back(text.begin(), text.end()); };
  for (int i = 0; i < 2; ++i) {
    auto pair = generate_curve_key_pair();
    if (!pair.ok()) continue;
    add("public-key = " + pair->public_z85 + "\nsecret-key = " + pair->secret_z85 + "\n");
    add("# weightcast CURVE key pair\n\n  public-key=" + pair->public_z85 + "  \r\nsecret-key =\t" +
        pair->secret_z85);
  }
  return seeds;
}

}  // namespace weightcast::fuzzing
