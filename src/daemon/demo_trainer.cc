#include "src/daemon/demo_trainer.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "codec/base/allocation.h"

namespace weightcast {
namespace {

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace

Result<std::unique_ptr<DemoTrainer>> DemoTrainer::create(SyntheticModel* model,
                                                         Publisher* publisher,
                                                         const std::string& mode) {
  if (!mode.empty() && mode != "snapshot" && mode != "hooked") {
    return invalid_argument("demo publisher mode '" + mode + "' is not snapshot or hooked");
  }
  std::unique_ptr<DemoTrainer> t(new DemoTrainer(model, publisher, mode == "hooked"));
  t->refs_ = model->tensor_refs();
  const TensorUpdates updates = t->hooked_ ? TensorUpdates::kHooked : TensorUpdates::kSnapshot;
  for (const auto& ref : t->refs_) RETURN_IF_ERROR(publisher->register_tensor(ref, updates));
  if (t->hooked_) {
    // One tensor's bytes: the model steps a whole tensor at a time
    // (codec/workload/synthetic_update.h).
    ASSIGN_OR_RETURN(t->scratch_, allocate_bytes(model->largest_tensor_bytes(),
                                                 "the demo trainer's write scratch"));
  }
  return t;
}

Result<PublishHandle> DemoTrainer::make_version(uint64_t version, uint64_t model_version,
                                                DemoStepFigures* f) {
  f->version = version;
  f->hooked = hooked_;
  if (!hooked_) {
    model_->fast_forward(model_version);
    return publisher_->publish(version);
  }
  // A hooked publisher restarted behind the journal's head takes the steps in between in
  // place (those versions are published already); the version itself is written through a
  // step. The model's initial weights (version 0), or a version it holds already, are
  // written as they are: every element through the step, none changed.
  if (model_version > model_->version() + 1) model_->fast_forward(model_version - 1);
  return make_hooked(version, model_version == model_->version() + 1, f);
}

Result<PublishHandle> DemoTrainer::make_hooked(uint64_t version, bool take_step,
                                               DemoStepFigures* f) {
  ASSIGN_OR_RETURN(std::shared_ptr<PublishStep> step, publisher_->begin_step(version));
  Status failed = ok_status();
  const auto save_old = [&](size_t i) {
    const TensorRef& t = refs_[i];
    std::memcpy(scratch_.data(), t.data, t.numel() * t.element_size());
  };
  const auto write_new = [&](size_t i) {
    if (!failed.ok()) return;
    const TensorRef& t = refs_[i];
    auto* live = static_cast<uint8_t*>(t.data);
    const uint64_t bytes = t.numel() * t.element_size();
    const uint64_t piece = kDemoWritePieceBytes / t.element_size() * t.element_size();
    for (uint64_t at = 0; at < bytes && failed.ok(); at += piece) {
      const uint64_t n = std::min(piece, bytes - at);
      // The model stepped in place: the live piece holds the new values and the scratch the
      // old ones. Swapped, they are what an optimizer has before it writes the piece (without
      // a step both hold the same values).
      std::swap_ranges(live + at, live + at + n, scratch_.data() + at);
      const auto elements = static_cast<int64_t>(n / t.element_size());
      const TensorRef live_view = TensorRef::contiguous(t.name, t.dtype, live + at, elements);
      const TensorRef new_values =
          TensorRef::contiguous(t.name + " (new)", t.dtype, scratch_.data() + at, elements);
      auto t0 = SteadyClock::now();
      failed = step->write(live_view, new_values);
      f->write_s += seconds_since(t0);
      t0 = SteadyClock::now();
      std::memcpy(live + at, scratch_.data() + at, n);
      f->plain_copy_s += seconds_since(t0);
      f->written_bytes += n;
    }
  };
  if (take_step) {
    model_->step_tensors(save_old, write_new);
  } else {
    for (size_t i = 0; i < refs_.size(); ++i) {
      save_old(i);
      write_new(i);
    }
  }
  RETURN_IF_ERROR(failed);
  return publisher_->publish_step(std::move(step));
}

std::string demo_figures_line(const DemoStepFigures& f, uint64_t trainer_bytes) {
  char line[512];
  std::snprintf(
      line, sizeof line,
      "{\"version\": %" PRIu64 ", \"mode\": \"%s\", \"anchor\": %s, \"written_bytes\": %" PRIu64
      ", \"write_ms\": %.6f, \"plain_copy_ms\": %.6f, \"publish_ms\": %.6f, "
      "\"stored_bytes\": %" PRIu64 ", \"trainer_bytes\": %" PRIu64 "}",
      f.version, f.hooked ? "hooked" : "snapshot", f.anchor ? "true" : "false", f.written_bytes,
      f.write_s * 1e3, f.plain_copy_s * 1e3, f.publish_s * 1e3, f.stored_bytes, trainer_bytes);
  return line;
}

}  // namespace weightcast
