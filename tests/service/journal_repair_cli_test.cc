// A journal whose HEAD is lost: `journal publish` refuses it (naming the way back) instead of
// starting over, `journal repair-head` rebuilds HEAD from the newest step that replays, and
// `journal verify` accepts a journal with a gap in its versions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/base/file_io.h"
#include "tests/service/journal_cli_fixture.h"
#include "tests/service/run_command.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast::testing {
namespace {

class JournalRepairCli : public JournalCliFixture {
 protected:
  void publish(int v, const std::string& extra = "") {
    auto r = run_cli("journal publish --root " + root() + " --version " + std::to_string(v) +
                     " --from " + write_model(v, v * 3) + " --anchor-every 3 " + extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  std::string head_id() {
    auto head = read_head_file(JournalLayout(root()).head());
    return head.ok() ? head->journal_id() : "";
  }
};

TEST_F(JournalRepairCli, PublishRefusesAJournalWithoutHeadAndKeepsItsSteps) {
  for (int v = 1; v <= 4; ++v) publish(v);
  const JournalLayout layout(root());
  auto before = layout.list_steps();
  ASSERT_TRUE(before.ok());
  const auto v4 = read_whole_file(layout.manifest(4));
  ASSERT_TRUE(v4.ok());
  ASSERT_EQ(::unlink(layout.head().c_str()), 0);

  auto again =
      run_cli("journal publish --root " + root() + " --version 1 --from " + write_model(9, 40));
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("no HEAD"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("weightcast journal repair-head --root " + root()), std::string::npos)
      << again.output;
  EXPECT_EQ(again.output.find("first version"), std::string::npos) << again.output;
  auto after = layout.list_steps();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
  EXPECT_EQ(read_whole_file(layout.manifest(4)).value(), *v4);  // v4 is still the old v4
  for (const char* cmd : {"journal inspect", "journal verify", "journal materialize --out x"}) {
    auto r = run_cli(std::string(cmd) + " --root " + root());
    EXPECT_NE(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("repair-head"), std::string::npos) << cmd << "\n" << r.output;
  }
}

TEST_F(JournalRepairCli, RepairHeadRebuildsTheNewestCompleteStepKeepingTheIdentity) {
  for (int v = 1; v <= 5; ++v) publish(v);
  const std::string id = head_id();
  ASSERT_EQ(id.size(), 32u);
  const JournalLayout layout(root());
  ASSERT_EQ(::unlink(layout.head().c_str()), 0);
  // The newest step is damaged: repair must fall back to v4, never name v5.
  {
    std::fstream f(layout.manifest(5), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.put('\x55');
  }
  auto repaired = run_cli("journal repair-head --root " + root());
  ASSERT_EQ(repaired.exit_code, 0) << repaired.output;
  EXPECT_NE(repaired.output.find("HEAD rebuilt at version 4"), std::string::npos)
      << repaired.output;
  EXPECT_NE(repaired.output.find("version 5"), std::string::npos) << repaired.output;
  EXPECT_EQ(head_id(), id);
  auto head = read_head_file(layout.head());
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->version(), 4u);
  EXPECT_EQ(head->anchor_version(), 4u);  // anchors at 1 and 4 (--anchor-every 3)

  // The damaged v5 is left in place, uncommitted (verify says so), until the next writer
  // removes it; the journal works again from v4.
  auto verify = run_cli("journal verify --root " + root());
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find("uncommitted step"), std::string::npos) << verify.output;
  publish(5);
  auto clean = run_cli("journal verify --root " + root());
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  auto inspect = run_cli("journal inspect --root " + root());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_EQ(nlohmann::json::parse(inspect.output)["head"]["version"], 5);
  EXPECT_EQ(head_id(), id);
}

TEST_F(JournalRepairCli, RepairHeadRefusesWhatItMustNotTouch) {
  auto missing = run_cli("journal repair-head --root " + dir_ + "/none");
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  EXPECT_NE(missing.output.find(dir_ + "/none"), std::string::npos) << missing.output;
  publish(1);
  auto healthy = run_cli("journal repair-head --root " + root());
  EXPECT_EQ(healthy.exit_code, 1) << healthy.output;
  EXPECT_NE(healthy.output.find("nothing to repair"), std::string::npos) << healthy.output;
  // Every step broken: nothing written.
  const JournalLayout layout(root());
  ASSERT_EQ(::unlink(layout.head().c_str()), 0);
  std::filesystem::resize_file(layout.manifest(1), 5);
  auto hopeless = run_cli("journal repair-head --root " + root());
  EXPECT_EQ(hopeless.exit_code, 1) << hopeless.output;
  EXPECT_NE(hopeless.output.find("no step replays"), std::string::npos) << hopeless.output;
  EXPECT_FALSE(std::filesystem::exists(layout.head()));
  auto help = run_cli("journal repair-head --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("Usage"), std::string::npos);
}

TEST_F(JournalRepairCli, VerifyAcceptsAJournalWithAGapInItsVersions) {
  publish(1);
  publish(2);
  publish(10);  // does not follow 2: an anchor
  auto verify = run_cli("journal verify --root " + root());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_EQ(verify.output.find("problem"), std::string::npos) << verify.output;
  const std::string out = dir_ + "/v10.safetensors";
  auto mat = run_cli("journal materialize --root " + root() + " --version 10 --out " + out);
  ASSERT_EQ(mat.exit_code, 0) << mat.output;
  EXPECT_EQ(read_whole_file(out).value(), read_whole_file(dir_ + "/model-v10.safetensors").value());
}

}  // namespace
}  // namespace weightcast::testing
