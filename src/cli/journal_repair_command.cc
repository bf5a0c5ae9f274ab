// `weightcast journal repair-head`: rebuild a lost or unreadable HEAD (src/journal_repair.h).
#include <cstdio>
#include <memory>

#include "src/cli/commands.h"
#include "src/cli/number_flags.h"
#include "src/cli/path_flags.h"
#include "src/journal_repair.h"

namespace weightcast::cli {

void register_journal_repair(CLI::App* journal, int& exit_code) {
  auto root = std::make_shared<std::string>();
  auto threads = std::make_shared<size_t>(4);
  auto* r = journal->add_subcommand(
      "repair-head",
      "Rebuild a missing or unreadable HEAD: the newest step that replays completely "
      "(anchor + deltas, every XXH3 and checksum verified) becomes HEAD; nothing else is "
      "written");
  r->add_option("--root", *root, "Journal root directory")->required()->check(existing_directory());
  r->add_option("--threads", *threads, "Reader threads")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  r->callback([root, threads, &exit_code] {
    auto done = journal_repair_head(*root, *threads, [](const std::string& line) {
      std::fprintf(stderr, "weightcast: %s\n", line.c_str());
    });
    if (!done.ok()) {
      exit_code = report(done.status());
      return;
    }
    for (const auto& rejected : done->rejected) {
      std::fprintf(stderr, "weightcast: not verified, left uncommitted: %s\n", rejected.c_str());
    }
    std::printf("journal %s: HEAD rebuilt at version %llu (anchor %llu, journal id %s)\n",
                root->c_str(), static_cast<unsigned long long>(done->version),
                static_cast<unsigned long long>(done->anchor_version), done->journal_id.c_str());
  });
}

}  // namespace weightcast::cli
