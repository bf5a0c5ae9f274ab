// The UCX backend under the transport conformance suite (shared memory and tcp, publisher and
// subscriber with separate contexts in one process), and against a publisher in a forked
// process: a 16 MiB part arrives intact, and SIGKILLing the publisher mid-fetch is an error
// well before the deadline rather than a hang.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "tests/transport/transport_conformance.h"
#include "transport/ucx/ucx_transport.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// UcxPublisherTransport maps parts in place and needs their bytes kept alive until the
// version is retired; the conformance suite frees its parts right after publish, so this
// wrapper keeps a copy of every published part for as long as the publisher exists (longer
// than the retire window, as a caller must). corrupt() flips a byte of that mapped copy.
class OwningPublisher final : public Transport {
 public:
  explicit OwningPublisher(UcxPublisherOptions options)
      : inner_(std::make_unique<UcxPublisherTransport>(std::move(options))) {}
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
  Result<VersionDescriptor> latest(Deadline d) override { return inner_->latest(d); }
  Result<VersionDescriptor> describe(uint64_t v, Deadline d) override {
    return inner_->describe(v, d);
  }
  Status fetch(uint64_t v, const PartDescriptor& p, std::span<uint8_t> dest, Deadline d) override {
    return inner_->fetch(v, p, dest, d);
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

TransportPeers connect_ucx(const std::string& tls) {
  auto store = std::make_shared<InMemoryStore>();
  auto publisher = std::make_unique<OwningPublisher>(UcxPublisherOptions{store, tls, 2});
  OwningPublisher* raw = publisher.get();
  UcxSubscriberOptions sub;
  sub.store = store;
  sub.tls = tls;
  TransportPeers peers;
  peers.publisher = std::move(publisher);
  peers.subscriber = std::make_unique<UcxSubscriberTransport>(sub);
  peers.corrupt = [raw](uint64_t version, const std::string& part) { raw->flip(version, part); };
  peers.break_publisher = [raw] { raw->close_worker(); };
  return peers;
}

INSTANTIATE_TEST_SUITE_P(
    Ucx, TransportConformance,
    ::testing::Values(TransportBackend{"ucx_shm", [] { return connect_ucx("shm"); }},
                      TransportBackend{"ucx_tcp", [] { return connect_ucx("tcp"); }}),
    [](const auto& info) { return info.param.name; });

// Bytes that depend on their offset only, cheap enough for 256 MiB in a Debug build.
std::vector<uint8_t> pattern(size_t bytes) {
  std::vector<uint8_t> out(bytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<uint8_t>(x);
  }
  return out;
}

constexpr int kChildNotViable = 3;

// The publisher process: publishes one part "weights" of `bytes` as version 1, then waits
// until the parent closes `release_fd` (or kills it). Returns the exit status.
int run_publisher(const std::string& tls, const std::string& dir, size_t bytes, int release_fd) {
  const std::vector<uint8_t> data = pattern(bytes);
  UcxPublisherTransport publisher({std::make_shared<FileStore>(dir), tls, 2});
  if (!publisher.info().viable) return kChildNotViable;
  const PartPayload part{"weights", data};
  if (!publisher.publish(1, {&part, 1}, deadline_in(seconds(30))).ok()) return 4;
  char c;
  while (::read(release_fd, &c, 1) < 0 && errno == EINTR) {
  }
  return 0;
}

// One test's scratch directory and forked publisher. UCX is not touched in the parent before
// the fork, so the child starts from a clean UCX state (no inherited async thread).
class UcxForkedPublisher : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    if (release_fd_ >= 0) ::close(release_fd_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Forks the publisher and waits until version 1 is in the store; false (with a failure
  // added, or skip_reason_ set) when that does not happen.
  bool start(size_t bytes) {
    char tmpl[] = "/tmp/weightcast-ucx-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return false;
    dir_ = tmpl;
    int fds[2];
    if (::pipe(fds) != 0) return false;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      ::_exit(run_publisher(GetParam(), dir_, bytes, fds[0]));
    }
    ::close(fds[0]);
    release_fd_ = fds[1];
    store_ = std::make_shared<FileStore>(dir_);
    const Deadline deadline = deadline_in(seconds(60));
    while (std::chrono::steady_clock::now() < deadline) {
      auto latest = store_->get(kUcxLatestKey);
      if (latest.ok() && *latest) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (WIFEXITED(status) && WEXITSTATUS(status) == kChildNotViable) {
          skip_reason_ = "ucx with UCX_TLS=" + GetParam() + " cannot run here";
        } else {
          ADD_FAILURE() << "the publisher process exited early, status " << status;
        }
        return false;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    ADD_FAILURE() << "the publisher process did not publish within 60 s";
    return false;
  }

  UcxSubscriberOptions subscriber_options() const {
    UcxSubscriberOptions o;
    o.store = store_;
    o.tls = GetParam();
    return o;
  }

  std::string dir_;
  std::string skip_reason_;  // set by start() when the publisher cannot run here
  pid_t pid_ = -1;
  int release_fd_ = -1;
  std::shared_ptr<FileStore> store_;
};

TEST_P(UcxForkedPublisher, PartArrivesFromAnotherProcess) {
  constexpr size_t kBytes = 16 << 20;
  if (!start(kBytes)) {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    return;
  }
  UcxSubscriberTransport subscriber(subscriber_options());
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
  UcxSubscriberOptions options = subscriber_options();
  bool killed = false;
  uint64_t done_at_kill = 0;
  // Killed from inside the fetch, after its first chunks, so it is always mid-transfer.
  options.after_chunk = [&](uint64_t done) {
    if (killed || done < (8u << 20)) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    killed = true;
    done_at_kill = done;
  };
  UcxSubscriberTransport subscriber(options);
  auto d = subscriber.describe(1, deadline_in(seconds(10)));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  std::vector<uint8_t> dest(kBytes);
  constexpr auto kDeadline = seconds(60);
  const auto start_time = std::chrono::steady_clock::now();
  Status s = subscriber.fetch(1, d->parts[0], dest, start_time + kDeadline);
  const auto elapsed = std::chrono::steady_clock::now() - start_time;
  ASSERT_TRUE(killed) << "the fetch never reached 8 MiB: " << s.to_string();
  EXPECT_LT(done_at_kill, kBytes);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_LT(elapsed, kDeadline);
  std::printf("fetch after SIGKILL at %llu bytes: %s after %lld ms\n",
              static_cast<unsigned long long>(done_at_kill), s.to_string().c_str(),
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(elapsed).count()));
  // A connection error is sticky.
  Status again = subscriber.fetch(1, d->parts[0], dest, deadline_in(seconds(10)));
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("sticky"), std::string::npos) << again.to_string();
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxForkedPublisher, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace weightcast::testing
