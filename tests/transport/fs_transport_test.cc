// The filesystem backend under the transport conformance suite.
#include <fstream>

#include "tests/transport/journal_test_model.h"
#include "tests/transport/transport_conformance.h"
#include "transport/fs/fs_transport.h"

namespace weightcast::testing {
namespace {

TransportPeers connect_fs() {
  // One scratch root per test, removed when the last peer goes away.
  auto dir = std::make_shared<ScratchDir>();
  auto fail_writes = std::make_shared<bool>(false);
  FsTransportOptions pub;
  pub.root = dir->path();
  pub.before_write = [fail_writes, dir](const std::string& file, uint64_t) {
    return *fail_writes ? io_error("cannot write '" + file + "': No space left on device")
                        : ok_status();
  };
  FsTransportOptions sub;
  sub.root = dir->path();
  TransportPeers peers;
  auto publisher = FsPartPublisher::create(pub);
  auto subscriber = FsPartReader::create(sub);
  EXPECT_TRUE(publisher.ok() && subscriber.ok())
      << publisher.status().to_string() << subscriber.status().to_string();
  if (!publisher.ok() || !subscriber.ok()) return peers;
  peers.publisher = std::move(*publisher);
  peers.subscriber = std::move(*subscriber);
  peers.corrupt = [dir](uint64_t version, const std::string& part) {
    const std::string path = JournalLayout(dir->path()).step(version) + "/" + part;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    const char c = static_cast<char>(f.get() ^ 0x40);
    f.seekp(100);
    f.put(c);
  };
  peers.break_publisher = [fail_writes] { *fail_writes = true; };
  return peers;
}

INSTANTIATE_TEST_SUITE_P(Fs, TransportConformance,
                         ::testing::Values(TransportBackend{"fs", connect_fs}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace weightcast::testing
