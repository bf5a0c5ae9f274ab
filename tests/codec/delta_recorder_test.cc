// DeltaRecorder (codec/delta_recorder.h): a delta recorded from writes in any order, any piece
// sizes and from several threads is byte for byte the record encode_delta makes from the two
// versions; unwritten, doubly written and out-of-range elements are refused, naming the tensor.
#include "codec/delta_recorder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "codec/change_capture.h"
#include "codec/checksum.h"
#include "codec/delta_apply.h"

namespace weightcast {
namespace {

constexpr uint64_t kElements = 5 * kDefaultChunkElements + 777;  // a short last chunk

struct Versions {
  std::vector<uint16_t> old_bits, new_bits;
  explicit Versions(uint32_t seed) : old_bits(kElements), new_bits(kElements) {
    std::mt19937 rng(seed);
    for (auto& x : old_bits) x = static_cast<uint16_t>(rng());
    new_bits = old_bits;
    // About 1 % of the elements move by one ULP, chunk 1 gets random values (a raw chunk) and
    // chunk 3 does not change at all.
    for (uint64_t i = 0; i < kElements; ++i) {
      const uint64_t chunk = i / kDefaultChunkElements;
      if (chunk == 3) continue;
      if (chunk == 1) {
        new_bits[i] = static_cast<uint16_t>(rng());
      } else if (rng() % 100 == 0) {
        new_bits[i] = static_cast<uint16_t>(old_bits[i] + 1);
      }
    }
  }
  const uint8_t* old_at(uint64_t i) const {
    return reinterpret_cast<const uint8_t*>(old_bits.data() + i);
  }
  const uint8_t* new_at(uint64_t i) const {
    return reinterpret_cast<const uint8_t*>(new_bits.data() + i);
  }
  EncodeOptions options() const {
    EncodeOptions e;
    e.name = "layers.0.mlp.up_proj.weight";
    e.dtype = DType::kBF16;
    e.base_version = 6;
    e.target_version = 7;
    e.base_checksum = checksum_range(old_bits.data(), 2, kElements, 0);
    return e;
  }
  std::vector<uint8_t> expected_record() const {
    auto encoded = encode_delta({old_at(0), kElements * 2}, {new_at(0), kElements * 2}, options());
    EXPECT_TRUE(encoded.ok()) << encoded.status().to_string();
    return encoded.ok() ? encoded->record : std::vector<uint8_t>();
  }
};

std::unique_ptr<DeltaRecorder> recorder_for(const Versions& v) {
  auto r = DeltaRecorder::create(v.options(), kElements);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(DeltaRecorder, WholeTensorInOneWriteIsTheEncodersRecord) {
  const Versions v(1);
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->record(0, kElements, v.old_at(0), v.new_at(0)).ok());
  auto done = r->finish();
  ASSERT_TRUE(done.ok()) << done.status().to_string();
  EXPECT_EQ(done->record, v.expected_record());
  EXPECT_EQ(done->header.target_checksum, checksum_range(v.new_bits.data(), 2, kElements, 0));
  EXPECT_GT(done->chunks_by_mode[static_cast<size_t>(ChunkMode::kRaw)], 0u);
  EXPECT_EQ(done->chunks_by_mode[static_cast<size_t>(ChunkMode::kUnchanged)], 1u);
}

TEST(DeltaRecorder, PiecesInRandomOrderFromFourThreadsGiveTheSameBytes) {
  const Versions v(2);
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  // Pieces of 1 to 40000 elements, so most chunks are written part way, in several pieces.
  std::mt19937 rng(3);
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  for (uint64_t at = 0; at < kElements;) {
    const uint64_t n = std::min<uint64_t>(1 + rng() % 40000, kElements - at);
    pieces.emplace_back(at, n);
    at += n;
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  std::vector<std::thread> threads;
  std::vector<Status> status(4);
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = t; k < pieces.size(); k += 4) {
        const auto [at, n] = pieces[k];
        Status s = r->record(at, n, v.old_at(at), v.new_at(at));
        if (!s.ok() && status[t].ok()) status[t] = s;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : status) ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(r->pending_chunks(), 0u);
  EXPECT_EQ(r->written(), kElements);
  auto done = r->finish();
  ASSERT_TRUE(done.ok()) << done.status().to_string();
  EXPECT_EQ(done->record, v.expected_record());
  // And it applies: the old version becomes the new one.
  auto view = parse_delta_record(done->record);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  std::vector<uint16_t> engine = v.old_bits;
  auto applied = apply_delta(*view, TensorRef::contiguous("engine", DType::kBF16, engine.data(),
                                                          static_cast<int64_t>(kElements)));
  ASSERT_TRUE(applied.ok()) << applied.status().to_string();
  EXPECT_EQ(engine, v.new_bits);
}

// Writes every element of `live` (v's old values) through record_write from two threads, the
// second from element `split` on, so that the chunk holding `split` is written in two parts;
// then checks the live values and the finished record.
void write_from_two_threads(const Versions& v, uint64_t split, DeferredEncoder* encoder) {
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  std::vector<uint16_t> live = v.old_bits;
  auto* bytes = reinterpret_cast<uint8_t*>(live.data());
  std::thread other([&] {
    EXPECT_TRUE(
        r->record_write(split, kElements - split, bytes + 2 * split, v.new_at(split), encoder)
            .ok());
  });
  EXPECT_TRUE(r->record_write(0, split, bytes, v.new_at(0), encoder).ok());
  other.join();
  if (encoder != nullptr) encoder->drain();
  EXPECT_EQ(live, v.new_bits);
  auto done = r->finish();
  ASSERT_TRUE(done.ok()) << done.status().to_string();
  EXPECT_EQ(done->record, v.expected_record());
}

TEST(DeltaRecorder, FusedWritesLeaveTheNewValuesAndGiveTheSameBytes) {
  // record_write compares and copies in one pass (whole chunks) or records then copies (parts
  // of chunks); pieces from two threads, in an order that splits chunks.
  write_from_two_threads(Versions(12), 2 * kDefaultChunkElements + 1234, nullptr);
}

TEST(DeltaRecorder, DeferredEncodingGivesTheSameBytes) {
  // With an encoder the writes only capture the change; the chunks are encoded on its worker
  // (two slots: writers wait for it) from the captures. A chunk the slot cannot hold is
  // encoded in the write, as without an encoder.
  const Versions v(14);
  {
    DeferredEncoder encoder(2, capture_bytes(kDefaultChunkElements, 2));
    write_from_two_threads(v, 3 * kDefaultChunkElements + 99, &encoder);
  }

  auto small = recorder_for(v);
  ASSERT_NE(small, nullptr);
  std::vector<uint16_t> live = v.old_bits;
  auto* bytes = reinterpret_cast<uint8_t*>(live.data());
  DeferredEncoder tiny(1, 64);
  ASSERT_TRUE(small->record_write(0, kElements, bytes, v.new_at(0), &tiny).ok());
  tiny.drain();
  auto inline_done = small->finish();
  ASSERT_TRUE(inline_done.ok()) << inline_done.status().to_string();
  EXPECT_EQ(inline_done->record, v.expected_record());
}

TEST(DeltaRecorder, AFusedWriteOverWrittenElementsIsRefusedAndWritesNothing) {
  const Versions v(13);
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  std::vector<uint16_t> live = v.old_bits;
  auto* bytes = reinterpret_cast<uint8_t*>(live.data());
  const uint64_t c = kDefaultChunkElements;
  ASSERT_TRUE(r->record_write(c + 10, 5, bytes + 2 * (c + 10), v.new_at(c + 10)).ok());
  // The whole chunk again: elements c + 10 .. c + 14 would be written twice.
  const std::vector<uint16_t> kept = live;
  Status again = r->record_write(c, c, bytes + 2 * c, v.new_at(c));
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("written twice"), std::string::npos) << again.message();
  EXPECT_NE(again.message().find(v.options().name), std::string::npos) << again.message();
  EXPECT_EQ(live, kept) << "a refused write must leave the live bytes as they were";
  // The same through record(): a whole chunk after a part of it.
  EXPECT_FALSE(r->record(c, c, v.old_at(c), v.new_at(c)).ok());
}

TEST(DeltaRecorder, ElementsNeverWrittenAreNamed) {
  const Versions v(4);
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  const uint64_t gap = kDefaultChunkElements + 100;
  ASSERT_TRUE(r->record(0, gap, v.old_at(0), v.new_at(0)).ok());
  ASSERT_TRUE(r->record(gap + 5, kElements - gap - 5, v.old_at(gap + 5), v.new_at(gap + 5)).ok());
  EXPECT_EQ(r->pending_chunks(), 1u);
  auto done = r->finish();
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(done.status().message().find("layers.0.mlp.up_proj.weight"), std::string::npos);
  EXPECT_NE(done.status().message().find("5 elements never written"), std::string::npos)
      << done.status().to_string();
  EXPECT_NE(done.status().message().find("element " + std::to_string(gap)), std::string::npos)
      << done.status().to_string();
}

TEST(DeltaRecorder, AnElementWrittenTwiceIsRefused) {
  const Versions v(5);
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  // A whole chunk, then one element of it again.
  ASSERT_TRUE(r->record(0, kDefaultChunkElements, v.old_at(0), v.new_at(0)).ok());
  Status again = r->record(10, 1, v.old_at(10), v.new_at(10));
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("written twice"), std::string::npos) << again.to_string();
  // Part of a chunk, then a run overlapping it from either side.
  const uint64_t c = 2 * kDefaultChunkElements;
  ASSERT_TRUE(r->record(c + 100, 50, v.old_at(c + 100), v.new_at(c + 100)).ok());
  EXPECT_FALSE(r->record(c + 90, 11, v.old_at(c + 90), v.new_at(c + 90)).ok());
  EXPECT_FALSE(r->record(c + 149, 10, v.old_at(c + 149), v.new_at(c + 149)).ok());
  EXPECT_TRUE(r->record(c + 150, 10, v.old_at(c + 150), v.new_at(c + 150)).ok());
  EXPECT_TRUE(r->record(c + 90, 10, v.old_at(c + 90), v.new_at(c + 90)).ok());
}

TEST(DeltaRecorder, WritesPastTheEndAndAMissingBaseChecksumAreRefused) {
  const Versions v(6);
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  Status past = r->record(kElements - 1, 2, v.old_at(0), v.new_at(0));
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("past its"), std::string::npos) << past.to_string();
  EncodeOptions no_base = v.options();
  no_base.base_checksum.reset();
  auto refused = DeltaRecorder::create(no_base, kElements);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("base version's checksum"), std::string::npos);
}

TEST(DeltaRecorder, AnUnchangedTensorHasNoChanges) {
  const Versions v(7);
  auto r = recorder_for(v);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->record(0, kElements, v.old_at(0), v.old_at(0)).ok());
  auto done = r->finish();
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->header.changed, 0u);
  EXPECT_EQ(done->header.target_checksum, done->header.base_checksum);
}

}  // namespace
}  // namespace weightcast
