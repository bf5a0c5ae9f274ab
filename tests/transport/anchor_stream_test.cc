// StreamingAnchorWriter (transport/fs/anchor_stream.h): the files and the manifest are
// write_anchor's byte for byte whatever order the bytes arrive in, and incomplete, doubled,
// out-of-range and failing writes are refused naming what they must.
#include "transport/fs/anchor_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "tests/transport/anchor_stream_test_util.h"
#include "tests/transport/anchor_test_util.h"

namespace weightcast {
namespace {

using anchor_testing::Bytes;
using anchor_testing::expect_error;
using anchor_testing::Model;
using anchor_testing::Piece;
using anchor_testing::random_pieces;
using anchor_testing::read_file;
using anchor_testing::ScratchDir;
using anchor_testing::small_options;
using anchor_testing::specs_of;
using anchor_testing::write_concurrently;

// Both directories hold the same file names with the same bytes.
void expect_same_files(const std::string& a, const std::string& b) {
  std::vector<std::string> names_a, names_b;
  for (const auto& e : std::filesystem::directory_iterator(a)) {
    names_a.push_back(e.path().filename());
  }
  for (const auto& e : std::filesystem::directory_iterator(b)) {
    names_b.push_back(e.path().filename());
  }
  std::sort(names_a.begin(), names_a.end());
  std::sort(names_b.begin(), names_b.end());
  ASSERT_EQ(names_a, names_b);
  ASSERT_FALSE(names_a.empty());
  for (const auto& n : names_a) {
    EXPECT_EQ(read_file(a + "/" + n), read_file(b + "/" + n)) << n << " differs";
  }
}

class StreamedMatchesWriteAnchor : public ::testing::TestWithParam<int> {};

TEST_P(StreamedMatchesWriteAnchor, InRandomOrderFromSeveralThreadsInSmallPieces) {
  ScratchDir dir;
  Model model = GetParam() == 0 ? anchor_testing::mixed_model() : anchor_testing::sharded_model();
  const std::span<const AnchorTensor> view = model.view();
  const std::vector<AnchorTensor> tensors(view.begin(), view.end());
  const AnchorWriteOptions options = small_options();
  proto::StepManifest reference;
  ASSERT_TRUE(write_anchor(dir.sub("reference"), tensors, options, &reference).ok());

  AnchorWriteOptions streamed_options = options;
  uint64_t last_done = 0, last_total = 0;
  streamed_options.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GT(done, last_done);  // serialised and increasing
    last_done = done;
    last_total = total;
  };
  auto writer =
      StreamingAnchorWriter::open(dir.sub("streamed"), specs_of(tensors), streamed_options);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  std::mt19937_64 rng(42 + GetParam());
  const std::vector<Piece> pieces = random_pieces(tensors, rng, GetParam() == 0 ? 16 : 300);
  ASSERT_GT(pieces.size(), 20u);
  ASSERT_TRUE(write_concurrently(**writer, tensors, pieces, 4).ok());
  proto::StepManifest streamed;
  streamed.set_version(99);  // fields finish does not own are left alone
  const Status finished = (*writer)->finish(&streamed);
  ASSERT_TRUE(finished.ok()) << finished.to_string();

