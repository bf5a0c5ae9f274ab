// The UCX backend under the transport conformance suite (shared memory and tcp, publisher and
// subscriber with separate contexts in one process), and against a publisher in a forked
// process (ucx_forked_publisher.h): a 16 MiB part arrives intact, and SIGKILLing the publisher
// mid-fetch is an error well before the deadline rather than a hang. Revoked buffers and a
// stopped publisher: ucx_failure_test.cc.
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tests/transport/transport_conformance.h"
#include "tests/transport_ucx/ucx_forked_publisher.h"
#include "tests/transport_ucx/ucx_made.h"
#include "transport/ucx/ucx_transport.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// UcxPublisherTransport maps parts in place and needs their bytes kept alive until the
// version is retired; the conformance suite frees its parts right after publish, so this
// wrapper keeps a copy of every published part for as long as the publisher exists (longer
// than the retire window, as a caller must). corrupt() flips a byte of that mapped copy.
class OwningPublisher final : public PartPublisher {
 public:
  explicit OwningPublisher(std::unique_ptr<UcxPublisherTransport> inner)
      : inner_(std::move(inner)) {}
  ~OwningPublisher() override { inner_.reset(); }  // unmapped before the bytes go

  TransportInfo info() const override { return inner_->info(); }
  Status publish(uint64_t version, std::span<const PartPayload> parts, Deadline deadline) override {
    auto& kept = kept_[version];
    const bool fresh = kept.empty();
    std::vector<PartPayload> payload;
    std::vector<std::vector<uint8_t>> copies;
    for (const auto& p : parts) copies.emplace_back(p.bytes.begin(), p.bytes.end());
    for (size_t i = 0; i < parts.size(); ++i) payload.push_back({parts[i].name, copies[i]});
    Status s = inner_->publish(version, payload, deadline);
    if (s.ok()) {
      for (size_t i = 0; i < parts.size(); ++i) kept[parts[i].name] = std::move(copies[i]);
    } else if (fresh) {
      kept_.erase(version);
    }
    return s;
  }

  void flip(uint64_t version, const std::string& part) {
    auto& bytes = kept_.at(version).at(part);
    bytes[bytes.size() / 2] ^= 0x40;
  }
  void close_worker() { inner_->close_worker(); }

 private:
  // Moving a vector keeps its buffer, so the mapped addresses stay valid.
  std::map<uint64_t, std::map<std::string, std::vector<uint8_t>>> kept_;
  std::unique_ptr<UcxPublisherTransport> inner_;
};

// Both halves on `store`, or none and why (TransportPeers::cannot_run).
TransportPeers make_peers(std::shared_ptr<InMemoryStore> store, const std::string& tls,
                          const UcxPublisherOptions& options, bool owning) {
  TransportPeers peers;
  auto publisher = UcxPublisherTransport::create(options);
  if (!publisher.ok()) {
    peers.cannot_run = publisher.status().to_string();
    return peers;
  }
  UcxSubscriberOptions sub;
  sub.store = std::move(store);
  sub.tls = tls;
  auto subscriber = UcxSubscriberTransport::create(sub);
  EXPECT_TRUE(subscriber.ok()) << subscriber.status().to_string();
  if (!subscriber.ok()) return peers;
  if (owning) {
    peers.publisher = std::make_unique<OwningPublisher>(std::move(*publisher));
  } else {
    peers.publisher = std::move(*publisher);
  }
  peers.subscriber = std::move(*subscriber);
  return peers;
}

TransportPeers connect_ucx(const std::string& tls) {
  auto store = std::make_shared<InMemoryStore>();
  TransportPeers peers = make_peers(store, tls, UcxPublisherOptions{store, tls, 2}, true);
  if (!peers.publisher) return peers;
  auto* raw = static_cast<OwningPublisher*>(peers.publisher.get());
  peers.corrupt = [raw](uint64_t version, const std::string& part) { raw->flip(version, part); };
  peers.break_publisher = [raw] { raw->close_worker(); };
  return peers;
}

