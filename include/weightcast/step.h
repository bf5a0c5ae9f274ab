// Hooked publication: the trainer hands the publisher each new value chunk at the moment its
// optimizer would write it, and the version's delta is taken from those writes, with no
// snapshot of the hooked tensors (docs/DECISIONS.md "Hooked mode").
//
//   auto step = publisher->begin_step(v);              // v: the version these writes make
//   step->write(live_view, new_values);                // instead of live_view.copy_(new_values)
//   ...                                                // every element of every hooked tensor
//   auto handle = publisher->publish_step(std::move(*step));
//
// At publish a guard recomputes each hooked tensor's checksum from its live bytes; a tensor
// changed outside the step, or not wholly written by it, refuses the publication naming the
// tensor, and nothing is published (the next version is then an anchor).
#pragma once

#include <cstdint>
#include <memory>

#include "weightcast/status.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

class Publisher;

// How the publisher learns a registered tensor's new values.
enum class TensorUpdates : uint8_t {
  kSnapshot,  // read at publish and diffed against the publisher's snapshot of the last version
  kHooked,    // written through Step::write during each step
};

struct StepProgress {
  uint64_t elements_written = 0;  // hooked elements written so far
  uint64_t elements_total = 0;    // elements of every hooked tensor
  uint64_t changed_elements = 0;  // of those written, the ones whose bits changed
  uint64_t pending_chunks = 0;    // delta chunks written part way (their bytes are held)
};

// One open step of a Publisher (Publisher::begin_step). Move-only; a moved-from Step refuses
// every write.
class Step {
 public:
  Step(Step&&) noexcept;
  Step& operator=(Step&&) noexcept;
  ~Step();

  uint64_t version() const;

  // Writes `new_values` into `live_view` and records the change. `live_view` is a view of a
  // registered hooked tensor whose elements, in row-major order, are consecutive elements of
  // that tensor (the whole tensor, a run of its rows, or a strided view of a packed
  // parameter); `new_values` has the same dtype and element count. Safe from several threads
  // for disjoint elements; an element written twice in one step is an error. After an error
  // the step cannot be published.
  Status write(const TensorRef& live_view, const TensorRef& new_values);

  StepProgress progress() const;

 private:
  friend class Publisher;
  struct Impl;
  explicit Step(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast::api
