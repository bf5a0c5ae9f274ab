// The check both live paths (UCX, NCCL) make before applying a delta they received:
// check_live_delta_parts in src/endpoint/live_path.h.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/endpoint/live_path.h"

namespace weightcast {
namespace {

proto::StepManifest manifest_of(uint64_t version, const std::vector<std::string>& files) {
  proto::StepManifest m;
  m.set_version(version);
  for (const auto& f : files) m.add_parts()->set_file(f);
  return m;
}

TEST(LiveDeltaParts, TheManifestPartThenExactlyTheManifestsFilesInOrder) {
  const auto m = manifest_of(7, {"part-0", "part-1"});
  EXPECT_TRUE(check_live_delta_parts("v7", 7, m, {"MANIFEST", "part-0", "part-1"}).ok());

  Status wrong_version =
      check_live_delta_parts("nccl version 8", 8, m, {"MANIFEST", "part-0", "part-1"});
  EXPECT_EQ(wrong_version.code(), StatusCode::kDataLoss);
  EXPECT_EQ(wrong_version.message(),
            "nccl version 8: its manifest (version 7, 2 parts) disagrees with the 3 parts served");

  Status missing = check_live_delta_parts("v7", 7, m, {"MANIFEST", "part-0"});
  EXPECT_EQ(missing.code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.message().find("2 parts served"), std::string::npos) << missing.message();

  Status swapped = check_live_delta_parts("v7", 7, m, {"MANIFEST", "part-1", "part-0"});
  EXPECT_EQ(swapped.code(), StatusCode::kDataLoss);
  EXPECT_EQ(swapped.message(), "v7: served part 'part-1' is not the manifest's 'part-0'");
}

}  // namespace
}  // namespace weightcast
