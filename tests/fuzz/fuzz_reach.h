// How deep a fuzz target's inputs get, so that a smoke run can show that its mutations
// exercise more than the target's first check.
//
// A target names its depths, shallowest first, in fuzz_depths(): depth 0 is "refused by the
// first check" (the cheapest refusal: a size, a magic, a frame), later depths are later
// refusals, and the last, where the target can accept, is "accepted whole". Every call of
// LLVMFuzzerTestOneInput reports exactly one depth, the deepest its input reached, through
// fuzz_reached(); an input that passes the first check but is refused by a later one ends at
// that later refusal's depth, never at 0.
//
// The smoke driver (format_fuzz_main.cc) counts the depths of its mutated inputs (the seeds
// apart), prints them, and fails when a depth holds fewer than its minimum, when a seed ends
// short of the last depth, or when one call reports no depth or two. Under libFuzzer the counts are
// kept but nothing reads them.
//
// The mutations are deterministic, so a run's shares are stable; a minimum is about a third
// of the share measured when it was set: loose enough for new seeds, tight enough that a
// parser refusing every input at its first check, or accepting none, fails the run.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

namespace weightcast::fuzzing {

struct FuzzDepth {
  // What an input that ends here did, e.g. "refused by the magic".
  const char* name;
  // The least share of the mutated inputs, in percent, that must end here; a share above 0
  // asks for at least one input however few were run. 0: the depth may stay empty.
  double min_percent;
};

inline constexpr size_t kMaxFuzzDepths = 8;

// Inputs per depth since the process started; the driver reads differences of it.
inline std::array<uint64_t, kMaxFuzzDepths> fuzz_reach_counts{};

// Reports the depth of the current input (an index into fuzz_depths()).
inline void fuzz_reached(size_t depth) {
  if (depth >= kMaxFuzzDepths) std::abort();
  ++fuzz_reach_counts[depth];
}

// Defined by each target: its depths, shallowest first, at most kMaxFuzzDepths of them.
std::span<const FuzzDepth> fuzz_depths();

}  // namespace weightcast::fuzzing
