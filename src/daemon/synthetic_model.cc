#include "src/daemon/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "codec/base/allocation.h"

namespace weightcast {
namespace {

uint64_t total_elements(double scale) {
  uint64_t n = 0;
  for (const auto& s : model_layer_list(ModelFamily::kQwen3_30B_A3B, scale)) n += s.elements();
  return n;
}

}  // namespace

double synthetic_model_scale(uint64_t parameters) {
  // Totals grow monotonically with the scale (up to rounding): bisect in log space.
  double lo = 1e-3, hi = 1.0;
  for (int i = 0; i < 40; ++i) {
    const double mid = std::sqrt(lo * hi);
    (total_elements(mid) < parameters ? lo : hi) = mid;
  }
  const uint64_t a = total_elements(lo), b = total_elements(hi);
  const auto distance = [&](uint64_t n) {
    return n > parameters ? n - parameters : parameters - n;
  };
  return distance(a) <= distance(b) ? lo : hi;
}

Result<std::unique_ptr<SyntheticModel>> SyntheticModel::create(uint64_t parameters, double density,
                                                               uint64_t seed, ThreadPool* pool) {
  std::unique_ptr<SyntheticModel> m(new SyntheticModel(pool, seed));
  m->specs_ = model_layer_list(ModelFamily::kQwen3_30B_A3B, synthetic_model_scale(parameters));
  uint64_t elements = 0;
  for (const auto& s : m->specs_) elements += s.elements();
  const uint64_t bytes = elements * kSyntheticModelBytesPerParameter;
  const std::string what = "the demo model (" + std::to_string(elements) + " parameters)";
  // Past the host's RAM the allocations may well succeed (overcommit) and the process then
  // dies of the OOM killer while writing the weights: refuse it up front.
  if (const uint64_t ram = physical_memory_bytes(); ram != 0 && bytes > ram) {
    return out_of_range("cannot allocate " + std::to_string(bytes) + " bytes for " + what +
                        ": more than this host's " + std::to_string(ram) +
                        " bytes of RAM (lower demo.parameters)");
  }
  ASSIGN_OR_RETURN(m->tensors_, allocate_or_status(bytes, what, [&] {
                     std::vector<SyntheticTensor> tensors;
                     tensors.reserve(m->specs_.size());
                     for (size_t i = 0; i < m->specs_.size(); ++i) {
                       tensors.emplace_back(m->specs_[i].elements(), m->specs_[i].fan_in,
                                            seed * 7919 + i, pool);
                     }
                     return tensors;
                   }));
  m->parameters_ = elements;
  m->lr_ = calibrate_lr(density, seed);
  return m;
}

void SyntheticModel::fast_forward(uint64_t version) {
  while (version_ < version) step_tensors(nullptr, nullptr);
}

void SyntheticModel::step_tensors(const std::function<void(size_t)>& before,
                                  const std::function<void(size_t)>& after) {
  ++version_;
  const uint64_t step_seed = seed_ * 1000003 + version_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!stepped_.empty() && !stepped_[i]) continue;
    if (before) before(i);
    tensors_[i].step(lr_ * tensors_[i].sigma(), step_seed, pool_);
    if (after) after(i);
  }
}

uint64_t SyntheticModel::largest_tensor_bytes() const {
  uint64_t best = 0;
  for (const auto& t : tensors_) best = std::max<uint64_t>(best, t.elements() * sizeof(uint16_t));
  return best;
}

std::vector<TensorRef> SyntheticModel::tensor_refs() const {
  std::vector<TensorRef> refs;
  for (size_t i = 0; i < specs_.size(); ++i) {
    TensorRef r;
    r.name = specs_[i].name;
    r.dtype = DType::kBF16;
    r.shape = specs_[i].shape;
    // The publisher only reads through the view.
    r.data = const_cast<uint16_t*>(tensors_[i].bf16().data());
    refs.push_back(std::move(r));
  }
  return refs;
}

}  // namespace weightcast
