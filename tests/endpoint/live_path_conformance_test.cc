#include "tests/endpoint/live_path_conformance.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "transport/fs/journal_writer.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::chrono::steady_clock::time_point in(milliseconds ms) {
  return std::chrono::steady_clock::now() + ms;
}

// Versions 0 (an anchor) to `versions` of a three-tensor model, journaled under `root` with
// each delta kept in memory as a publisher keeps it, one part per tensor record.
Result<std::vector<std::shared_ptr<const DeltaInMemory>>> write_deltas(const std::string& root,
                                                                       uint64_t versions) {
  JournalOptions options;
  options.root = root;
  options.anchor_every = 0;
  options.delta.keep_in_memory = true;
  options.delta.part_bytes = 1024;
  ASSIGN_OR_RETURN(auto writer, JournalWriter::open(std::move(options)));
  const std::vector<std::pair<std::string, size_t>> shapes = {
      {"layers.0.w", 16384}, {"layers.0.b", 512}, {"layers.1.w", 8192}};
  std::mt19937 rng(7);
  std::vector<std::vector<float>> now(shapes.size()), before;
  for (size_t t = 0; t < shapes.size(); ++t) {
    now[t].resize(shapes[t].second);
    for (float& x : now[t]) x = static_cast<float>(rng() % 1000) / 100.0f;
  }
  const auto views = [&](const std::vector<std::vector<float>>& tensors) {
    std::vector<PublishTensor> out;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(tensors[t].data());
      out.push_back({shapes[t].first,
                     DType::kF32,
                     {static_cast<int64_t>(tensors[t].size())},
                     {bytes, tensors[t].size() * sizeof(float)}});
    }
    return out;
  };
  std::vector<std::shared_ptr<const DeltaInMemory>> deltas;
  for (uint64_t v = 0; v <= versions; ++v) {
    if (v > 0) {
      before = now;
      for (auto& tensor : now) {
        for (size_t i = 0; i < tensor.size() / 20; ++i) tensor[rng() % tensor.size()] += 1.0f;
      }
    }
    const auto current = views(now);
    const auto previous = views(before);
    ASSIGN_OR_RETURN(PublishReport report, writer->publish(v, current, previous));
    if (v == 0) continue;
    if (!report.delta) return internal_error("version " + std::to_string(v) + " has no delta");
    deltas.push_back(std::make_shared<const DeltaInMemory>(std::move(*report.delta)));
  }
  return deltas;
}

// Whether a fetched delta is the served one: the same manifest, the same part bytes.
void expect_same_delta(const Result<std::optional<FetchedDelta>>& fetched,
                       const DeltaInMemory& served, uint64_t version) {
  ASSERT_TRUE(fetched.ok()) << "version " << version << ": " << fetched.status().to_string();
  ASSERT_TRUE(fetched->has_value()) << "version " << version << " was served but not carried";
  const FetchedDelta& got = **fetched;
  EXPECT_EQ(got.manifest.SerializeAsString(), served.manifest.SerializeAsString())
      << "version " << version;
  EXPECT_EQ(got.parts, served.parts) << "version " << version;
  uint64_t part_bytes = 0;
  for (const auto& p : served.parts) part_bytes += p.size();
  EXPECT_GE(got.bytes_read, part_bytes) << "version " << version;
}

}  // namespace

std::function<void(proto::Envelope)> ControlInbox::sender(uint32_t rank) {
  return [this, rank](proto::Envelope e) {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.emplace_back(rank, std::move(e));
    cv_.notify_all();
  };
}

