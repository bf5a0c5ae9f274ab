// Valid delta records covering every chunk mode and element width: fuzzing starts here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_delta_seeds();

// The destination bytes the fuzz target applies into; seeds are encoded against them, so an
// unmutated seed applies and verifies.
inline uint8_t fuzz_base_byte(size_t i) {
  return static_cast<uint8_t>(i * 131 + 7);
}

// What the delta fuzz target saw, so a driver can check that inputs reach apply.
struct DeltaFuzzCounts {
  uint64_t parsed = 0;         // inputs that parsed as a record
  uint64_t applied = 0;        // applies that succeeded (and verified)
  uint64_t apply_refused = 0;  // applies that failed and left memory unchanged
};
extern DeltaFuzzCounts delta_fuzz_counts;

// Defined with the target: fails (returns 1) unless a run reached both outcomes of apply.
int check_delta_fuzz_coverage(size_t seeds);

}  // namespace weightcast::fuzzing