// Memory::kCopyToSharedMemory: the publisher owns its copies, so nothing is kept here; corrupt()
// flips a byte of the copy itself, at the address the version blob gives (publisher and
// subscriber share this process). Over shm the subscriber reads the copy by loads from its
// mapping of the publisher's shared segment, over tcp by gets.
TransportPeers connect_ucx_copying(const std::string& tls) {
  auto store = std::make_shared<InMemoryStore>();
  UcxPublisherOptions options{store, tls, 2};
  options.memory = UcxPublisherOptions::Memory::kCopyToSharedMemory;
  TransportPeers peers = make_peers(store, tls, options, false);
  if (!peers.publisher) return peers;
  auto* raw = static_cast<UcxPublisherTransport*>(peers.publisher.get());
  peers.corrupt = [store](uint64_t version, const std::string& part) {
    auto stored = store->get(ucx_version_key(version));
    ASSERT_TRUE(stored.ok() && *stored) << "version " << version << " is not in the store";
    auto blob = decode_ucx_version_blob(**stored);
    ASSERT_TRUE(blob.ok()) << blob.status().to_string();
    for (const auto& p : blob->parts) {
      if (p.name == part) reinterpret_cast<uint8_t*>(p.remote_address)[p.bytes / 2] ^= 0x40;
    }
  };
  peers.break_publisher = [raw] { raw->close_worker(); };
  return peers;
}

// Both sides hash parts on the CPU, so the transport offers host memory only, whatever UCX
// could move, and says what UCX detected.
TEST(UcxTransportInfo, OffersHostMemoryAndNamesWhatUcxDetected) {
  auto store = std::make_shared<InMemoryStore>();
  UCX_PUBLISHER_OR_SKIP(publisher, {store, "shm", 2});
  UcxSubscriberOptions sub;
  sub.store = store;
  sub.tls = "shm";
  UCX_SUBSCRIBER(subscriber, sub);
  for (const TransportInfo& info : {publisher.info(), subscriber.info()}) {
    EXPECT_EQ(info.memory_kinds,
              (std::vector<MemoryKind>{MemoryKind::kHost, MemoryKind::kHostPinned}));
    EXPECT_NE(info.notes.find("UCX detected memory types: host"), std::string::npos) << info.notes;
  }
}

// A version published again by a new publisher (a restarted trainer) under the same number,
// with other bytes and another memory: the subscriber, which keeps the last blob it decoded,
// describes and fetches the new one, and refuses the old descriptor. Both publisher memories:
// in place (another worker and rkey) and copies (another shared segment).
class UcxRepublished : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(UcxRepublished, SameVersionFromANewPublisherIsReadAnew) {
  const auto& [tls, copies] = GetParam();
  auto store = std::make_shared<InMemoryStore>();
  const std::vector<uint8_t> first = pattern(300000, 1), second = pattern(200000, 2);
  UcxPublisherOptions options{store, tls, 2};
  if (copies) options.memory = UcxPublisherOptions::Memory::kCopyToSharedMemory;
  UcxSubscriberOptions sub;
  sub.store = store;
  sub.tls = tls;
  auto first_made = UcxPublisherTransport::create(options);
  if (!first_made.ok()) GTEST_SKIP() << "UCX cannot run here: " << first_made.status().to_string();
  UCX_SUBSCRIBER(subscriber, sub);
  PartDescriptor old_part;
  {
    const std::unique_ptr<UcxPublisherTransport> a_owned = std::move(*first_made);
    UcxPublisherTransport& a = *a_owned;  // destroyed at the end of this scope
    const PartPayload p{"weights", first};
    ASSERT_TRUE(a.publish(7, {&p, 1}, deadline_in(seconds(10))).ok());
    auto d = subscriber.describe(7, deadline_in(seconds(5)));
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    old_part = d->parts.at(0);
    std::vector<uint8_t> dest(first.size());
    ASSERT_TRUE(subscriber.fetch(7, old_part, dest, deadline_in(seconds(10))).ok());
    ASSERT_TRUE(dest == first);
  }
  UCX_PUBLISHER_OR_SKIP(b, options);
  const PartPayload p{"weights", second};
  ASSERT_TRUE(b.publish(7, {&p, 1}, deadline_in(seconds(10))).ok());
  auto d = subscriber.describe(7, deadline_in(seconds(5)));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  ASSERT_EQ(d->parts.at(0).bytes, second.size());
  std::vector<uint8_t> dest(second.size());
  const Status s = subscriber.fetch(7, d->parts.at(0), dest, deadline_in(seconds(10)));
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(dest == second);
  std::vector<uint8_t> old_dest(first.size());
  const Status stale = subscriber.fetch(7, old_part, old_dest, deadline_in(seconds(10)));
  EXPECT_EQ(stale.code(), StatusCode::kInvalidArgument) << stale.to_string();
}

