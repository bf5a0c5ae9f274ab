// `weightcast journal inspect` and `journal verify` on a journal that several publisher ranks
// wrote (transport/fs/rank_publisher.h): inspect lists each tensor's ranges with their ranks,
// verify passes it and, with one range record damaged, names the rank's part and fails the
// replay.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tests/service/run_command.h"
#include "tests/transport/journal_ranks_util.h"
#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/rank_publisher.h"

namespace weightcast {
namespace {

using testing::run_cli;

constexpr uint64_t kSeed = 83;
constexpr uint32_t kRanks = 3;

// Versions 0 (an anchor) and 1 (a delta) of the test model from three rank threads.
void publish_from_ranks(const std::string& root) {
  std::vector<std::thread> threads;
  std::vector<Status> results(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      testing::JournalTestModel model(kSeed);
      const auto split = testing::fsdp_split(model, {0.3, 0.6});
      RankPublisherOptions o;
      o.root = root;
      o.rank = r;
      o.ranks = kRanks;
      o.wait = std::chrono::milliseconds(30000);
      o.journal = testing::robustness_options(root, 0);
      const auto tensors = model.tensors();
      std::vector<OwnedRange> ranges;
      for (const testing::Owned& p : split[r]) {
        const size_t es = dtype_size(tensors[p.tensor].dtype);
        ranges.push_back({tensors[p.tensor].name, p.first, p.count,
                          model.bytes(p.tensor).data() + p.first * es});
      }
      auto publisher = RankPublisher::open(o, testing::specs_of(model), ranges);
      Status s = publisher.status();
      for (uint64_t v = 0; v <= 1 && s.ok(); ++v) {
        model.advance_to(v);
        s = (*publisher)->publish(v).status();
      }
      results[r] = s;
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.message();
}

TEST(JournalRanksCli, InspectListsTheRanksRangesAndVerifyNamesADamagedOne) {
  testing::ScratchDir dir;
  publish_from_ranks(dir.path());
  auto inspect = run_cli("journal inspect --root " + dir.path() + " --version 1 --tensors");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  const auto step = nlohmann::json::parse(inspect.output);
  EXPECT_EQ(step["kind"], "delta");
  std::set<uint32_t> ranks;
  const nlohmann::json* split = nullptr;  // a tensor two ranks share
  for (const auto& t : step["tensors"]) {
    if (!t.contains("ranges")) continue;
    EXPECT_FALSE(t.contains("part")) << t.dump();
    for (const auto& r : t["ranges"]) ranks.insert(r["rank"].get<uint32_t>());
    if (t["ranges"].size() > 1 && t["ranges"][0].contains("part")) split = &t;
  }
  EXPECT_EQ(ranks, (std::set<uint32_t>{0, 1, 2}));
  ASSERT_NE(split, nullptr) << inspect.output;

  auto verify = run_cli("journal verify --root " + dir.path());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;

  // One byte inside the first changed range record of that tensor (in its header's name).
  const auto& r = (*split)["ranges"][0];
  auto m = read_manifest_file(JournalLayout(dir.path()).step(1) + "/MANIFEST");
  ASSERT_TRUE(m.ok());
  const std::string part =
      JournalLayout(dir.path()).step(1) + "/" + m->parts(r["part"].get<int>()).file();
  {
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(r["offset"].get<uint64_t>() + 100));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(r["offset"].get<uint64_t>() + 100));
    f.write(&c, 1);
  }
  verify = run_cli("journal verify --root " + dir.path());
  EXPECT_NE(verify.exit_code, 0) << verify.output;
  // The damaged part is named by its rank's file, and the replay names the tensor.
  EXPECT_NE(verify.output.find(m->parts(r["part"].get<int>()).file() + "': XXH3 mismatch"),
            std::string::npos)
      << verify.output;
  EXPECT_NE(verify.output.find("r" + std::to_string(r["rank"].get<uint32_t>()) + "-part-"),
            std::string::npos);
  EXPECT_NE(verify.output.find("cannot reach version 1"), std::string::npos) << verify.output;
}

}  // namespace
}  // namespace weightcast
