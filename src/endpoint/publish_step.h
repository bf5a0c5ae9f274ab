// Hooked publication (docs/DECISIONS.md "Hooked mode"): the trainer hands the publisher each
// new value chunk at the moment its optimizer would write it, and the delta is taken from
// those writes, with no snapshot of the hooked tensors.
//
//   auto step = publisher.begin_step(v);          // v: the version these writes make
//   step->write(live_view, new_values);           // instead of live_view.copy_(new_values)
//   ...                                           // every element of every hooked tensor
//   auto handle = publisher.publish_step(step);   // guard, then journal + live paths
//
// write() diffs the old values still in `live_view` against `new_values` as it writes
// `new_values` into `live_view`; every delta chunk whose elements have all been written is
// encoded (the chunk's bytes are those snapshot mode makes for the same two versions): for
// whole chunks of a contiguous host view on the step's encoder thread, from what the write
// captured (change_capture.h), otherwise in the write. It keeps the encoded chunks, a bounded
// set of captures waiting to be encoded and, for a chunk written part way, that chunk's old
// and new bytes: the memory it adds is about the delta, never a copy of the model.
//
// On an anchor version (decided when the step begins) each write's new values also go with
// pwrite into the anchor's shard files at their precomputed offsets (anchor_stream.h); the
// anchor is moved into the journal when the version is published, with no host copy of the
// model.
//
// In an FP8 group a selected tensor is written as ever (the trainer's dtype) and recorded as
// its quantised values and scales, a band of 128 rows at a time (publish_step_fp8.cc).
//
// At publish the guard recomputes each hooked tensor's checksum from its live bytes and
// compares it with the checksum the step's writes produced; a tensor changed outside the
// step, or not wholly written by it, refuses the publication naming the tensor, and nothing
// is published (the next step is then published as an anchor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_recorder.h"
#include "codec/tensor_ref.h"
#include "transport/fs/anchor_stream.h"

namespace weightcast {

// How the publisher learns a registered tensor's new values.
enum class TensorUpdates : uint8_t {
  kSnapshot,  // read at publish and diffed against the publisher's snapshot
  kHooked,    // written through PublishStep::write during the step
};

struct StepProgress {
  uint64_t elements_written = 0;  // hooked elements written so far
  uint64_t elements_total = 0;    // elements of every hooked tensor
  uint64_t changed_elements = 0;  // of those written, the ones whose bits changed
  uint64_t pending_chunks = 0;    // delta chunks written part way (their bytes are held)
};

class PublishStep {
 public:
  PublishStep(const PublishStep&) = delete;
  PublishStep& operator=(const PublishStep&) = delete;
  ~PublishStep();

  uint64_t version() const { return version_; }

  // Writes `new_values` into `live_view` and records the change. `live_view` is a view of a
  // registered hooked tensor whose elements, in row-major order, are consecutive elements of
  // that tensor (the whole tensor, a run of its rows, or a strided view of a packed parameter
  // such as gate_proj inside gate_up_proj). `new_values` has the same dtype and element count
  // (any shape; contiguous unless host memory). Host or CUDA memory (CUDA: contiguous views;
  // the bytes go through bounded pinned staging, transport/tensor_staging.h). Safe to call
  // from several threads for disjoint elements; an element written twice in one step is an
  // error. Errors name the tensor; after one the step cannot be published.
  [[nodiscard]] Status write(const TensorRef& live_view, const TensorRef& new_values);

  StepProgress progress() const;

 private:
  friend class Publisher;
  // A band of 128 rows of an FP8 source written part way: its old source bytes (row-major, as
  // the writes found them) and which of its elements were written.
  struct Fp8Band {
    std::vector<uint8_t> old_bytes;
    std::map<uint64_t, uint64_t> runs;  // written [begin, end), element offsets in the band
    uint64_t written = 0;
  };
  // An FP8 group's hooked source (publish_step_fp8.cc): the Hooked's `live` is the trainer's
  // matrix and its recorder records the quantised values; `scales` records the scale grid
  // (the publisher's tensor `scale_tensor`, whose host bytes `scale_inv` receive each band's
  // new scales). A band is quantised, old and new, once all of its elements are written.
  struct Fp8Hooked {
    size_t scale_tensor = 0;
    std::unique_ptr<DeltaRecorder> scales;
    float* scale_inv = nullptr;
    std::mutex mu;
    std::map<int64_t, Fp8Band> bands;  // by band index; erased when complete
    std::vector<uint8_t> done;         // per band: 1 once recorded (a later write is refused)
  };
  struct Hooked {
    size_t tensor = 0;  // index among the publisher's registered tensors
    TensorRef live;
    std::unique_ptr<DeltaRecorder> recorder;
    std::unique_ptr<Fp8Hooked> fp8;  // set for an FP8 group's selected tensor
  };
  PublishStep(uint64_t version, std::vector<Hooked> hooked);
  Status write_host(Hooked& h, uint64_t first, const TensorRef& live_view,
                    const TensorRef& new_values);
  Status write_cuda(Hooked& h, uint64_t first, const TensorRef& live_view,
                    const TensorRef& new_values);
  // FP8 sources (publish_step_fp8.cc): the write in bands, and a band's records once whole.
  Status write_fp8(Hooked& h, uint64_t first, const TensorRef& live_view,
                   const TensorRef& new_values);
  Status record_fp8_band(Hooked& h, int64_t band, const TensorRef& old_band,
                         const TensorRef& new_band);

  uint64_t version_ = 0;
  bool force_anchor_ = false;
  std::vector<Hooked> hooked_;
  // Encodes the host writes' delta chunks while the trainer goes on (deferred_encoder.h);
  // drained by the guard before the records are finished. Declared after hooked_: it stops
  // before the recorders its tasks write to are destroyed.
  std::unique_ptr<DeferredEncoder> encoder_;
  // Where each hooked tensor's elements lie: bytes [begin, end), sorted by begin, and reach_[k]
  // the largest end among the first k + 1, so that write() finds a view's tensor by address.
  struct Extent {
    uintptr_t begin = 0, end = 0;
    size_t hooked = 0;
  };
  std::vector<Extent> extents_;
  std::vector<uintptr_t> reach_;
  // Anchor versions: the shards being written, in anchor_dir_ (removed unless published).
  std::unique_ptr<StreamingAnchorWriter> anchor_;
  std::string anchor_dir_;
  mutable std::mutex mu_;
  Status failed_ = ok_status();  // the first write error; sticky
  bool published_ = false;
};

}  // namespace weightcast
