#include "src/daemon/synthetic_model.h"

#include <cmath>

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

SyntheticModel::SyntheticModel(uint64_t parameters, double density, uint64_t seed, ThreadPool* pool)
    : pool_(pool), seed_(seed) {
  specs_ = model_layer_list(ModelFamily::kQwen3_30B_A3B, synthetic_model_scale(parameters));
  tensors_.reserve(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    tensors_.emplace_back(specs_[i].elements(), specs_[i].fan_in, seed * 7919 + i, pool);
    parameters_ += specs_[i].elements();
  }
  lr_ = calibrate_lr(density, seed);
}

void SyntheticModel::fast_forward(uint64_t version) {
  while (version_ < version) {
    ++version_;
    const uint64_t step_seed = seed_ * 1000003 + version_;
    for (auto& t : tensors_) t.step(lr_ * t.sigma(), step_seed, pool_);
  }
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
