#include "tests/fuzz/ucx_blob_fuzz_seeds.h"

#include "transport/ucx/ucx_version_blob.h"

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_ucx_blob_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  UcxVersionBlob blob;
  blob.version = 7;
  blob.worker_address = std::vector<uint8_t>(48, 0xab);
  auto add = [&] {
    auto bytes = encode_ucx_version_blob(blob);
    if (bytes.ok()) seeds.push_back(*bytes);
  };
  add();
  blob.parts.push_back({"empty", 0, 0x2d06800538d394c2ull, 0, {}});
  add();
  blob.parts.push_back(
      {"weights.part-0", 1 << 20, 0x1234, 0x7f0000001000, std::vector<uint8_t>(90, 1)});
  blob.parts.push_back(
      {"weights.part-1", 12345, 0x5678, 0x7f0000200000, std::vector<uint8_t>(17, 2)});
  add();
  blob.has_segment = true;  // copies in a shared segment
  blob.segment.host = "6d0c6b1e-2f4a-4a51-9a0e-3b5e0c1d2e3f";
  blob.segment.pid_namespace = 4026531836;
  blob.segment.pid = 1234;
  blob.segment.fd = 9;
  blob.segment.nonce.fill(0x3c);
  blob.segment.bytes = (1 << 20) + 12352;
  blob.parts[2].segment_offset = 1 << 20;
  add();
  return seeds;
}

}  // namespace weightcast::fuzzing
