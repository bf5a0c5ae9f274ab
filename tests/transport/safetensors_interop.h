// The `safetensors` package reading an anchor the journal wrote, for the interop tests:
// tests/transport/anchor_stream_check.py run by the interop Python (WEIGHTCAST_PYTHON, set by
// tests/CMakeLists.txt; `make pyenv` makes it) against the tensors the anchor must hold.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/dtype.h"

#ifndef WEIGHTCAST_PYTHON
#define WEIGHTCAST_PYTHON ""
#endif
#ifndef WEIGHTCAST_TRANSPORT_TEST_DIR
#define WEIGHTCAST_TRANSPORT_TEST_DIR ""
#endif

namespace weightcast::testing {

// Runs `command` with its stdout and stderr into `log`, read back into `output`; the exit
// status (-1 when it did not exit).
inline int run_logged(const std::string& command, const std::string& log, std::string* output) {
  const int rc = std::system((command + " > '" + log + "' 2>&1").c_str());
  std::ifstream in(log);
  output->assign(std::istreambuf_iterator<char>(in), {});
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Why the check cannot run here (the reason to skip with), empty when it can; `scratch` is a
// directory for its log.
inline std::string safetensors_unavailable(const std::string& scratch) {
  const std::string python = WEIGHTCAST_PYTHON;
  std::string output;
  if (!python.empty() && run_logged("'" + python + "' -c 'import safetensors, torch'",
                                    scratch + "/probe.log", &output) == 0) {
    return "";
  }
  return "'" + python + "' cannot import safetensors and torch (run: make pyenv): " + output;
}

// A tensor the anchor must hold: its raw little-endian row-major bytes.
struct ExpectedTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};

// Runs the check on the anchor in `anchor_dir` against `tensors` (written as raw files and a
// list under `scratch`); its exit status, with its output in `output` ("anchor_stream_check: N
// tensors in M shards equal the model" when they do).
inline int check_anchor_with_safetensors(const std::string& anchor_dir,
                                         const std::vector<ExpectedTensor>& tensors,
                                         const std::string& scratch, std::string* output) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string file = scratch + "/expected-" + std::to_string(i) + ".bin";
    std::ofstream(file, std::ios::binary)
        .write(reinterpret_cast<const char*>(tensors[i].bytes.data()),
               static_cast<std::streamsize>(tensors[i].bytes.size()));
    list.push_back({{"name", tensors[i].name},
                    {"dtype", std::string(dtype_info(tensors[i].dtype).safetensors)},
                    {"shape", tensors[i].shape},
                    {"file", file}});
  }
  std::ofstream(scratch + "/expected.json") << list.dump();
  const std::string script = std::string(WEIGHTCAST_TRANSPORT_TEST_DIR) + "/anchor_stream_check.py";
  return run_logged("'" + std::string(WEIGHTCAST_PYTHON) + "' '" + script + "' '" + anchor_dir +
                        "' '" + scratch + "/expected.json'",
                    scratch + "/check.log", output);
}

}  // namespace weightcast::testing