// A store entry whose blob describes another version is corruption, also when those bytes
// are the blob the subscriber decoded last.
TEST(UcxSubscriberBlobs, AnEntryDescribingAnotherVersionIsDataLoss) {
  auto store = std::make_shared<InMemoryStore>();
  const std::vector<uint8_t> bytes = pattern(5000, 3);
  UCX_PUBLISHER_OR_SKIP(publisher, {store, "shm", 2});
  const PartPayload p{"weights", bytes};
  ASSERT_TRUE(publisher.publish(1, {&p, 1}, deadline_in(seconds(10))).ok());
  UcxSubscriberOptions sub;
  sub.store = store;
  sub.tls = "shm";
  UCX_SUBSCRIBER(subscriber, sub);
  ASSERT_TRUE(subscriber.describe(1, deadline_in(seconds(5))).ok());  // decoded and kept
  auto v1 = store->get(ucx_version_key(1));
  ASSERT_TRUE(v1.ok() && *v1);
  ASSERT_TRUE(store->put(ucx_version_key(2), **v1).ok());
  auto d = subscriber.describe(2, deadline_in(seconds(5)));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxRepublished,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_copy" : "_in_place");
                         });

INSTANTIATE_TEST_SUITE_P(
    Ucx, TransportConformance,
    ::testing::Values(
        TransportBackend{"ucx_shm", [] { return connect_ucx("shm"); }},
        TransportBackend{"ucx_tcp", [] { return connect_ucx("tcp"); }},
        TransportBackend{"ucx_shm_copying", [] { return connect_ucx_copying("shm"); }},
        TransportBackend{"ucx_tcp_copying", [] { return connect_ucx_copying("tcp"); }}),
    [](const auto& info) { return info.param.name; });

TEST_P(UcxForkedPublisher, PartArrivesFromAnotherProcess) {
  constexpr size_t kBytes = 16 << 20;
  if (!start(kBytes)) {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    return;
  }
  UCX_SUBSCRIBER(subscriber, subscriber_options());
  auto d = subscriber.latest(deadline_in(seconds(10)));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  ASSERT_EQ(d->parts.size(), 1u);
  ASSERT_EQ(d->parts[0].bytes, kBytes);
  std::vector<uint8_t> dest(kBytes);
  Status s = subscriber.fetch(1, d->parts[0], dest, deadline_in(seconds(60)));
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(dest == pattern(kBytes));
  // Released, the publisher exits cleanly.
  ::close(release_fd_);
  release_fd_ = -1;
  int status = 0;
  ASSERT_EQ(::waitpid(pid_, &status, 0), pid_);
  pid_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST_P(UcxForkedPublisher, PublisherKilledMidFetchIsAnErrorNotAHang) {
  constexpr size_t kBytes = 256 << 20;
  if (!start(kBytes)) {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    return;
  }
  constexpr auto kDeadline = seconds(60);
  const auto r =
      fetch_killing_publisher(subscriber_options(), kBytes, 8u << 20, deadline_in(kDeadline));
  ASSERT_NE(r.killed_at, 0u) << "the fetch never reached 8 MiB: " << r.status.to_string();
  EXPECT_LT(r.killed_at, kBytes);
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(r.status.code(), StatusCode::kDeadlineExceeded) << r.status.to_string();
  EXPECT_LT(r.elapsed, kDeadline);
  std::printf("fetch after SIGKILL at %llu bytes: %s after %lld ms\n",
              static_cast<unsigned long long>(r.killed_at), r.status.to_string().c_str(),
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(r.elapsed).count()));
}

