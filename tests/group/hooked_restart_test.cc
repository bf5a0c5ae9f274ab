// A hooked publisher (src/endpoint/publish_step.h) killed with SIGKILL in the middle of a step
// leaves the journal on the previous version; restarted on its weights at that version (as a
// trainer reloads its checkpoint), it publishes the next version as a delta against the
// journal's head, its base verified against the head's checksums, and the engine verifies it.
// Restarted on weights that are not the head's, the next version is an anchor instead.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/group/trainer_side.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {
namespace {

using namespace weightcast::testing;
using std::chrono::seconds;

// Registers every tensor of `w` as hooked.
Status register_hooked(Publisher& p, Weights& w) {
  for (const auto& r : w.refs()) RETURN_IF_ERROR(p.register_tensor(r, TensorUpdates::kHooked));
  return ok_status();
}

// Writes every element of version v through `step`, tensor by tensor, whole.
Status write_all(PublishStep& step, Weights& live, uint64_t v, bool only_packed = false) {
  Weights next;
  next.set(v);
  const auto refs = live.refs();
  const auto news = next.refs();
  for (size_t i = 0; i < refs.size(); ++i) {
    if (only_packed && refs[i].name == "vec") continue;
    // The new values of a strided half, gathered row-major.
    std::vector<uint16_t> values;
    const ElementAddresser at(news[i]);
    const auto* base = static_cast<const uint16_t*>(news[i].data) + news[i].offset;
    for (uint64_t k = 0; k < news[i].numel(); ++k) values.push_back(base[at.offset_of(k)]);
    RETURN_IF_ERROR(
        step.write(refs[i], TensorRef::contiguous("new", DType::kBF16, values.data(),
                                                  static_cast<int64_t>(values.size()))));
  }
  return ok_status();
}

// The child: versions 1 and 2 published, then half of version 3 written; says so on `ready`
// and waits to be killed.
[[noreturn]] void child(const TestGroup& g, int ready) {
  CoordinatorThread coordinator(g);
  auto p = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  Weights w;
  w.set(0);
  if (!p.ok() || !register_hooked(**p, w).ok()) _exit(3);
  for (uint64_t v = 1; v <= 2; ++v) {
    auto step = (*p)->begin_step(v);
    if (!step.ok() || !write_all(**step, w, v).ok()) _exit(4);
    auto h = (*p)->publish_step(*step);
    if (!h.ok() || !h->wait_published(in(seconds(30))).ok()) _exit(5);
  }
  auto step = (*p)->begin_step(3);
  if (!step.ok() || !write_all(**step, w, 3, /*only_packed=*/true).ok()) _exit(6);
  const char byte = 'x';
  if (::write(ready, &byte, 1) != 1) _exit(7);
  while (true) ::pause();
}

TEST(HookedRestart, ASigkilledStepLeavesThePreviousVersionAndTheRestartPublishesAgainstIt) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 100;
  TestGroup g(spec);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) child(g, pipe_fds[1]);
  ::close(pipe_fds[1]);
  pollfd pfd{pipe_fds[0], POLLIN, 0};
  const int polled = ::poll(&pfd, 1, 60000);
  char byte = 0;
  const bool ready = polled == 1 && ::read(pipe_fds[0], &byte, 1) == 1;
  ::close(pipe_fds[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(ready) << "the child did not reach the middle of version 3 (exit status "
                     << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ")";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  const JournalLayout layout(g.journal());
  auto head = read_head_file(layout.head());
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_EQ(head->version(), 2u);
  EXPECT_FALSE(read_manifest_file(layout.manifest(3)).ok());

  // The restart: the trainer's weights are version 2 again.
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  auto p = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Weights w;
  w.set(2);
  ASSERT_TRUE(register_hooked(**p, w).ok());
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, one_thread<SubscriberOptions>(2), engine, bad);
  ASSERT_NE(sub, nullptr);
  auto step = (*p)->begin_step(3);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  ASSERT_TRUE(write_all(**step, w, 3).ok());
  auto h = (*p)->publish_step(*step);
  ASSERT_TRUE(h.ok());
  Status committed = h->wait_committed(in(seconds(30)));
  ASSERT_TRUE(committed.ok()) << committed.to_string();
  auto v3 = read_manifest_file(layout.manifest(3));
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(v3->kind(), proto::STEP_DELTA);
  EXPECT_EQ(v3->base_version(), 2u);
  EXPECT_TRUE(engine_at(*sub, engine, 3));
  EXPECT_TRUE(bad.empty()) << bad.front();
  (*p)->stop();
  p->reset();

  // Restarted on weights that are not the head's (version 1's), the next version is an anchor.
  auto again = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  Weights stale;
  stale.set(1);
  ASSERT_TRUE(register_hooked(**again, stale).ok());
  auto step4 = (*again)->begin_step(4);
  ASSERT_TRUE(step4.ok());
  ASSERT_TRUE(write_all(**step4, stale, 4).ok());
  auto h4 = (*again)->publish_step(*step4);
  ASSERT_TRUE(h4.ok());
  ASSERT_TRUE(h4->wait_committed(in(seconds(30))).ok());
  auto v4 = read_manifest_file(layout.manifest(4));
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->kind(), proto::STEP_ANCHOR);
  EXPECT_TRUE(engine_at(*sub, engine, 4));
}

}  // namespace
}  // namespace weightcast
