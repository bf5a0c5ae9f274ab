// A UCX publisher in a forked process, shared by the UCX transport tests: the child publishes
// version 1 into a FileStore in a scratch directory, then obeys one-byte commands from the
// parent (publish the next version, overwrite version 1's bytes) until the parent closes the
// command pipe.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/ucx/ucx_transport.h"

namespace weightcast::testing {

// Bytes that depend on their offset (and seed) only, cheap enough for 256 MiB in Debug.
inline std::vector<uint8_t> pattern(size_t bytes, uint64_t seed = 0x9E3779B97F4A7C15ull) {
  std::vector<uint8_t> out(bytes);
  uint64_t x = seed;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<uint8_t>(x);
  }
  return out;
}

inline constexpr int kChildNotViable = 3;
inline constexpr size_t kForkedLaterPartBytes = 4096;  // the part of versions 2, 3, ...

// The publisher process: publishes one part "weights" of `bytes` (pattern(bytes)) as version
// 1, keeping `keep_versions` versions readable, then answers each command byte read from
// `command_fd` with 'k' (done) or 'e' (failed) on `reply_fd`:
//   'p'  publishes the next version (a part "weights" of kForkedLaterPartBytes), which retires
//        the oldest version beyond the window (its store entry erased, its memory unmapped);
//   'o'  overwrites version 1's bytes, as a caller reusing the memory of a retired version.
// Returns the exit status (0) once the parent closes `command_fd`.
inline int run_publisher(const std::string& tls, const std::string& dir, size_t bytes,
                         size_t keep_versions, UcxPublisherOptions::Memory memory, int command_fd,
                         int reply_fd) {
  std::vector<uint8_t> first = pattern(bytes);
  std::deque<std::vector<uint8_t>> later;  // declared before the publisher: unmapped first
  auto made =
      UcxPublisherTransport::create({std::make_shared<FileStore>(dir), tls, keep_versions, memory});
  if (!made.ok()) return kChildNotViable;
  UcxPublisherTransport& publisher = **made;
  const PartPayload part{"weights", first};
  if (!publisher.publish(1, {&part, 1}, deadline_in(std::chrono::seconds(30))).ok()) return 4;
  uint64_t version = 1;
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(command_fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    bool ok = false;
    if (c == 'p') {
      ++version;
      later.push_back(pattern(kForkedLaterPartBytes, version));
      const PartPayload next{"weights", later.back()};
      ok = publisher.publish(version, {&next, 1}, deadline_in(std::chrono::seconds(30))).ok();
    } else if (c == 'o') {
      std::memset(first.data(), 0xA5, first.size());
      ok = true;
    }
    const char reply = ok ? 'k' : 'e';
    if (::write(reply_fd, &reply, 1) != 1) return 5;
  }
}

// One test's scratch directory and forked publisher. UCX is not touched in the parent before
// the fork, so the child starts from a clean UCX state (no inherited async thread).
class UcxForkedPublisher : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    if (release_fd_ >= 0) ::close(release_fd_);
    if (reply_fd_ >= 0) ::close(reply_fd_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);  // also ends a stopped child
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Forks the publisher and waits until version 1 is in the store; false (with a failure
  // added, or skip_reason_ set) when that does not happen.
  bool start(size_t bytes, size_t keep_versions = 2,
             UcxPublisherOptions::Memory memory = UcxPublisherOptions::Memory::kInPlace) {
    ::signal(SIGPIPE, SIG_IGN);  // a command to a dead child is an error, not a dead test
    char tmpl[] = "/tmp/weightcast-ucx-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << tmpl << " for the publisher's store: " << std::strerror(errno);
      return false;
    }
    dir_ = tmpl;
    int commands[2];
    int replies[2];
    if (::pipe(commands) != 0 || ::pipe(replies) != 0) {
      ADD_FAILURE() << "pipe to the forked publisher: " << std::strerror(errno);
      return false;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(commands[1]);
      ::close(replies[0]);
      ::_exit(
          run_publisher(GetParam(), dir_, bytes, keep_versions, memory, commands[0], replies[1]));
    }
    ::close(commands[0]);
    ::close(replies[1]);
    release_fd_ = commands[1];
    reply_fd_ = replies[0];
    store_ = std::make_shared<FileStore>(dir_);
    const Deadline deadline = deadline_in(std::chrono::seconds(60));
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
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "the publisher process did not publish within 60 s";
    return false;
  }

  // Sends one command (see run_publisher) and waits at most `timeout` for its reply; true
  // when the child carried it out.
  bool command(char c, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (::write(release_fd_, &c, 1) != 1) return false;
    pollfd pfd{reply_fd_, POLLIN, 0};
    int r = 0;
    do {
      r = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    char reply = 0;
    return r == 1 && ::read(reply_fd_, &reply, 1) == 1 && reply == 'k';
  }

  UcxSubscriberOptions subscriber_options() const {
    UcxSubscriberOptions o;
    o.store = store_;
    o.tls = GetParam();
    return o;
  }

  // What fetch_killing_publisher saw.
  struct KilledFetch {
    Status status = ok_status();
    std::vector<uint8_t> dest;
    uint64_t killed_at = 0;  // bytes received when the publisher was killed; 0: never
    std::chrono::steady_clock::duration elapsed{};
  };

  // Fetches version 1's part (`bytes` long) with `options`, SIGKILLing the publisher from
  // inside the fetch once `kill_at` bytes have arrived, so the kill always lands mid-transfer.
  KilledFetch fetch_killing_publisher(UcxSubscriberOptions options, size_t bytes, uint64_t kill_at,
                                      Deadline deadline) {
    KilledFetch out;
    options.after_chunk = [&](uint64_t done) {
      if (out.killed_at != 0 || done < kill_at) return;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      out.killed_at = done;
    };
    auto made = UcxSubscriberTransport::create(options);
    if (!made.ok()) {
      out.status = made.status();
      return out;
    }
    UcxSubscriberTransport& subscriber = **made;
    auto d = subscriber.describe(1, deadline_in(std::chrono::seconds(10)));
    if (!d.ok()) {
      out.status = d.status();
      return out;
    }
    out.dest.resize(bytes);
    const auto start_time = std::chrono::steady_clock::now();
    out.status = subscriber.fetch(1, d->parts[0], out.dest, deadline);
    out.elapsed = std::chrono::steady_clock::now() - start_time;
    if (out.status.ok() || out.status.code() == StatusCode::kDeadlineExceeded) return out;
    // A connection error breaks the connection: the next fetch is kUnavailable.
    Status again = subscriber.fetch(1, d->parts[0], out.dest, deadline);
    if (again.code() != StatusCode::kUnavailable) {
      ADD_FAILURE() << "the fetch after a connection error was not a sticky error: "
                    << again.to_string();
    }
    return out;
  }

  std::string dir_;
  std::string skip_reason_;  // set by start() when the publisher cannot run here
  pid_t pid_ = -1;
  int release_fd_ = -1;  // the command pipe: closing it releases the child
  int reply_fd_ = -1;
  std::shared_ptr<FileStore> store_;
};

}  // namespace weightcast::testing
