// DeltaPartWriter (transport/fs/delta_step.h): parts streamed to their files piece by piece
// are byte for byte the parts written whole, their manifest entries (offsets, sizes, XXH3)
// check out through read_delta_part, and a failed piece write is the writer's error.
#include "transport/fs/delta_step.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "codec/delta_format.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;

struct Written {
  proto::StepManifest manifest;
  std::vector<std::vector<uint8_t>> files;
};

// Records of 0.3, 1.7 (larger than a piece), 0.9 and 2.5 MiB (larger than a part) plus small
// ones, into parts of 2 MiB.
std::vector<std::vector<uint8_t>> records() {
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> out;
  for (const double mib : {0.3, 1.7, 0.9, 0.001, 2.5, 0.01}) {
    std::vector<uint8_t> r(static_cast<size_t>(mib * (1 << 20)));
    for (auto& b : r) b = static_cast<uint8_t>(rng());
    out.push_back(std::move(r));
  }
  return out;
}

Written write_parts(const std::string& dir, bool keep_in_memory, DeltaPartOptions options = {}) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  Written w;
  options.part_bytes = uint64_t{2} << 20;
  options.keep_in_memory = keep_in_memory;
  DeltaPartWriter writer(dir, options, &w.manifest);
  const auto rs = records();
  for (size_t i = 0; i < rs.size(); ++i) {
    proto::TensorState* t = w.manifest.add_tensors();
    t->set_name("t" + std::to_string(i));
    Status added = writer.add_record(t, rs[i]);
    EXPECT_TRUE(added.ok()) << added.to_string();
  }
  Status finished = writer.finish();
  EXPECT_TRUE(finished.ok()) << finished.to_string();
  for (const auto& part : w.manifest.parts()) {
    auto bytes = read_delta_part(dir, w.manifest, w.files.size());
    EXPECT_TRUE(bytes.ok()) << part.file() << ": " << bytes.status().to_string();
    w.files.push_back(bytes.ok() ? *bytes : std::vector<uint8_t>());
  }
  return w;
}

TEST(DeltaParts, StreamedPartsEqualPartsWrittenWhole) {
  const std::string base = ::testing::TempDir() + "/delta_parts";
  const Written streamed = write_parts(base + "/streamed", false);
  const Written whole = write_parts(base + "/whole", true);
  ASSERT_EQ(streamed.manifest.parts_size(), whole.manifest.parts_size());
  ASSERT_GE(streamed.manifest.parts_size(), 3) << "records larger than a part get their own";
  EXPECT_EQ(streamed.manifest.SerializeAsString(), whole.manifest.SerializeAsString());
  EXPECT_EQ(streamed.files, whole.files);
  // Every record lies where the manifest says, after each part's 16-byte header.
  const auto rs = records();
  for (int i = 0; i < streamed.manifest.tensors_size(); ++i) {
    const proto::TensorState& t = streamed.manifest.tensors(i);
    const auto& file = streamed.files[t.part()];
    ASSERT_LE(t.offset() + t.bytes(), file.size()) << t.name();
    EXPECT_GE(t.offset(), kDeltaFileHeaderBytes) << t.name();
    EXPECT_TRUE(std::equal(rs[i].begin(), rs[i].end(), file.begin() + t.offset())) << t.name();
  }
  for (const auto& file : streamed.files) {
    EXPECT_EQ(
        std::vector<uint8_t>(file.begin(), file.begin() + kDeltaFileHeaderBytes),
        delta_file_header(static_cast<uint32_t>(std::count_if(
            streamed.manifest.tensors().begin(), streamed.manifest.tensors().end(),
            [&](const proto::TensorState& t) { return &streamed.files[t.part()] == &file; }))));
  }
}

TEST(DeltaParts, AFailedPieceWriteIsTheWritersErrorNamingThePart) {
  const std::string dir = ::testing::TempDir() + "/delta_parts_enospc";
  fs::remove_all(dir);
  fs::create_directories(dir);
  proto::StepManifest manifest;
  DeltaPartOptions options;
  options.part_bytes = uint64_t{8} << 20;
  int pieces = 0;
  options.before_write = [&](const std::string& file, uint64_t) -> Status {
    return ++pieces == 2 ? io_error("cannot write '" + file + "': No space left on device")
                         : ok_status();
  };
  DeltaPartWriter writer(dir, options, &manifest);
  Status s = ok_status();
  for (const auto& r : records()) {
    s = writer.add_record(manifest.add_tensors(), r);
    if (!s.ok()) break;
  }
  if (s.ok()) s = writer.finish();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("part-00000.wcd"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace weightcast
