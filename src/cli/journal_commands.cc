// `weightcast journal ...`: publish model files into a filesystem journal, inspect, verify,
// materialize and garbage-collect it.
#include <cstdio>
#include <iostream>
#include <memory>

#include "src/cli/commands.h"
#include "src/cli/number_flags.h"
#include "src/cli/path_flags.h"
#include "src/control/group_config.h"
#include "src/journal_tool.h"
#include "transport/fs/retention.h"
#include "transport/fs/step_commit.h"

namespace weightcast::cli {
namespace {

void progress_line(const std::string& line) {
  std::fprintf(stderr, "weightcast: %s\n", line.c_str());
}

void register_publish(CLI::App* journal, int& exit_code) {
  auto c = std::make_shared<JournalPublishConfig>();
  auto* p = journal->add_subcommand(
      "publish",
      "Publish a model file as a new version: the first becomes an anchor, later ones deltas "
      "against the previous version (rebuilt from the journal), an anchor every --anchor-every");
  p->add_option("--root", c->root, "Journal root directory (created if missing)")->required();
  p->add_option("--version", c->version, "Version to publish (newer than HEAD)")
      ->required()
      ->check(number_in<uint64_t>(0, kMaxVersion));
  p->add_option("--from", c->from, "MODEL.safetensors, or a model.safetensors.index.json of shards")
      ->required()
      ->check(existing_regular_file());
  p->add_option("--anchor-every", c->anchor_every, "An anchor at least every N versions (0: never)")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxAnchorEvery));
  p->add_flag("--anchor", c->force_anchor, "Write this version as an anchor");
  p->add_option("--keep-anchors", c->keep_anchors, "Anchors retention keeps")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxRetainAnchors));
  p->add_option("--part-bytes", c->part_bytes, "Size of delta part files")
      ->capture_default_str()
      ->check(number_in<uint64_t>(kMinJournalFileBytes, kMaxPartBytes));
  p->add_option("--shard-bytes", c->shard_bytes, "Size of anchor shard files")
      ->capture_default_str()
      ->check(number_in<uint64_t>(kMinJournalFileBytes, kMaxShardBytes));
  p->add_option("--threads", c->threads, "Encoder and anchor writer threads")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  p->add_flag("--zstd", c->zstd, "Compress delta parts with zstd on byte planes");
  p->callback([c, &exit_code] {
    c->log = progress_line;
    auto r = journal_publish(*c);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    nlohmann::json j{{"version", r->version},
                     {"kind", r->anchor ? "anchor" : "delta"},
                     {"why_anchor", r->why_anchor},
                     {"changed_tensors", r->changed_tensors},
                     {"changed_elements", r->changed_elements},
                     {"stored_bytes", r->stored_bytes},
                     {"seconds", r->seconds},
                     {"gc_removed", r->gc.removed}};
    std::cout << j.dump() << "\n";
  });
}

void register_inspect(CLI::App* journal, int& exit_code) {
  auto root = std::make_shared<std::string>();
  auto version = std::make_shared<uint64_t>();
  auto tensors = std::make_shared<bool>(false);
  auto* i = journal->add_subcommand(
      "inspect",
      "Print HEAD, the steps and the leases as JSON, or one step's manifest (--version)");
  i->add_option("--root", *root, "Journal root directory")->required()->check(existing_directory());
  auto* v = i->add_option("--version", *version, "A step to print")
                ->check(number_in<uint64_t>(0, kMaxVersion));
  i->add_flag("--tensors", *tensors, "With --version: list every tensor");
  i->callback([root, version, tensors, v, &exit_code] {
    auto r = journal_inspect(*root, v->count() ? std::optional<uint64_t>(*version) : std::nullopt,
                             *tensors);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::cout << r->dump(2) << "\n";
  });
}

void register_verify(CLI::App* journal, int& exit_code) {
  auto root = std::make_shared<std::string>();
  auto threads = std::make_shared<size_t>(4);
  auto* c = journal->add_subcommand(
      "verify",
      "Re-read and check everything: XXH3 of every part, every record, anchors' headers "
      "and index, then a replay from the oldest anchor to HEAD (exit 1 on any problem)");
  c->add_option("--root", *root, "Journal root directory")->required()->check(existing_directory());
  c->add_option("--threads", *threads, "Reader threads")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  c->callback([root, threads, &exit_code] {
    auto r = journal_verify(*root, *threads, progress_line);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    for (const auto& problem : *r)
      std::fprintf(stderr, "weightcast: problem: %s\n", problem.c_str());
    if (!r->empty()) {
      std::fprintf(stderr, "weightcast: %zu problem(s) in %s\n", r->size(), root->c_str());
      exit_code = 1;
      return;
    }
    std::printf("journal %s: ok\n", root->c_str());
  });
}

void register_materialize(CLI::App* journal, int& exit_code) {
  auto root = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto version = std::make_shared<uint64_t>();
  auto threads = std::make_shared<size_t>(4);
  auto* m = journal->add_subcommand(
      "materialize", "Rebuild a version (anchor + deltas, verified) as one safetensors file");
  m->add_option("--root", *root, "Journal root directory")->required()->check(existing_directory());
  auto* v = m->add_option("--version", *version, "Version to rebuild (default: HEAD)")
                ->check(number_in<uint64_t>(0, kMaxVersion));
  m->add_option("--out", *out, "Output MODEL.safetensors (written atomically)")->required();
  m->add_option("--threads", *threads, "Reader threads")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  m->callback([root, out, version, threads, v, &exit_code] {
    exit_code = report(
        journal_materialize(*root, v->count() ? std::optional<uint64_t>(*version) : std::nullopt,
                            *out, *threads, progress_line));
  });
}

void register_gc(CLI::App* journal, int& exit_code) {
  auto root = std::make_shared<std::string>();
  auto keep = std::make_shared<size_t>(2);
  auto* g = journal->add_subcommand(
      "gc",
      "Remove steps older than the newest --keep-anchors anchors that no live lease needs, "
      "and expired leases");
  g->add_option("--root", *root, "Journal root directory")->required()->check(existing_directory());
  g->add_option("--keep-anchors", *keep, "Anchors to keep")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxRetainAnchors));
  g->callback([root, keep, &exit_code] {
    RetentionPolicy policy;
    policy.keep_anchors = *keep;
    auto r = collect_garbage(JournalLayout(*root), policy, unix_now_ms());
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    nlohmann::json j{{"removed", r->removed},
                     {"expired_leases", r->expired_leases},
                     {"keep_from", r->keep_from}};
    std::cout << j.dump() << "\n";
  });
}

}  // namespace

void register_journal_commands(CLI::App& app, int& exit_code) {
  auto* journal =
      app.add_subcommand("journal", "The filesystem journal: anchors, deltas, catch-up");
  journal->require_subcommand(1);
  register_publish(journal, exit_code);
  register_inspect(journal, exit_code);
  register_verify(journal, exit_code);
  register_materialize(journal, exit_code);
  register_gc(journal, exit_code);
  register_journal_repair(journal, exit_code);
}

}  // namespace weightcast::cli