  expect_same_files(dir.sub("reference"), dir.sub("streamed"));
  EXPECT_EQ(streamed.version(), 99u);
  streamed.clear_version();
  EXPECT_EQ(streamed.SerializeAsString(), reference.SerializeAsString())
      << streamed.DebugString() << "\nvs\n"
      << reference.DebugString();
  ASSERT_EQ((*writer)->checksums().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t elem = dtype_size(tensors[i].dtype);
    EXPECT_EQ((*writer)->checksums()[i],
              checksum_range(tensors[i].bytes.data(), elem, tensors[i].bytes.size() / elem, 0))
        << tensors[i].name;
  }
  uint64_t file_bytes = 0;
  for (const auto& p : reference.parts()) file_bytes += p.bytes();
  EXPECT_EQ(last_total, file_bytes);
  EXPECT_EQ(last_done, file_bytes);
}

INSTANTIATE_TEST_SUITE_P(Models, StreamedMatchesWriteAnchor, ::testing::Values(0, 1));

TEST(AnchorStream, WholeTensorsOnAPoolMatchWriteAnchor) {
  ScratchDir dir;
  Model model = anchor_testing::sharded_model();
  const std::span<const AnchorTensor> view = model.view();
  const std::vector<AnchorTensor> tensors(view.begin(), view.end());
  proto::StepManifest reference;
  ASSERT_TRUE(write_anchor(dir.sub("reference"), tensors, small_options(), &reference).ok());

  ThreadPool pool(3);
  AnchorWriteOptions options = small_options();
  options.pool = &pool;
  auto writer = StreamingAnchorWriter::open(dir.sub("streamed"), specs_of(tensors), options);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  // Odd tensors whole (the snapshot path), even ones in pieces, whole ones last.
  for (size_t i = 0; i < tensors.size(); i += 2) {
    const uint64_t numel = tensors[i].bytes.size() / 2;
    for (uint64_t at = numel; at > 0;) {  // backwards, 100 elements at a time
      const uint64_t n = std::min<uint64_t>(at, 100);
      at -= n;
      ASSERT_TRUE((*writer)->write(i, at, tensors[i].bytes.subspan(at * 2, n * 2)).ok());
    }
  }
  for (size_t i = 1; i < tensors.size(); i += 2) {
    const Status s = (*writer)->write_tensor(i, tensors[i].bytes);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  uint64_t tensor_bytes = 0;
  for (const auto& t : tensors) tensor_bytes += t.bytes.size();
  EXPECT_EQ((*writer)->bytes_written(), tensor_bytes);
  proto::StepManifest streamed;
  ASSERT_TRUE((*writer)->finish(&streamed).ok());
  expect_same_files(dir.sub("reference"), dir.sub("streamed"));
  EXPECT_EQ(streamed.SerializeAsString(), reference.SerializeAsString());
}

// A streaming writer over the sharded model, nothing written yet.
struct Streamed {
  ScratchDir dir;
  Model model = anchor_testing::sharded_model();
  std::vector<AnchorTensor> tensors;
  std::unique_ptr<StreamingAnchorWriter> writer;

  explicit Streamed(AnchorWriteOptions options = small_options()) {
    const std::span<const AnchorTensor> view = model.view();
    tensors.assign(view.begin(), view.end());
    auto opened = StreamingAnchorWriter::open(dir.sub("a"), specs_of(tensors), std::move(options));
    EXPECT_TRUE(opened.ok()) << opened.status().to_string();
    if (opened.ok()) writer = std::move(*opened);
  }
  Status write(size_t tensor, uint64_t first, uint64_t count) {
    return writer->write(tensor, first, tensors[tensor].bytes.subspan(first * 2, count * 2));
  }
  uint64_t numel(size_t tensor) const { return tensors[tensor].bytes.size() / 2; }
};

TEST(AnchorStream, MissingRangeRefusesFinishNamingTheTensor) {
  Streamed s;
  ASSERT_NE(s.writer, nullptr);
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    if (i == 2) {  // w2 lacks elements [1000, 1500)
      ASSERT_TRUE(s.write(i, 0, 1000).ok());
      ASSERT_TRUE(s.write(i, 1500, s.numel(i) - 1500).ok());
    } else {
      ASSERT_TRUE(s.writer->write_tensor(i, s.tensors[i].bytes).ok());
    }
  }
  proto::StepManifest m;
  const Status refused = s.writer->finish(&m);
  expect_error(refused, StatusCode::kFailedPrecondition,
               {"'w2'", "element 1000 ", "never written", "model-"});
  EXPECT_EQ(m.tensors_size(), 0);
  EXPECT_EQ(s.writer->finish(&m).message(), refused.message());  // sticky
  EXPECT_FALSE(std::filesystem::exists(s.dir.sub("a/") + kAnchorIndexFile));
}

TEST(AnchorStream, UntouchedTensorIsMissingFromElementZero) {
  Streamed s;
  ASSERT_NE(s.writer, nullptr);
  for (size_t i = 0; i + 1 < s.tensors.size(); ++i) {
    ASSERT_TRUE(s.writer->write_tensor(i, s.tensors[i].bytes).ok());
  }
  proto::StepManifest m;
  expect_error(s.writer->finish(&m), StatusCode::kFailedPrecondition, {"'w6'", "element 0 "});
}

TEST(AnchorStream, DoubleWriteIsRefused) {
  Streamed s;
  ASSERT_NE(s.writer, nullptr);
  ASSERT_TRUE(s.write(0, 100, 50).ok());
  ASSERT_TRUE(s.write(0, 150, 50).ok());  // adjacent: merged, not a double write
  expect_error(s.write(0, 190, 20), StatusCode::kFailedPrecondition,
               {"'w0'", "elements [190, 210) written twice", "elements [100, 200)"});
  // Sticky: even a fresh range is refused now, and so is finish.
  expect_error(s.write(1, 0, 10), StatusCode::kFailedPrecondition, {"'w0'", "written twice"});
  proto::StepManifest m;
  expect_error(s.writer->finish(&m), StatusCode::kFailedPrecondition, {"written twice"});
}

TEST(AnchorStream, ExactRepeatAndOverlapFromBelowAreRefused) {
  {
    Streamed s;
    ASSERT_NE(s.writer, nullptr);
    ASSERT_TRUE(s.write(3, 10, 5).ok());
    expect_error(s.write(3, 10, 5), StatusCode::kFailedPrecondition, {"'w3'", "written twice"});
  }
  {
    Streamed s;
    ASSERT_NE(s.writer, nullptr);
    ASSERT_TRUE(s.write(3, 10, 5).ok());
    expect_error(s.write(3, 0, 11), StatusCode::kFailedPrecondition,
                 {"'w3'", "elements [0, 11) written twice"});
  }
}

TEST(AnchorStream, PastTheEndIsRefused) {
  {
    Streamed s;
    ASSERT_NE(s.writer, nullptr);
    const uint64_t n = s.numel(1);
    ASSERT_TRUE(s.write(1, n - 2, 2).ok());  // the last two elements are fine
    const Bytes four(8, 1);
    expect_error(s.writer->write(1, n - 2, four), StatusCode::kOutOfRange,
                 {"'w1'", "elements [" + std::to_string(n - 2) + ", " + std::to_string(n + 2) + ")",
                  "past its end"});
  }
  {
    Streamed s;
    ASSERT_NE(s.writer, nullptr);
    expect_error(s.writer->write(1, s.numel(1) + 1, {}), StatusCode::kOutOfRange, {"'w1'"});
  }
  {
    Streamed s;
    ASSERT_NE(s.writer, nullptr);
    const Bytes three(3, 0);
    expect_error(s.writer->write(1, 0, three), StatusCode::kInvalidArgument,
                 {"'w1'", "not whole bf16 elements"});
  }
  {
    Streamed s;
    ASSERT_NE(s.writer, nullptr);
    expect_error(s.writer->write(7, 0, {}), StatusCode::kInvalidArgument, {"no tensor 7"});
    Streamed t;
    ASSERT_NE(t.writer, nullptr);
    expect_error(t.writer->write_tensor(0, t.tensors[1].bytes), StatusCode::kInvalidArgument,
                 {"'w0'", "bytes; its dtype and shape need"});
  }
}

TEST(AnchorStream, InjectedEnospcNamesTheFile) {
  AnchorWriteOptions options = small_options();
  std::string target;  // the file whose tensor writes fail (set once the plan is known)
  options.before_write = [&](const std::string& file, uint64_t offset, uint64_t) -> Status {
    if (file == target && offset > 0) return io_error("No space left on device (injected)");
    return ok_status();
  };
  Streamed s(options);
  ASSERT_NE(s.writer, nullptr);
  // w2 (40 KiB, over the 16 KiB shards) has the second file of its own.
  ASSERT_EQ(s.writer->plan().tensors[2].shard, 1u);
  target = s.writer->plan().shards[1].path;
  ASSERT_TRUE(s.writer->write_tensor(0, s.tensors[0].bytes).ok());
  const Status failed = s.write(2, 64, 16);
  expect_error(failed, StatusCode::kIoError,
               {s.writer->plan().shards[1].file, "'w2'", "No space left on device",
                "at offset " + std::to_string(s.writer->plan().tensors[2].offset + 128)});
  proto::StepManifest m;
  EXPECT_EQ(s.writer->finish(&m).message(), failed.message());  // sticky

  // A header that cannot be written fails open, naming the file.
  ScratchDir dir;
  AnchorWriteOptions header_fails = small_options();
  header_fails.before_write = [](const std::string& file, uint64_t offset, uint64_t) -> Status {
    if (offset == 0 && file.find("model-00002-of-") != std::string::npos) {
      return io_error("No space left on device (injected)");
    }
    return ok_status();
  };
  auto opened = StreamingAnchorWriter::open(dir.sub("b"), specs_of(s.tensors), header_fails);
  expect_error(opened.status(), StatusCode::kIoError,
               {"model-00002-of-", "header", "No space left on device"});
}

TEST(AnchorStream, BadSpecIsRefusedBeforeAnyFile) {
  ScratchDir dir;
  std::vector<SafetensorsTensorSpec> specs = {{"a", DType::kBF16, {2}}, {"a", DType::kF32, {1}}};
  auto opened = StreamingAnchorWriter::open(dir.sub("c"), specs, small_options());
  expect_error(opened.status(), StatusCode::kInvalidArgument, {"'a'"});
  EXPECT_FALSE(std::filesystem::exists(dir.sub("c")));
}

}  // namespace
}  // namespace weightcast
