// The demo's reference figure: what moving the same model as a full safetensors file costs
// on the same disk, measured in the same run (the "filesystem broadcast without deltas"
// that RL frameworks do today: the trainer writes the whole model, every engine reads it).
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"

namespace weightcast::demo {

struct BaselineTimes {
  uint64_t bytes = 0;
  double write_s = 0;  // write + fsync of the whole model, one file
  double read_s = 0;   // read back with its pages dropped from the page cache first
};

// Takes the bytes of the journal's latest anchor (valid safetensors shards of the model),
// writes them as one file under `work_dir` with fsync, drops the file's cached pages and
// reads it back. The file is removed afterwards.
Result<BaselineTimes> measure_full_safetensors_baseline(const std::string& journal_root,
                                                        const std::string& work_dir);

}  // namespace weightcast::demo
