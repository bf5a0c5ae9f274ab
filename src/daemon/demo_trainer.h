// The trainer a weightcastd publisher runs for its demo model (src/daemon/synthetic_model.h):
// it makes each version and hands it to the publisher in one of the two modes of
// src/endpoint/publish_step.h, chosen by the config's demo.publisher_mode (docs/CONFIG.md):
//
//   snapshot  the model's tensors are registered as they are; a version is the model's steps
//             in place, then Publisher::publish, which diffs them against its snapshot.
//   hooked    the tensors are registered TensorUpdates::kHooked; for a version the trainer
//             opens begin_step(v), and for each tensor keeps its old values in a scratch
//             buffer, lets the model take its step, puts the old values back and writes the new
//             ones through PublishStep::write in pieces of kDemoWritePieceBytes (as an
//             optimizer writes its chunks), then publish_step. The bytes of every version are
//             those of snapshot mode (the model's steps are the same).
//
// Figures (docs/PERFORMANCE.md, "Rank group bench"), measured on this thread:
//   write_s        hooked: the time inside every PublishStep::write of the version;
//   plain_copy_s   hooked: memcpy of the same new values into the same live pieces right
//                  after each write (the bytes are equal by then, so the version is not
//                  disturbed): what `live.copy_(new)` costs instead of the write;
//   publish_s      publish() or publish_step() to wait_published(), in both modes; the trainer
//                  first waits until the version before is committed, so no credit wait is in it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "src/daemon/synthetic_model.h"
#include "src/endpoint/publisher.h"

namespace weightcast {

inline constexpr uint64_t kDemoWritePieceBytes = uint64_t{8} << 20;

struct DemoStepFigures {
  uint64_t version = 0;
  bool hooked = false;
  bool anchor = false;
  uint64_t written_bytes = 0;  // hooked: bytes passed to PublishStep::write
  double write_s = 0;
  double plain_copy_s = 0;
  double publish_s = 0;
  uint64_t stored_bytes = 0;
};

class DemoTrainer {
 public:
  // `mode`: "snapshot", "hooked" or empty (snapshot). Registers the model's tensors.
  static Result<std::unique_ptr<DemoTrainer>> create(SyntheticModel* model, Publisher* publisher,
                                                     const std::string& mode);

  bool hooked() const { return hooked_; }
  // The trainer's own memory besides the model: the hooked scratch buffer (0 in snapshot mode).
  uint64_t scratch_bytes() const { return scratch_.size(); }

  // Makes version `version` (the model's step `model_version`, the next one) and queues its
  // publication; fills the write figures of `f` (hooked) and returns the handle.
  Result<PublishHandle> make_version(uint64_t version, uint64_t model_version, DemoStepFigures* f);

 private:
  DemoTrainer(SyntheticModel* model, Publisher* publisher, bool hooked)
      : model_(model), publisher_(publisher), hooked_(hooked) {}
  Result<PublishHandle> make_hooked(uint64_t version, bool take_step, DemoStepFigures* f);

  SyntheticModel* model_;
  Publisher* publisher_;
  bool hooked_;
  std::vector<TensorRef> refs_;
  std::vector<uint8_t> scratch_;  // hooked: one tensor's old, then new, values
};

// One JSON line of `f` (the demo.figures_path file; bench/drivers/group_benchmark.h reads it).
std::string demo_figures_line(const DemoStepFigures& f, uint64_t trainer_bytes);

}  // namespace weightcast
