// weightcast_outside CONFIG: a trainer and an engine in one process, built against the
// installed package with nothing but <weightcast/...>. CONFIG is a group of a coordinator
// (running, rank 0), a publisher (rank 1) and a subscriber (rank 2). Exits 0 when every
// check holds; prints the first failed one otherwise.
#include <weightcast/weightcast.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace wc = weightcast::api;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CONFIG\n", argv[0]);
    return 2;
  }
  const std::string config = argv[1];
  const auto timeout = std::chrono::seconds(30);
  wc::LogCallback log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };

  // Errors come back as a Status naming the culprit.
  auto missing = wc::Publisher::start(config + ".missing", 1);
  check(!missing.ok() && missing.status().message().find(config + ".missing") != std::string::npos,
        "a missing config file names the file: " + missing.status().to_string());
  auto wrong_role = wc::Subscriber::create(config, 1);
  check(!wrong_role.ok() && wrong_role.status().code() == wc::StatusCode::kInvalidArgument,
        "a publisher rank refused as a subscriber: " + wrong_role.status().to_string());
  check(wc::dtype_size(wc::DType::kBF16) == 2 && wc::dtype_size(wc::DType::kF32) == 4,
        "dtype sizes");

  // The engine: zeroed weights, paused around every apply.
  constexpr int64_t kCount = 4096;
  std::vector<float> engine(kCount, 0.0f);
  std::atomic<int> paused{0};
  std::atomic<int> resumed{0};
  wc::SubscriberOptions so;
  so.threads = 1;
  so.log = log;
  so.before_apply = [&](uint64_t) { ++paused; };
  so.after_apply = [&](uint64_t) { ++resumed; };
  auto sub = wc::Subscriber::create(config, 2, so);
  if (!sub.ok()) {
    std::fprintf(stderr, "FAIL: subscriber: %s\n", sub.status().to_string().c_str());
    return 1;
  }
  check(
      (*sub)
          ->register_tensor(wc::TensorRef::contiguous("w", wc::DType::kF32, engine.data(), kCount))
          .ok(),
      "subscriber registers a tensor");
  check((*sub)->connect().ok(), "subscriber connects");

  // The trainer.
  std::vector<float> trainer(kCount);
  for (int64_t i = 0; i < kCount; ++i) trainer[i] = 0.25f * static_cast<float>(i);
  wc::PublisherOptions po;
  po.threads = 1;
  po.log = log;
  auto pub = wc::Publisher::start(config, 1, po);
  if (!pub.ok()) {
    std::fprintf(stderr, "FAIL: publisher: %s\n", pub.status().to_string().c_str());
    return 1;
  }
  check(!(*pub)->head().has_value(), "a fresh journal has no head");
  check(
      (*pub)
          ->register_tensor(wc::TensorRef::contiguous("w", wc::DType::kF32, trainer.data(), kCount))
          .ok(),
      "publisher registers a tensor");

  auto v1 = (*pub)->publish(1);
  check(v1.ok(), "publish v1: " + v1.status().to_string());
  if (v1.ok()) {
    auto report = v1->wait_published(wc::deadline_after(timeout));
    check(report.ok() && report->anchor, "v1 is an anchor: " + report.status().to_string());
    const wc::Status committed = v1->wait_committed(wc::deadline_after(timeout));
    check(committed.ok(), "v1 committed: " + committed.to_string());
  }
  const wc::Status got1 = (*sub)->wait_for_version(1, wc::deadline_after(timeout));
  check(got1.ok(), "engine reaches v1: " + got1.to_string());
  check(same_bits(engine, trainer), "engine holds v1's bits");

  // A sparse step: ten elements change; the engine receives them as a delta.
  for (int64_t k = 0; k < 10; ++k) trainer[k * (kCount / 10)] += 1.0f;
  auto v2 = (*pub)->publish(2);
  check(v2.ok(), "publish v2: " + v2.status().to_string());
  if (v2.ok()) {
    check(v2->wait_for_reads(wc::deadline_after(timeout)).ok(), "v2 read");
    auto report = v2->wait_published(wc::deadline_after(timeout));
    check(report.ok() && !report->anchor && report->changed_elements == 10,
          "v2 is a delta of 10 elements: " + (report.ok() ? std::to_string(report->changed_elements)
                                                          : report.status().to_string()));
    check(v2->wait_committed(wc::deadline_after(timeout)).ok(), "v2 committed");
  }
  check((*sub)->wait_for_version(2, wc::deadline_after(timeout)).ok(), "engine reaches v2");
  check(same_bits(engine, trainer), "engine holds v2's bits");
  check((*pub)->head() == 2u && (*pub)->committed() == 2u, "publisher head and committed are 2");
  check((*sub)->current_version() == 2u, "engine's current version is 2");
  auto again = (*pub)->publish(2);
  check(!again.ok() && again.status().code() == wc::StatusCode::kFailedPrecondition,
        "a version not newer is refused: " + again.status().to_string());

  const wc::SubscriberStats stats = (*sub)->stats();
  check(stats.versions_applied >= 1 && stats.nacks == 0, "subscriber stats");
  check(paused.load() >= 1 && paused.load() == resumed.load(),
        "before_apply and after_apply bracket every apply");

  (*sub)->stop("outside test done");
  (*pub)->stop("outside test done");
  if (failures == 0)
    std::printf("weightcast_outside: %s: all checks passed\n", wc::version_string());
  return failures == 0 ? 0 : 1;
}
