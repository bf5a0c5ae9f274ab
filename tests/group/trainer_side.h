// In-process endpoints of the rank group tests: a trainer's weights whose every version is a
// function of its number, and a coordinator thread with the publisher (rank 1) of them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "src/endpoint/publisher.h"
#include "src/endpoint/subscriber.h"
#include "tests/group/group_harness.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast::testing {

// Endpoint options of `rank` with one worker thread.
template <typename Options>
Options one_thread(uint32_t rank) {
  Options o;
  o.rank = rank;
  o.threads = 1;
  return o;
}

inline EndpointDeadline in(std::chrono::milliseconds ms) {
  return std::chrono::steady_clock::now() + ms;
}

// A trainer's weights: one packed [4, 64] bf16 parameter published as two strided column
// halves, plus a plain [1000] vector. Version v's bytes are a function of v.
struct Weights {
  std::vector<uint16_t> packed = std::vector<uint16_t>(4 * 64);
  std::vector<uint16_t> vec = std::vector<uint16_t>(1000);
  void set(uint64_t v) {
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint16_t>(i * 7 + v * 3);
    for (size_t i = 0; i < vec.size(); ++i) {
      vec[i] = static_cast<uint16_t>(i % 97 == v % 97 ? v * 11 + i : i);
    }
  }
  // Left and right [4, 32] halves of `packed` (row stride 64), and `vec`.
  std::vector<TensorRef> refs() {
    TensorRef left{"packed.left", DType::kBF16, {4, 32}, {64, 1}, 0, packed.data()};
    TensorRef right{"packed.right", DType::kBF16, {4, 32}, {64, 1}, 32, packed.data()};
    return {left, right, TensorRef::contiguous("vec", DType::kBF16, vec.data(), 1000)};
  }
};

// Flips one byte of every delta part of `version`.
inline void corrupt_parts(const std::string& journal, uint64_t version) {
  const JournalLayout layout(journal);
  auto manifest = read_manifest_file(layout.manifest(version)).value();
  for (const auto& p : manifest.parts()) {
    const std::string path = layout.step(version) + "/" + p.file();
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(p.bytes() / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(p.bytes() / 2));
    f.write(&c, 1);
  }
}

// A coordinator thread and the publisher (rank 1) of a trainer's weights.
struct TrainerSide {
  explicit TrainerSide(const TestGroup& g,
                       PublisherOptions options = one_thread<PublisherOptions>(1))
      : coordinator(g) {
    auto p = Publisher::start(g.config(), std::move(options));
    if (!p.ok()) {
      error = p.status().to_string();
      return;
    }
    publisher = std::move(p).value();
    for (const auto& r : trainer.refs()) {
      Status s = publisher->register_tensor(r);
      if (!s.ok()) error = s.to_string();
    }
  }
  bool ok() const { return coordinator.ok() && publisher && error.empty(); }
  std::string why() const { return coordinator.error() + error; }
  // Publishes trainer.set(v) as v for v in [from, to), each committed before the next.
  bool publish_committed(uint64_t from, uint64_t to) {
    for (uint64_t v = from; v < to; ++v) {
      trainer.set(v);
      auto h = publisher->publish(v);
      if (!h.ok() || !h->wait_committed(in(std::chrono::seconds(30))).ok()) return false;
    }
    return true;
  }

  CoordinatorThread coordinator;
  Weights trainer;
  std::unique_ptr<Publisher> publisher;
  std::string error;
};

// A subscriber with options `so` whose engine is `engine`, connected (null on a failure);
// every apply is checked to leave the engine on a whole version (`bad` collects the others).
inline std::unique_ptr<Subscriber> connect_engine(const TestGroup& g, SubscriberOptions so,
                                                  Weights& engine, std::vector<std::string>& bad) {
  so.after_apply = [&engine, &bad](uint64_t v) {
    Weights expect;
    expect.set(v);
    if (engine.vec != expect.vec || engine.packed != expect.packed) {
      bad.push_back("v" + std::to_string(v));
    }
  };
  auto s = Subscriber::create(g.config(), so);
  if (!s.ok()) return nullptr;
  for (const auto& r : engine.refs()) {
    if (!(*s)->register_tensor(r).ok()) return nullptr;
  }
  if (!(*s)->connect().ok()) return nullptr;
  return std::move(s).value();
}

// Whether `sub` reaches version v within 30 s with `engine` holding exactly Weights::set(v).
inline ::testing::AssertionResult engine_at(const Subscriber& sub, const Weights& engine,
                                            uint64_t v) {
  const Status reached = sub.wait_for_version(v, in(std::chrono::seconds(30)));
  if (!reached.ok()) return ::testing::AssertionFailure() << reached.to_string();
  Weights expect;
  expect.set(v);
  if (engine.packed != expect.packed) return ::testing::AssertionFailure() << "packed differs";
  if (engine.vec != expect.vec) return ::testing::AssertionFailure() << "vec differs";
  return ::testing::AssertionSuccess();
}

// The transport `rank` acked `version` with, from the coordinator's status ("" if none).
inline std::string acked_transport(const proto::StatusReply& status, uint64_t version,
                                   uint32_t rank) {
  for (const auto& v : status.versions()) {
    if (v.version() != version) continue;
    for (const auto& r : v.results()) {
      if (r.rank() == rank && r.result() == "ok") return r.transport();
    }
  }
  return "";
}

// The delta part files of `version` in `journal`, concatenated in manifest order ("not a
// delta: ..." when it is none).
inline std::string delta_parts(const std::string& journal, uint64_t version) {
  const JournalLayout layout(journal);
  auto m = read_manifest_file(layout.manifest(version));
  if (!m.ok() || m->kind() != proto::STEP_DELTA) return "not a delta: " + m.status().to_string();
  std::string bytes;
  for (const auto& part : m->parts()) {
    std::ifstream in(layout.step(version) + "/" + part.file(), std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}

}  // namespace weightcast::testing
