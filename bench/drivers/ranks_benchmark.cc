#include "bench/drivers/ranks_benchmark.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include "codec/base/file_io.h"
#include "codec/workload/synthetic_update.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/range_records.h"
#include "transport/fs/rank_publisher.h"

namespace weightcast {
namespace {

constexpr int64_t kCols = 4096;

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The process's peak resident set (VmHWM), 0 when /proc does not say.
uint64_t vm_hwm_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

struct Piece {
  size_t tensor;
  uint64_t first, count;
  std::optional<TensorSlice> box;  // a block of columns (--split columns)
};

std::string tensor_name(size_t i) {
  return "model.layers." + std::to_string(i) + ".weight";
}

std::vector<SafetensorsTensorSpec> model_specs(const RanksBenchmarkConfig& c) {
  const auto per = static_cast<int64_t>(c.parameters / c.tensors);
  std::vector<SafetensorsTensorSpec> out;
  for (size_t i = 0; i < c.tensors; ++i) {
    out.push_back(
        {tensor_name(i), DType::kBF16,
         per % kCols == 0 ? std::vector<int64_t>{per / kCols, kCols} : std::vector<int64_t>{per}});
  }
  return out;
}

// The model's elements end to end, cut at uneven points (every other rank a third of a share
// longer), so ranges start and end mid-tensor.
std::vector<std::vector<Piece>> shard(const RanksBenchmarkConfig& c) {
  const uint64_t per = c.parameters / c.tensors, total = per * c.tensors;
  if (c.split == "columns") {  // uneven blocks of columns, as torch.tensor_split cuts them
    std::vector<std::vector<Piece>> out(c.ranks);
    const auto specs = model_specs(c);
    for (size_t t = 0; t < specs.size(); ++t) {
      const auto& shape = specs[t].shape;
      for (uint32_t r = 0; r < c.ranks; ++r) {
        const TensorSlice s =
            *TensorSlice::split(shape, static_cast<int64_t>(shape.size()) - 1, c.ranks, r);
        const uint64_t n = slice_elements(shape, s);
        if (n > 0) out[r].push_back({t, 0, n, s});
      }
    }
    return out;
  }
  std::vector<uint64_t> at = {0};
  for (uint32_t r = 1; r < c.ranks; ++r) {
    const double share = static_cast<double>(total) / c.ranks;
    at.push_back(static_cast<uint64_t>(share * (r + (r % 2 == 1 ? 0.33 : -0.21))));
  }
  at.push_back(total);
  std::vector<std::vector<Piece>> out(c.ranks);
  for (uint32_t r = 0; r < c.ranks; ++r) {
    for (uint64_t g = at[r]; g < at[r + 1];) {
      const size_t t = g / per;
      const uint64_t end = std::min(at[r + 1], (t + 1) * per);
      out[r].push_back({t, g - t * per, end - g, std::nullopt});
      g = end;
    }
  }
  return out;
}

// Two engine layouts: every tensor split in two along rows, or along columns.
Result<std::vector<TensorSlice>> declared(const std::string&, const std::vector<int64_t>& shape) {
  std::vector<TensorSlice> out;
  for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
    for (int64_t part = 0; part < 2; ++part) {
      ASSIGN_OR_RETURN(TensorSlice s, TensorSlice::split(shape, dim, 2, part));
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::vector<SyntheticTensor> make_pieces(const std::vector<Piece>& pieces, uint32_t rank) {
  std::vector<SyntheticTensor> out;
  for (const Piece& p : pieces) out.emplace_back(p.count, kCols, 7000 + p.tensor * 64 + rank);
  return out;
}

// One rank's process: publishes every version from its pieces; its figures as JSON.
Result<nlohmann::json> run_rank(const RanksBenchmarkConfig& c, const std::string& root,
                                uint32_t rank, const std::vector<Piece>& mine, double lr) {
  std::vector<SyntheticTensor> pieces = make_pieces(mine, rank);
  const uint64_t before = vm_hwm_bytes();  // the trainer's own memory (master + bf16)
  RankPublisherOptions o;
  o.root = root;
  o.rank = rank;
  o.ranks = c.ranks;
  o.anchor_every = 0;
  o.piece_elements = c.piece_elements;
  o.wait = std::chrono::milliseconds(600000);
  o.journal.root = root;
  o.journal.anchor.threads = 1;
  o.journal.declared_slices = declared;
  o.journal.retention.keep_anchors = 100;
  const auto specs = model_specs(c);
  std::vector<OwnedRange> ranges;
  uint64_t shard_bytes = 0;
  for (size_t k = 0; k < mine.size(); ++k) {
    ranges.push_back({tensor_name(mine[k].tensor), mine[k].first, mine[k].count,
                      reinterpret_cast<const uint8_t*>(pieces[k].bf16().data()), mine[k].box});
    shard_bytes += mine[k].count * 2;
  }
  ASSIGN_OR_RETURN(auto publisher, RankPublisher::open(o, specs, ranges));
  nlohmann::json out{{"rank", rank}, {"shard_bytes", shard_bytes}};
  for (uint64_t v = 0; v < c.versions; ++v) {
    for (auto& p : pieces) {
      if (v > 0) p.step(lr * p.sigma(), v);
    }
    const double t0 = now_ms();
    ASSIGN_OR_RETURN(const RankPublishReport r, publisher->publish(v));
    out["publish_ms"].push_back(now_ms() - t0);
    out["stored_bytes"].push_back(r.stored_bytes);
  }
  out["publisher_rss_bytes"] = vm_hwm_bytes() - before;
  return out;
}

// The reference: one publisher holding the whole model (the same pieces, stitched).
Result<nlohmann::json> run_single(const RanksBenchmarkConfig& c, const std::string& root,
                                  const std::vector<std::vector<Piece>>& split, double lr) {
  const auto specs = model_specs(c);
  const uint64_t per = c.parameters / c.tensors;
  std::vector<std::vector<SyntheticTensor>> pieces;
  for (uint32_t r = 0; r < c.ranks; ++r) pieces.push_back(make_pieces(split[r], r));
  std::vector<std::vector<uint8_t>> now(c.tensors, std::vector<uint8_t>(per * 2));
  const auto stitch = [&] {
    for (uint32_t r = 0; r < c.ranks; ++r) {
      for (size_t k = 0; k < split[r].size(); ++k) {
        const Piece& p = split[r][k];
        const auto* from = reinterpret_cast<const uint8_t*>(pieces[r][k].bf16().data());
        if (!p.box) {
          std::memcpy(now[p.tensor].data() + p.first * 2, from, p.count * 2);
          continue;
        }
        for_each_slice_run(specs[p.tensor].shape, *p.box, [&](const SliceRun& run) {
          std::memcpy(now[p.tensor].data() + run.global * 2, from + run.local * 2, run.count * 2);
          return true;
        });
      }
    }
  };
  stitch();
  // The trainer's own memory: the pieces and the stitched model. The publisher's: the copy of
  // the version before that a delta is taken against (one model), and what it writes with.
  const uint64_t before = vm_hwm_bytes();
  std::vector<std::vector<uint8_t>> previous(c.tensors, std::vector<uint8_t>(per * 2));
  JournalOptions o;
  o.root = root;
  o.anchor_every = 0;
  o.anchor.threads = 1;
  o.declared_slices = declared;
  o.retention.keep_anchors = 100;
  ASSIGN_OR_RETURN(auto writer, JournalWriter::open(o));
  nlohmann::json out;
  for (uint64_t v = 0; v < c.versions; ++v) {
    std::vector<PublishTensor> cur, prev;
    if (v > 0) {
      for (size_t t = 0; t < c.tensors; ++t) previous[t] = now[t];
      for (auto& rank_pieces : pieces) {
        for (auto& p : rank_pieces) p.step(lr * p.sigma(), v);
      }
      stitch();
    }
    for (size_t t = 0; t < c.tensors; ++t) {
      cur.push_back({specs[t].name, DType::kBF16, specs[t].shape, now[t]});
      prev.push_back({specs[t].name, DType::kBF16, specs[t].shape, previous[t]});
    }
    const double t0 = now_ms();
    ASSIGN_OR_RETURN(const PublishReport r,
                     writer->publish(v, cur, v > 0 ? prev : decltype(prev){}));
    out["publish_ms"].push_back(now_ms() - t0);
    out["stored_bytes"].push_back(r.stored_bytes);
  }
  out["publisher_rss_bytes"] = vm_hwm_bytes() - before;
  out["model_bytes"] = c.parameters / c.tensors * c.tensors * 2;
  return out;
}

// Runs `body` in a child process that writes its JSON (or {"error"}) to `file`.
pid_t spawn(const std::string& file, const std::function<Result<nlohmann::json>()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto r = body();
    nlohmann::json out = r.ok() ? *r : nlohmann::json{{"error", r.status().message()}};
    std::ofstream(file) << out.dump();
    ::_exit(r.ok() ? 0 : 1);
  }
  return pid;
}

// Waits for a spawned child; its JSON, or its error naming `who`.
Result<nlohmann::json> collect(pid_t pid, const std::string& file, const std::string& who) {
  if (pid < 0) return io_error("bench ranks: cannot start " + who);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSIGN_OR_RETURN(const auto bytes, read_whole_file(file, uint64_t{64} << 20));
  nlohmann::json out = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (out.is_discarded()) return internal_error("bench ranks: " + who + " wrote no result");
  if (out.contains("error"))
    return internal_error("bench ranks: " + who + ": " + out["error"].get<std::string>());
  return out;
}

// An engine rank holding part 0 of every tensor split along `dim`: per delta version, the
// bytes it read against the records its slices meet, and its apply time.
Result<nlohmann::json> run_reader(const RanksBenchmarkConfig& c, const std::string& root,
                                  int64_t dim) {
  const auto specs = model_specs(c);
  std::vector<std::vector<uint8_t>> storage(specs.size());
  std::vector<ReaderDestination> d;
  std::vector<TensorSlice> slices;
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSIGN_OR_RETURN(TensorSlice s, TensorSlice::split(specs[i].shape, dim, 2, 0));
    storage[i].assign(slice_elements(specs[i].shape, s) * 2, 0);
    d.push_back({specs[i].name, DType::kBF16, specs[i].shape, storage[i], {}, s});
    slices.push_back(std::move(s));
  }
  CatchUpReader reader(root, std::move(d));
  RETURN_IF_ERROR(reader.catch_up(0).status());
  const JournalLayout layout(root);
  nlohmann::json out{{"layout", dim == 0 ? "tp2 rows" : "tp2 columns"}, {"part", 0}};
  for (uint64_t v = 1; v < c.versions; ++v) {
    ASSIGN_OR_RETURN(const auto m, read_manifest_file(layout.step(v) + "/MANIFEST"));
    uint64_t needed = 0;
    for (int i = 0; i < m.tensors_size(); ++i) {
      // As the reader picks them: a flat range between the slice's first and last element, a
      // box that shares an element with it.
      const auto& shape = specs[static_cast<size_t>(i)].shape;
      const TensorSlice& slice = slices[static_cast<size_t>(i)];
      const SliceLocator span(shape, slice);
      for (const auto& r : m.tensors(i).ranges()) {
        const bool meets = r.has_box() ? slices_meet(shape, slice, range_slice(r))
                                       : r.range_offset() < span.end() &&
                                             r.range_offset() + r.range_elements() > span.first();
        if (r.changed() && meets) needed += r.bytes();
      }
    }
    const uint64_t read_before = reader.delta_bytes_read();
    const double t0 = now_ms();
    RETURN_IF_ERROR(reader.catch_up(v).status());
    const uint64_t read = reader.delta_bytes_read() - read_before;
    out["versions"].push_back({{"version", v},
                               {"apply_ms", now_ms() - t0},
                               {"bytes_read", read},
                               {"intersecting_record_bytes", needed},
                               {"ratio", needed == 0 ? 0.0 : static_cast<double>(read) / needed}});
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Result<nlohmann::json> run_ranks_benchmark(const RanksBenchmarkConfig& c) {
  if (c.tensors == 0 || c.parameters < c.tensors * c.ranks || c.ranks == 0 || c.versions < 2) {
    return invalid_argument(
        "bench ranks: need parameters >= tensors x ranks, ranks >= 1, "
        "versions >= 2");
  }
  const auto log = [&](const std::string& line) {
    if (c.log) c.log("bench ranks: " + line);
  };
  char tmpl[4096];
  std::snprintf(tmpl, sizeof tmpl, "%s/wc-bench-ranks-XXXXXX", c.dir.c_str());
  if (::mkdtemp(tmpl) == nullptr)
    return io_error("bench ranks: cannot create a directory in '" + c.dir + "'");
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
  } cleanup{dir};
  const double lr = calibrate_lr(c.density, 7);
  const auto split = shard(c);

  log(std::to_string(c.ranks) + " publisher ranks, a process each, publish " +
      std::to_string(c.versions) + " versions of " + std::to_string(c.parameters) +
      " bf16 parameters");
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < c.ranks; ++r) {
    pids.push_back(spawn(dir + "/rank-" + std::to_string(r) + ".json",
                         [&, r] { return run_rank(c, dir + "/ranks", r, split[r], lr); }));
  }
  nlohmann::json out{{"parameters", c.parameters}, {"split", c.split},
                     {"tensors", c.tensors},       {"ranks", c.ranks},
                     {"versions", c.versions},     {"density", c.density}};
  std::vector<nlohmann::json> ranks;
  for (uint32_t r = 0; r < c.ranks; ++r) {
    ASSIGN_OR_RETURN(nlohmann::json j,
                     collect(pids[r], dir + "/rank-" + std::to_string(r) + ".json",
                             "rank " + std::to_string(r)));
    ranks.push_back(std::move(j));
  }
  log("the single publisher of the same model publishes the same versions");
  ASSIGN_OR_RETURN(const nlohmann::json single,
                   collect(spawn(dir + "/single.json",
                                 [&] { return run_single(c, dir + "/single", split, lr); }),
                           dir + "/single.json", "the single publisher"));
  log("engine ranks of two layouts follow the ranks' journal");
  nlohmann::json readers = nlohmann::json::array();
  for (const int64_t dim : {0, 1}) {
    ASSIGN_OR_RETURN(nlohmann::json j, run_reader(c, dir + "/ranks", dim));
    readers.push_back(std::move(j));
  }

  // Figures beside their references.
  double rss_vs_shard = 0, read_vs_needed = 0;
  for (const auto& r : ranks) {
    rss_vs_shard = std::max(
        rss_vs_shard, r["publisher_rss_bytes"].get<double>() / r["shard_bytes"].get<double>());
  }
  for (const auto& r : readers) {
    for (const auto& v : r["versions"])
      read_vs_needed = std::max(read_vs_needed, v["ratio"].get<double>());
  }
  std::vector<double> commit_ratio;
  nlohmann::json versions = nlohmann::json::array();
  for (uint64_t v = 0; v < c.versions; ++v) {
    const double ranked = ranks[0]["publish_ms"][v].get<double>();
    const double one = single["publish_ms"][v].get<double>();
    versions.push_back({{"version", v},
                        {"anchor", v == 0},
                        {"rank0_publish_ms", ranked},
                        {"single_publish_ms", one},
                        {"ratio", ranked / one}});
    if (v > 0) commit_ratio.push_back(ranked / one);
  }
  out["ranks_detail"] = ranks;
  out["single"] = single;
  out["readers"] = readers;
  out["versions_detail"] = versions;
  out["figures"] = {{"rank_publisher_rss_vs_shard_max", rss_vs_shard},
                    {"single_publisher_rss_vs_model", single["publisher_rss_bytes"].get<double>() /
                                                          single["model_bytes"].get<double>()},
                    {"engine_bytes_read_vs_intersecting_records_max", read_vs_needed},
                    {"engine_bytes_read_target", 1.2},
                    {"delta_publish_rank0_vs_single_median", median(commit_ratio)}};
  return out;
}

}  // namespace weightcast
