// The files `journal materialize --out`, `adapter publish --out` and `group init --dir` write,
// when what is in the way is not a plain file: a symlink (followed, the link kept), a hard
// link (documented: these commands replace atomically), a read-only file or a FIFO (refused,
// never blocked on), an input or a journal (refused). Commands run under a deadline.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "src/model_files.h"
#include "tests/service/run_command.h"
#include "tests/transport/user_file_test_util.h"

namespace {

namespace fs = std::filesystem;
using weightcast::DType;
using weightcast::TensorBytesView;
using weightcast::testing::CommandResult;
using weightcast::testing::has;
using weightcast::testing::refused;
using weightcast::testing::run_cli_within;
using weightcast::testing_util::contents;
using weightcast::testing_util::mode_of;
using weightcast::testing_util::put;

class CliFileSafetyOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-file-safety-out-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    std::vector<uint8_t> a(2 * 256), b(2 * 256);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 5 + 1);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 3 + 7);
    const std::vector<TensorBytesView> tensors{
        {"base_model.model.layers.0.lora_A.weight", DType::kBF16, {16, 16}, a},
        {"base_model.model.layers.0.lora_B.weight", DType::kBF16, {16, 16}, b}};
    ASSERT_TRUE(weightcast::write_model_file(p("model.safetensors"), tensors).ok());
    put(p("adapter_config.json"), R"({"r": 16, "lora_alpha": 32})");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return dir_ + "/" + name; }
  static CommandResult cli(const std::string& args) { return run_cli_within(20, args); }

  std::string journal() {
    const CommandResult r = cli("journal publish --root " + p("journal") + " --version 1 --from " +
                                p("model.safetensors"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return p("journal");
  }
  CommandResult materialize(const std::string& out) {
    return cli("journal materialize --root " + p("journal") + " --out " + out);
  }
  CommandResult publish(const std::string& out, const std::string& from = "",
                        const std::string& config = "") {
    return cli("adapter publish --from " + (from.empty() ? p("model.safetensors") : from) +
               " --config " + (config.empty() ? p("adapter_config.json") : config) + " --out " +
               out);
  }
  CommandResult init_group() { return cli("group init --force --dir " + p("group")); }

  std::string dir_;
};

// --out inside the journal used to replace one of the journal's own files.
TEST_F(CliFileSafetyOutputs, MaterializeRefusesAnOutputInsideTheJournal) {
  const std::string root = journal();
  std::string shard;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().extension() == ".safetensors") shard = e.path().string();
  }
  ASSERT_FALSE(shard.empty());
  const std::string before = contents(shard);
  for (const std::string& out : {shard, root + "/model.safetensors"}) {
    const CommandResult r = materialize(out);
    EXPECT_TRUE(refused(r)) << r.output;
    EXPECT_TRUE(has(r, "output '" + out + "' lies inside the journal")) << r.output;
  }
  EXPECT_EQ(contents(shard), before);
  EXPECT_FALSE(fs::exists(root + "/model.safetensors"));
  const CommandResult verify = cli("journal verify --root " + root);
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

