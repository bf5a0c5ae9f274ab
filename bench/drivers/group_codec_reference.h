// The in-process reference of `weightcast bench group`: the codec's own encode + apply time for
// the versions a rank group published, on the same bytes, measured in the bench's process with
// no transport, no control plane and no other process.
//
// The model is the one a weightcastd publisher without a trainer publishes
// (src/daemon/synthetic_model.h): the same (parameters, density, seed) give byte-identical
// versions, so version v here is the group's version v. Each delta version v is encoded from
// v - 1 tensor by tensor (encode_delta, the journal writer's encoder) and applied (apply_delta)
// to an engine copy holding v - 1, both on one pool of `threads`, in steady state: the base
// checksums are the ones tracked from the previous version (as a publisher and an engine know
// them; docs/PERFORMANCE.md, "steady"). The engine copy must then equal version v byte for
// byte, else the measurement fails. Anchor versions are copied, untimed.
//
// Memory: the model (6 bytes per parameter) plus two bf16 copies (previous and engine).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

struct CodecReferenceConfig {
  uint64_t parameters = 0;  // as the group's demo.parameters
  double density = 0.01;
  uint64_t seed = 1;
  size_t threads = 0;  // 0: all cores (weightcastd's default)
  uint64_t last_version = 0;
  std::set<uint64_t> delta_versions;            // versions in 1..last_version published as deltas
  std::function<void(const std::string&)> log;  // progress lines; none when empty
};

struct CodecVersionFigures {
  uint64_t version = 0;
  uint64_t changed_elements = 0;
  uint64_t changed_tensors = 0;
  uint64_t element_bytes = 2;  // bf16
  uint64_t record_bytes = 0;   // the delta records of the changed tensors
  double encode_s = 0;
  double apply_s = 0;
};

struct CodecReference {
  uint64_t parameters = 0;  // the model's actual element count
  size_t tensors = 0;
  size_t threads = 0;
  std::vector<CodecVersionFigures> versions;  // one per delta version, ascending
};

// Fails on invalid options, a model this host cannot hold, or an apply that does not reproduce
// its version.
Result<CodecReference> measure_codec_reference(const CodecReferenceConfig& config);

}  // namespace weightcast