std::optional<proto::Envelope> ControlInbox::take(
    uint32_t rank, const std::function<bool(const proto::Envelope&)>& match, milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = in(timeout);
  while (true) {
    for (auto it = messages_.begin(); it != messages_.end(); ++it) {
      if (it->first != rank || !match(it->second)) continue;
      proto::Envelope e = std::move(it->second);
      messages_.erase(it);
      return e;
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
  }
}

proto::GroupConfig live_path_test_config(const std::string& path) {
  proto::GroupConfig config;
  config.set_group_id("live-path-test");
  config.add_transports(path);
  config.add_transports("fs");
  config.set_max_in_flight(2);
  config.mutable_timeouts()->set_ack_timeout_ms(10000);
  config.mutable_nccl()->set_timeout_ms(5000);
  return config;
}

void LivePathConformance::SetUp() {
  const LivePathBackend& b = GetParam();
  Status viable = b.path->viable(b.config);
  if (!viable.ok()) GTEST_SKIP() << b.name << " cannot run here: " << viable.message();
  std::string scratch = "/tmp/weightcast-live-path-XXXXXX";
  ASSERT_NE(::mkdtemp(scratch.data()), nullptr) << std::strerror(errno);
  scratch_ = scratch;
  auto deltas = write_deltas(scratch_ + "/journal", kVersions);
  ASSERT_TRUE(deltas.ok()) << deltas.status().to_string();
  deltas_ = std::move(deltas).value();

  pair_.inbox = std::make_shared<ControlInbox>();
  const auto rank = [&](uint32_t r) {
    LivePathRank lr;
    lr.rank = r;
    lr.config = b.config;
    lr.send = pair_.inbox->sender(r);
    return lr;
  };
  auto server = b.path->make_server(rank(LivePathPair::kServerRank));
  ASSERT_TRUE(server.ok()) << b.name << " server: " << server.status().to_string();
  pair_.server = std::move(server).value();
  auto fetcher = b.path->make_fetcher(rank(LivePathPair::kFetcherRank));
  ASSERT_TRUE(fetcher.ok()) << b.name << " fetcher: " << fetcher.status().to_string();
  pair_.fetcher = std::move(fetcher).value();
  if (!b.connect) return;
  Status connected = b.connect(pair_);
  if (!connected.ok() && b.connect_may_fail_here) {
    GTEST_SKIP() << b.name << " cannot form a pair here: " << connected.message();
  }
  ASSERT_TRUE(connected.ok()) << b.name << ": " << connected.to_string();
}

void LivePathConformance::TearDown() {
  if (pair_.fetcher) pair_.fetcher->shutdown();
  if (pair_.server) pair_.server->shutdown();
  pair_.fetcher.reset();
  pair_.server.reset();
  if (!scratch_.empty()) std::filesystem::remove_all(scratch_);
}

std::string LivePathConformance::serve_and_offer(uint64_t version) {
  auto descriptor = pair_.server->serve(version, deltas_.at(version - 1));
  EXPECT_TRUE(descriptor.ok()) << "version " << version << ": " << descriptor.status().to_string();
  if (!descriptor.ok()) return "";
  if (!descriptor->empty()) pair_.fetcher->on_offer(version, *descriptor);
  return *descriptor;
}

TEST_P(LivePathConformance, BothSidesAreNamedAfterThePathAndSayWhatMemoryTheyMove) {
  const std::string name = GetParam().path->name();
  for (const LivePathSide* side : {static_cast<const LivePathSide*>(pair_.server.get()),
                                   static_cast<const LivePathSide*>(pair_.fetcher.get())}) {
    EXPECT_EQ(side->name(), name);
    EXPECT_FALSE(side->memory_kinds().empty()) << side->describe();
    EXPECT_EQ(side->describe().rfind(name + " (", 0), 0u) << side->describe();
  }
  proto::Envelope commit;
  commit.mutable_commit()->set_version(1);
  EXPECT_FALSE(pair_.server->on_control_message(commit)) << "a rank's message is the rank's";
  EXPECT_FALSE(pair_.fetcher->on_control_message(commit));
}

TEST_P(LivePathConformance, AServedDeltaArrivesWholeAsTheJournalStoredIt) {
  const std::string descriptor = serve_and_offer(1);
  ASSERT_FALSE(descriptor.empty()) << "a connected server serves every delta";
  expect_same_delta(pair_.fetcher->fetch(1, descriptor, in(seconds(10))), delta(1), 1);
}

TEST_P(LivePathConformance, VersionsServedAheadOfTheFetcherArriveInOrder) {
  std::vector<std::string> descriptors;
  for (uint64_t v = 1; v <= kVersions; ++v) descriptors.push_back(serve_and_offer(v));
  for (uint64_t v = 1; v <= kVersions; ++v) {
    ASSERT_FALSE(descriptors[v - 1].empty()) << "version " << v;
    expect_same_delta(pair_.fetcher->fetch(v, descriptors[v - 1], in(seconds(10))), delta(v), v);
  }
}

TEST_P(LivePathConformance, ADescriptorThatNamesNothingYieldsNoDeltaAndTheNextVersionArrives) {
  const std::string garbage = "\x07not a descriptor of any path";
  pair_.fetcher->on_offer(1, garbage);
  const auto started = std::chrono::steady_clock::now();
  auto fetched = pair_.fetcher->fetch(1, garbage, in(seconds(5)));
  EXPECT_TRUE(!fetched.ok() || !fetched->has_value()) << "bytes nobody served became a delta";
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(7));
  const std::string descriptor = serve_and_offer(2);
  ASSERT_FALSE(descriptor.empty());
  expect_same_delta(pair_.fetcher->fetch(2, descriptor, in(seconds(10))), delta(2), 2);
}

TEST_P(LivePathConformance, AStoppedServerFailsTheFetchByItsDeadline) {
  auto descriptor = pair_.server->serve(1, shared_delta(1));
  ASSERT_TRUE(descriptor.ok()) << descriptor.status().to_string();
  ASSERT_FALSE(descriptor->empty());
  pair_.server->shutdown();  // as a publisher whose path died after the Offer went out
  pair_.fetcher->on_offer(1, *descriptor);
  const auto started = std::chrono::steady_clock::now();
  auto fetched = pair_.fetcher->fetch(1, *descriptor, in(seconds(8)));
  EXPECT_FALSE(fetched.ok()) << "a stopped server delivered a delta";
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(10)) << "past the deadline";
}

}  // namespace weightcast::testing