TEST_F(CliFileSafetyOutputs, MaterializeThroughASymlinkWritesTheTarget) {
  journal();
  put(p("real.safetensors"), "previous");
  ASSERT_EQ(::chmod(p("real.safetensors").c_str(), 0600), 0);
  fs::create_symlink("real.safetensors", p("out-link.safetensors"));
  const CommandResult r = materialize(p("out-link.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(p("out-link.safetensors")));
  EXPECT_EQ(contents(p("real.safetensors")), contents(p("model.safetensors")));
  EXPECT_EQ(mode_of(p("real.safetensors")), 0600u);
}

TEST_F(CliFileSafetyOutputs, MaterializeOverAHardLinkReplacesThePathWhole) {
  journal();
  put(p("out.safetensors"), "previous");
  ASSERT_EQ(::link(p("out.safetensors").c_str(), p("out-hard.safetensors").c_str()), 0);
  const CommandResult r = materialize(p("out.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(contents(p("out.safetensors")), contents(p("model.safetensors")));
  EXPECT_EQ(contents(p("out-hard.safetensors")), "previous");
}

TEST_F(CliFileSafetyOutputs, MaterializeRefusesReadOnlyFifoAndInputOutputs) {
  journal();
  put(p("ro.safetensors"), "keep");
  ASSERT_EQ(::chmod(p("ro.safetensors").c_str(), 0444), 0);
  const CommandResult ro = materialize(p("ro.safetensors"));
  EXPECT_TRUE(refused(ro)) << ro.output;
  EXPECT_TRUE(has(ro, "'" + p("ro.safetensors") + "' is read-only")) << ro.output;
  EXPECT_EQ(contents(p("ro.safetensors")), "keep");
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  const CommandResult fifo = materialize(p("fifo"));
  EXPECT_TRUE(refused(fifo)) << fifo.output;
  EXPECT_TRUE(has(fifo, "'" + p("fifo") + "' is a FIFO, not a regular file")) << fifo.output;
  EXPECT_TRUE(fs::is_fifo(p("fifo")));
}

TEST_F(CliFileSafetyOutputs, PublishRefusesAnInputInsideTheOutput) {
  ASSERT_EQ(publish(p("adapter")).exit_code, 0);
  const std::string config = p("adapter/adapter_config.json");
  const std::string model = p("adapter/adapter_model.safetensors");
  const std::string config_before = contents(config), model_before = contents(model);
  const CommandResult c = publish(p("adapter"), "", config);
  EXPECT_TRUE(refused(c)) << c.output;
  EXPECT_TRUE(has(c, "output '" + config + "' is the input '" + config + "'")) << c.output;
  const CommandResult m = publish(p("adapter"), model);
  EXPECT_TRUE(refused(m)) << m.output;
  EXPECT_TRUE(has(m, "is the input '" + model + "'")) << m.output;
  EXPECT_EQ(contents(config), config_before);
  EXPECT_EQ(contents(model), model_before);
}

TEST_F(CliFileSafetyOutputs, PublishFollowsASymlinkedConfigAndKeepsItsMode) {
  fs::create_directory(p("adapter"));
  put(p("shared-config.json"), "{}");
  ASSERT_EQ(::chmod(p("shared-config.json").c_str(), 0600), 0);
  fs::create_symlink("../shared-config.json", p("adapter/adapter_config.json"));
  const CommandResult r = publish(p("adapter"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(p("adapter/adapter_config.json")));
  EXPECT_EQ(contents(p("shared-config.json")), contents(p("adapter_config.json")));
  EXPECT_EQ(mode_of(p("shared-config.json")), 0600u);
}

TEST_F(CliFileSafetyOutputs, PublishOverAHardLinkReplacesThePathWhole) {
  fs::create_directory(p("adapter"));
  put(p("adapter/adapter_config.json"), "{}");
  ASSERT_EQ(::link(p("adapter/adapter_config.json").c_str(), p("config-hard.json").c_str()), 0);
  const CommandResult r = publish(p("adapter"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(contents(p("adapter/adapter_config.json")), contents(p("adapter_config.json")));
  EXPECT_EQ(contents(p("config-hard.json")), "{}");
}

TEST_F(CliFileSafetyOutputs, PublishRefusesReadOnlyAndFifoFilesBeforeWritingAny) {
  fs::create_directory(p("adapter"));
  put(p("adapter/adapter_model.safetensors"), "keep");
  ASSERT_EQ(::chmod(p("adapter/adapter_model.safetensors").c_str(), 0444), 0);
  const CommandResult ro = publish(p("adapter"));
  EXPECT_TRUE(refused(ro)) << ro.output;
  EXPECT_TRUE(has(ro, "'" + p("adapter/adapter_model.safetensors") + "' is read-only"))
      << ro.output;
  EXPECT_FALSE(fs::exists(p("adapter/adapter_config.json")));
  EXPECT_EQ(contents(p("adapter/adapter_model.safetensors")), "keep");
  ASSERT_EQ(::mkfifo(p("adapter/adapter_config.json").c_str(), 0644), 0);
  ASSERT_EQ(::chmod(p("adapter/adapter_model.safetensors").c_str(), 0644), 0);
  const CommandResult fifo = publish(p("adapter"));
  EXPECT_TRUE(refused(fifo)) << fifo.output;
  EXPECT_TRUE(has(fifo, "is a FIFO, not a regular file")) << fifo.output;
  EXPECT_EQ(contents(p("adapter/adapter_model.safetensors")), "keep");
  ASSERT_EQ(::mkfifo(p("config-fifo").c_str(), 0644), 0);
  const CommandResult input = publish(p("adapter2"), "", p("config-fifo"));
  EXPECT_TRUE(refused(input)) << input.output;
  EXPECT_TRUE(has(input, "'" + p("config-fifo") + "' is a FIFO, not a regular file"))
      << input.output;
}

TEST_F(CliFileSafetyOutputs, GroupInitFollowsASymlinkedConfigAndKeepsItsMode) {
  fs::create_directory(p("group"));
  put(p("real.yaml"), "previous");
  ASSERT_EQ(::chmod(p("real.yaml").c_str(), 0640), 0);
  fs::create_symlink("../real.yaml", p("group/group.yaml"));
  const CommandResult r = init_group();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(p("group/group.yaml")));
  EXPECT_NE(contents(p("real.yaml")).find("group_id:"), std::string::npos);
  EXPECT_EQ(mode_of(p("real.yaml")), 0640u);
  const CommandResult ranks = cli("group ranks --config " + p("group/group.yaml"));
  EXPECT_EQ(ranks.exit_code, 0) << ranks.output;
}

TEST_F(CliFileSafetyOutputs, GroupInitOverAHardLinkReplacesThePathWhole) {
  fs::create_directory(p("group"));
  put(p("group/group.yaml"), "previous");
  ASSERT_EQ(::link(p("group/group.yaml").c_str(), p("hard.yaml").c_str()), 0);
  const CommandResult r = init_group();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(contents(p("group/group.yaml")).find("group_id:"), std::string::npos);
  EXPECT_EQ(contents(p("hard.yaml")), "previous");
}

TEST_F(CliFileSafetyOutputs, GroupInitRefusesReadOnlyAndFifoConfigs) {
  fs::create_directory(p("group"));
  put(p("group/group.yaml"), "keep");
  ASSERT_EQ(::chmod(p("group/group.yaml").c_str(), 0444), 0);
  const CommandResult ro = init_group();
  EXPECT_TRUE(refused(ro)) << ro.output;
  EXPECT_TRUE(has(ro, "'" + p("group/group.yaml") + "' is read-only")) << ro.output;
  EXPECT_EQ(contents(p("group/group.yaml")), "keep");
  fs::remove(p("group/group.yaml"));
  ASSERT_EQ(::mkfifo(p("group/group.yaml").c_str(), 0644), 0);
  const CommandResult fifo = init_group();
  EXPECT_TRUE(refused(fifo)) << fifo.output;
  EXPECT_TRUE(has(fifo, "'" + p("group/group.yaml") + "' is a FIFO, not a regular file"))
      << fifo.output;
  EXPECT_TRUE(fs::is_fifo(p("group/group.yaml")));
}

// group init writes the config beside the group's journal, never inside it.
TEST_F(CliFileSafetyOutputs, GroupInitRefusesADirectoryThatIsAJournal) {
  fs::create_directories(p("group"));
  put(p("group/LOCK"), "");
  const CommandResult r = init_group();
  EXPECT_TRUE(refused(r)) << r.output;
  EXPECT_TRUE(has(r, "lies inside the journal")) << r.output;
  EXPECT_FALSE(fs::exists(p("group/group.yaml")));
}

}  // namespace
