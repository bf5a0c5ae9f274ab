// weightcast_outside CONFIG MODE: a trainer and an engine in one process, built against the
// installed package with nothing but <weightcast/...>. CONFIG is a group of a coordinator
// (running, rank 0), a publisher (rank 1) and a subscriber (rank 2) on a fresh journal. MODE
// `snapshot` publishes with publish(v); `hooked` registers the tensor as hooked and writes every
// version through a Step; `shard` publishes through a ShardPublisher (the one publisher rank owns
// the whole tensor as two ranges). Exits 0 when every check holds; prints each failed one
// otherwise.
#include <weightcast/weightcast.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace wc = weightcast::api;

namespace {

constexpr int64_t kCount = 4096;
const auto kTimeout = std::chrono::seconds(30);
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

// Hooked mode: `next` is written into the trainer's tensor through a step, in two halves (the
// second a view at an offset), as an optimizer writing its shards would.
wc::Result<wc::PublishHandle> publish_through_step(wc::Publisher& pub, uint64_t version,
                                                   std::vector<float>& trainer,
                                                   std::vector<float>& next, uint64_t changed) {
  auto step = pub.begin_step(version);
  if (!step.ok()) return step.status();
  check(step->version() == version, "the step's version");
  const int64_t half = kCount / 2;
  wc::TensorRef live = wc::TensorRef::contiguous("w", wc::DType::kF32, trainer.data(), half);
  wc::TensorRef values = wc::TensorRef::contiguous("w.new", wc::DType::kF32, next.data(), half);
  check(step->write(live, values).ok(), "first half written");
  check(step->progress().elements_written == static_cast<uint64_t>(half) &&
            step->progress().elements_total == static_cast<uint64_t>(kCount),
        "progress after the first half");
  live.offset = half;
  values.offset = half;
  check(step->write(live, values).ok(), "second half written");
  const wc::StepProgress p = step->progress();
  check(p.elements_written == static_cast<uint64_t>(kCount) && p.changed_elements == changed,
        "progress counts " + std::to_string(changed) + " changed elements, not " +
            std::to_string(p.changed_elements));
  check(same_bits(trainer, next), "write() put the new values into the live tensor");
  wc::Step moved = std::move(*step);
  check(!step->write(live, values).ok(), "a moved-from step refuses writes");
  return pub.publish_step(std::move(moved));
}

// Shard mode: the trainer's tensor published by the only publisher rank as two ranges; the
// engine follows v1 (an anchor) and v2 (a delta of ten elements) bit for bit.
void publish_as_shards(const std::string& config, wc::Subscriber& sub,
                       const std::vector<float>& engine, const wc::LogCallback& log) {
  std::vector<float> trainer(kCount, 0.0f);
  const int64_t half = kCount / 2;
  std::vector<wc::ShardRange> ranges = {
      {"w", 0, wc::TensorRef::contiguous("w", wc::DType::kF32, trainer.data(), half)},
      {"w", static_cast<uint64_t>(half),
       wc::TensorRef::contiguous("w", wc::DType::kF32, trainer.data() + half, half)}};
  wc::ShardPublisherOptions o;
  o.threads = 1;
  o.log = log;
  auto pub = wc::ShardPublisher::start(config, 1, {{"w", wc::DType::kF32, {kCount}}}, ranges, o);
  check(pub.ok(), "shard publisher: " + pub.status().to_string());
  if (!pub.ok()) return;
  check((*pub)->lead() && (*pub)->shards() == 1, "the only publisher rank is the lead of 1 shard");
  for (uint64_t v = 1; v <= 2; ++v) {
    for (int64_t i = 0; i < kCount; ++i) {
      if (v == 1 || i % (kCount / 10) == 0) trainer[i] += 0.5f * static_cast<float>(v);
    }
    auto report = (*pub)->publish(v);
    const std::string what = "shard v" + std::to_string(v);
    check(report.ok() && report->committed_here && report->anchor == (v == 1),
          what + ": " + (report.ok() ? "committed here" : report.status().to_string()));
    check((*pub)->wait_committed(v, wc::deadline_after(kTimeout)).ok(), what + " committed");
    check(sub.wait_for_version(v, wc::deadline_after(kTimeout)).ok(), "engine reaches " + what);
    check(same_bits(engine, trainer), "engine holds " + what + "'s bits");
  }
  (*pub)->stop("outside test done");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[2] : "";
  if (mode != "snapshot" && mode != "hooked" && mode != "shard") {
    std::fprintf(stderr, "usage: %s CONFIG snapshot|hooked|shard\n", argv[0]);
    return 2;
  }
  const std::string config = argv[1];
  const bool hooked = std::string(argv[2]) == "hooked";
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

  if (mode == "shard") {
    publish_as_shards(config, **sub, engine, log);
    (*sub)->stop("outside test done");
    if (failures == 0) {
      std::printf("weightcast_outside shard: %s: all checks passed\n", wc::version_string());
    }
    return failures == 0 ? 0 : 1;
  }

  // The trainer: its tensor, and the values of the versions it publishes.
  std::vector<float> trainer(kCount, 0.0f);
  std::vector<float> next(kCount);
  for (int64_t i = 0; i < kCount; ++i) next[i] = 0.25f * static_cast<float>(i + 1);
  wc::PublisherOptions po;
  po.threads = 1;
  po.log = log;
  auto pub = wc::Publisher::start(config, 1, po);
  if (!pub.ok()) {
    std::fprintf(stderr, "FAIL: publisher: %s\n", pub.status().to_string().c_str());
    return 1;
  }
  check(!(*pub)->head().has_value(), "a fresh journal has no head");
  const auto updates = hooked ? wc::TensorUpdates::kHooked : wc::TensorUpdates::kSnapshot;
  check((*pub)
            ->register_tensor(
                wc::TensorRef::contiguous("w", wc::DType::kF32, trainer.data(), kCount), updates)
            .ok(),
        "publisher registers a tensor");

  for (uint64_t v = 1; v <= 2; ++v) {
    // v1 sets every element; v2 changes ten, which reach the engine as a delta.
    const uint64_t changed = v == 1 ? kCount : 10;
    if (v == 2) {
      for (int64_t k = 0; k < 10; ++k) next[k * (kCount / 10)] += 1.0f;
    }
    wc::Result<wc::PublishHandle> handle = wc::Status();
    if (hooked) {
      handle = publish_through_step(**pub, v, trainer, next, changed);
    } else {
      trainer = next;
      handle = (*pub)->publish(v);
    }
    const std::string what = "v" + std::to_string(v);
    check(handle.ok(), "publish " + what + ": " + handle.status().to_string());
    if (!handle.ok()) break;
    check(handle->version() == v, what + ": the handle's version");
    check(handle->wait_for_reads(wc::deadline_after(kTimeout)).ok(), what + " read");
    auto report = handle->wait_published(wc::deadline_after(kTimeout));
    check(report.ok() && report->anchor == (v == 1) &&
              (v == 1 || report->changed_elements == changed),
          what + ": " + (v == 1 ? "an anchor" : "a delta of 10 elements") + ": " +
              (report.ok() ? std::to_string(report->changed_elements) + " changed"
                           : report.status().to_string()));
    const wc::Status committed = handle->wait_committed(wc::deadline_after(kTimeout));
    check(committed.ok(), what + " committed: " + committed.to_string());
    const wc::Status got = (*sub)->wait_for_version(v, wc::deadline_after(kTimeout));
    check(got.ok(), "engine reaches " + what + ": " + got.to_string());
    check(same_bits(engine, trainer), "engine holds " + what + "'s bits");
  }
  check((*pub)->head() == 2u && (*pub)->committed() == 2u, "publisher head and committed are 2");
  check((*sub)->current_version() == 2u, "engine's current version is 2");
  auto refused = (*pub)->publish(hooked ? 3 : 2);
  check(!refused.ok() && refused.status().code() == wc::StatusCode::kFailedPrecondition,
        std::string(hooked ? "publish() with a hooked tensor" : "a version not newer") +
            " is refused: " + refused.status().to_string());

  const wc::SubscriberStats stats = (*sub)->stats();
  check(stats.versions_applied >= 1 && stats.nacks == 0, "subscriber stats");
  check(paused.load() >= 1 && paused.load() == resumed.load(),
        "before_apply and after_apply bracket every apply");

  (*sub)->stop("outside test done");
  (*pub)->stop("outside test done");
  if (failures == 0) {
    std::printf("weightcast_outside %s: %s: all checks passed\n", argv[2], wc::version_string());
  }
  return failures == 0 ? 0 : 1;
}
