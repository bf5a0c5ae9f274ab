// The model a weightcastd publisher publishes when no trainer embeds it (the demo, tests,
// benchmarks): a Qwen3-MoE-shaped parameter list scaled to about `parameters` bf16 elements,
// advanced by Adam-like steps that change about `density` of the elements per version.
//
// Version v is a pure function of (parameters, density, seed, v): step k uses step seed
// seed * 1000003 + k, so a restarted publisher reaches the journal's head by replaying the
// steps (fast_forward) and publishes bytes identical to those it would have published.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "codec/base/status.h"
#include "codec/base/thread_pool.h"
#include "codec/tensor_ref.h"
#include "codec/workload/model_shapes.h"
#include "codec/workload/synthetic_update.h"

namespace weightcast {

class SyntheticModel {
 public:
  // The model holds 6 bytes per parameter (fp32 master weights and their bf16 copy). A model
  // larger than this host's RAM, or whose allocation fails, is a kOutOfRange Status naming
  // the bytes and the model's size, never a std::bad_alloc.
  static Result<std::unique_ptr<SyntheticModel>> create(uint64_t parameters, double density,
                                                        uint64_t seed, ThreadPool* pool);

  // Advances the weights to `version` (0 is the initial weights); never backwards.
  void fast_forward(uint64_t version);
  // One version (to version() + 1), tensor by tensor: before(i) runs just before tensor i
  // takes its step and after(i) just after, so that a hooked trainer can keep tensor i's old
  // values and write the new ones through its publisher (src/daemon/demo_trainer.h). The bytes
  // are those fast_forward makes.
  void step_tensors(const std::function<void(size_t)>& before,
                    const std::function<void(size_t)>& after);
  uint64_t version() const { return version_; }
  // Steps only the tensors whose entry is true from now on (a publisher rank of a sharded demo
  // reads no others: src/daemon/shard_demo.h); the others keep the values they have. Every
  // tensor's steps depend on its own state and the step's seed alone, so the stepped ones hold
  // the bytes of the whole model's version.
  void step_only(std::vector<bool> tensors) { stepped_ = std::move(tensors); }

  uint64_t parameters() const { return parameters_; }
  size_t tensor_count() const { return tensors_.size(); }
  // The bf16 bytes of the largest tensor.
  uint64_t largest_tensor_bytes() const;
  // Views of the bf16 weights, valid for the model's lifetime (their bytes change on steps).
  std::vector<TensorRef> tensor_refs() const;

 private:
  SyntheticModel(ThreadPool* pool, uint64_t seed) : pool_(pool), seed_(seed) {}

  std::vector<TensorShapeSpec> specs_;
  std::vector<SyntheticTensor> tensors_;
  ThreadPool* pool_;
  double lr_ = 0;
  uint64_t seed_ = 0;
  uint64_t version_ = 0;
  uint64_t parameters_ = 0;
  std::vector<bool> stepped_;  // empty: every tensor
};

// Bytes a SyntheticModel of `parameters` holds.
inline constexpr uint64_t kSyntheticModelBytesPerParameter = sizeof(float) + sizeof(uint16_t);

// The scale of model_layer_list(kQwen3_30B_A3B, scale) whose total is closest to `parameters`.
double synthetic_model_scale(uint64_t parameters);

}  // namespace weightcast
