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

}  // namespace weightcast::fuzzing