// A publisher serving copies (Memory::kCopyToSharedMemory) killed mid-fetch: over shm the
// subscriber reads the copy by loads from its own mapping, which outlives the publisher, so
// the fetch completes with the right bytes; over tcp the gets fail as with in-place memory.
// Either way: never a hang, never wrong bytes reported as ok.
TEST_P(UcxForkedPublisher, CopyServingPublisherKilledMidFetch) {
  constexpr size_t kBytes = 64 << 20;
  if (!start(kBytes, 2, UcxPublisherOptions::Memory::kCopyToSharedMemory)) {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    return;
  }
  constexpr auto kDeadline = seconds(60);
  const auto r =
      fetch_killing_publisher(subscriber_options(), kBytes, 8u << 20, deadline_in(kDeadline));
  ASSERT_NE(r.killed_at, 0u) << "the fetch never reached 8 MiB: " << r.status.to_string();
  EXPECT_LT(r.elapsed, kDeadline);
  if (GetParam() == "shm") {
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_TRUE(r.dest == pattern(kBytes));
  } else {
    EXPECT_FALSE(r.status.ok());
    EXPECT_NE(r.status.code(), StatusCode::kDeadlineExceeded) << r.status.to_string();
  }
  std::printf("UCX_TLS=%s, copy-serving publisher killed mid-fetch: %s\n", GetParam().c_str(),
              r.status.to_string().c_str());
}

// Copies are read by loads from the shared segment where shared memory is allowed (shm), by
// gets elsewhere (tcp), from another process either way.
TEST_P(UcxForkedPublisher, CopiesAreReadFromTheSharedSegmentOverShm) {
  constexpr size_t kBytes = 16 << 20;
  if (!start(kBytes, 2, UcxPublisherOptions::Memory::kCopyToSharedMemory)) {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    return;
  }
  UCX_SUBSCRIBER(subscriber, subscriber_options());
  auto d = subscriber.latest(deadline_in(seconds(10)));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  std::vector<uint8_t> dest(kBytes);
  Status s = subscriber.fetch(1, d->parts[0], dest, deadline_in(seconds(60)));
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(dest == pattern(kBytes));
  const auto counts = subscriber.read_counts();
  if (GetParam() == "shm") {
    EXPECT_EQ(counts.loads, 1u);
    EXPECT_EQ(counts.gets, 0u);
    EXPECT_TRUE(subscriber.segment_failures().empty());
  } else {
    EXPECT_EQ(counts.loads, 0u);
    EXPECT_EQ(counts.gets, 1u);
  }
}

// The case that crashed UCX 1.13 when copies were UCX-allocated memory: the publisher is gone
// before the subscriber first touches the version. Over shm its segment no longer opens and
// /proc says the process exited: a sticky connection error without touching UCX. Over tcp
// the gets' endpoint fails. Never a crash, never a hang.
TEST_P(UcxForkedPublisher, CopyServingPublisherGoneBeforeTheFetchIsAnError) {
  constexpr size_t kBytes = 1 << 20;
  if (!start(kBytes, 2, UcxPublisherOptions::Memory::kCopyToSharedMemory)) {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    return;
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  UCX_SUBSCRIBER(subscriber, subscriber_options());
  auto d = subscriber.describe(1, deadline_in(seconds(10)));  // the blob outlives its publisher
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  std::vector<uint8_t> dest(kBytes);
  const Status s = subscriber.fetch(1, d->parts[0], dest, deadline_in(seconds(20)));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(subscriber.read_counts().loads, 0u);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
  if (GetParam() == "shm") {
    EXPECT_NE(s.message().find("has exited"), std::string::npos) << s.to_string();
    EXPECT_EQ(subscriber.read_counts().gets, 0u);
    const auto failures = subscriber.segment_failures();
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_NE(failures[0].find("/proc/"), std::string::npos) << failures[0];
  }
  const Status again = subscriber.fetch(1, d->parts[0], dest, deadline_in(seconds(20)));
  EXPECT_EQ(again.code(), StatusCode::kUnavailable) << again.to_string();
  std::printf("UCX_TLS=%s, fetch from a copy-serving publisher already gone: %s\n",
              GetParam().c_str(), s.to_string().c_str());
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxForkedPublisher, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace weightcast::testing
