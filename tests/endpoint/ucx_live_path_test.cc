// The ucx live path (src/endpoint/ucx_live.h) under the live-path conformance suite
// (tests/endpoint/live_path_conformance.h): server and fetcher in one process over UCX's
// shared-memory and TCP transports, the server serving in place and from shared-memory
// copies. A build without UCX skips every case and says so.
#include <string>

#include "src/endpoint/ucx_live.h"
#include "tests/endpoint/live_path_conformance.h"

namespace weightcast::testing {
namespace {

LivePathBackend ucx(const std::string& tls, const std::string& publisher_memory) {
  LivePathBackend b;
  b.name = "ucx_" + tls + "_" + publisher_memory;
  b.path = ucx_live_path();
  b.config = live_path_test_config("ucx");
  b.config.mutable_ucx()->set_tls(tls);
  b.config.mutable_ucx()->set_publisher_memory(publisher_memory);
  return b;
}

INSTANTIATE_TEST_SUITE_P(Ucx, LivePathConformance,
                         ::testing::Values(ucx("shm", "in_place"), ucx("shm", "copy"),
                                           ucx("tcp", "in_place"), ucx("tcp", "copy")),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace weightcast::testing
