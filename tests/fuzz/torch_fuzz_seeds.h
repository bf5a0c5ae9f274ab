// Seeds for the zip and torch artifact fuzz targets: archives our writers produce (plain and
// forced ZIP64, aliases, strided views, fp8 through _rebuild_tensor_v3, empty ones) and
// reference-style files they would not produce (PyTorch's data descriptors with zeroed local
// sizes, a state_dict pickle with OrderedDict, BUILD and memo references, an nn.Parameter).
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_zip_seeds();
std::vector<std::vector<uint8_t>> make_torch_artifact_seeds();

// What a target saw, so a driver can check that mutated inputs reach both outcomes.
struct ArchiveFuzzCounts {
  uint64_t parsed = 0;    // inputs that parsed (and round-tripped; else the target aborts)
  uint64_t rejected = 0;  // inputs refused with a message
  uint64_t items = 0;     // entries (zip) or tensors (torch) in the inputs that parsed
};
extern ArchiveFuzzCounts zip_fuzz_counts;             // defined by zip_fuzz_target.cc
extern ArchiveFuzzCounts torch_artifact_fuzz_counts;  // defined by torch_artifact_fuzz_target.cc

}  // namespace weightcast::fuzzing
