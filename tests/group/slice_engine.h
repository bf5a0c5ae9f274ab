// An engine rank of the tests' tp2 layout (docs/CONFIG.md `layouts`) over the Weights model of
// trainer_side.h: the slices part `part` holds, registered with a subscriber, and whether they
// equal a version's.
#pragma once

#include <vector>

#include "tests/group/trainer_side.h"

namespace weightcast::testing {

inline constexpr char kLayouts[] = R"(layouts:
  - name: tp2
    parts: 2
    rules:
      - {match: 'packed\.left', dim: 1}
      - {match: 'vec', dim: 0}
)";

// Part `part` of tp2: columns [16p, 16p + 16) of packed.left, packed.right whole, elements
// [500p, 500p + 500) of vec.
struct SliceEngine {
  uint32_t part = 0;
  std::vector<uint16_t> left = std::vector<uint16_t>(4 * 16);
  std::vector<uint16_t> right = std::vector<uint16_t>(4 * 32);
  std::vector<uint16_t> vec = std::vector<uint16_t>(500);

  Status register_with(Subscriber& s) {
    TensorRef l = TensorRef::contiguous("packed.left", DType::kBF16, left.data(), 64);
    l.shape = {4, 16};
    RETURN_IF_ERROR(s.register_slice(l, {4, 32}));
    TensorRef r = TensorRef::contiguous("packed.right", DType::kBF16, right.data(), 128);
    r.shape = {4, 32};
    RETURN_IF_ERROR(s.register_tensor(r));
    return s.register_slice(TensorRef::contiguous("vec", DType::kBF16, vec.data(), 500), {1000});
  }
  // Whether it holds its slices of Weights::set(v).
  bool holds(uint64_t v) const {
    Weights w;
    w.set(v);
    for (size_t r = 0; r < 4; ++r) {
      for (size_t c = 0; c < 16; ++c) {
        if (left[r * 16 + c] != w.packed[r * 64 + 16 * part + c]) return false;
      }
      for (size_t c = 0; c < 32; ++c) {
        if (right[r * 32 + c] != w.packed[r * 64 + 32 + c]) return false;
      }
    }
    for (size_t k = 0; k < 500; ++k) {
      if (vec[k] != w.vec[500 * part + k]) return false;
    }
    return true;
  }
};

inline std::unique_ptr<Subscriber> connect_slices(const TestGroup& g, uint32_t rank,
                                                  SliceEngine& e) {
  auto s = Subscriber::create(g.config(), one_thread<SubscriberOptions>(rank));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return nullptr;
  const Status registered = e.register_with(**s);
  EXPECT_TRUE(registered.ok()) << registered.to_string();
  if (!registered.ok() || !(*s)->connect().ok()) return nullptr;
  return std::move(s).value();
}

}  // namespace weightcast::testing
