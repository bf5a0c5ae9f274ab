#include "src/journal_tool.h"

#include <filesystem>
#include <memory>

#include "codec/base/thread_pool.h"
#include "codec/delta_format.h"
#include "codec/delta_manifest.h"
#include "src/model_files.h"
#include "transport/fs/anchor_reader.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/delta_step.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/range_records.h"

namespace weightcast {

Result<std::vector<ReaderDestination>> destinations_for(
    const proto::StepManifest& manifest, std::vector<std::vector<uint8_t>>* storage) {
  std::vector<ReaderDestination> out;
  storage->assign(static_cast<size_t>(manifest.tensors_size()), {});
  for (int i = 0; i < manifest.tensors_size(); ++i) {
    const auto& t = manifest.tensors(i);
    ASSIGN_OR_RETURN(const DType dtype, dtype_from_proto(t.dtype()));
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(shape, t.name()));
    (*storage)[static_cast<size_t>(i)].resize(numel * dtype_size(dtype));
    out.push_back({t.name(), dtype, std::move(shape), (*storage)[static_cast<size_t>(i)]});
  }
  return out;
}

namespace {

// Rebuilds `version` of the journal into memory.
Status rebuild(const std::string& root, uint64_t version, ThreadPool* pool,
               std::vector<std::vector<uint8_t>>* storage, std::vector<ReaderDestination>* dests,
               const std::function<void(const std::string&)>& log) {
  JournalLayout layout(root);
  ASSIGN_OR_RETURN(auto manifest, read_manifest_file(layout.manifest(version)));
  ASSIGN_OR_RETURN(*dests, destinations_for(manifest, storage));
  CatchUpOptions options;
  options.pool = pool;
  options.log = log;
  CatchUpReader reader(root, *dests, options);
  ASSIGN_OR_RETURN(auto report, reader.catch_up(version));
  (void)report;
  return ok_status();
}

}  // namespace

Result<PublishReport> journal_publish(const JournalPublishConfig& c) {
  ThreadPool pool(c.threads);
  JournalOptions options;
  options.root = c.root;
  options.anchor_every = c.anchor_every;
  options.retention.keep_anchors = c.keep_anchors;
  options.delta.part_bytes = c.part_bytes;
  if (c.zstd) options.delta.compression = proto::COMPRESSION_ZSTD_BYTE_PLANES;
  options.anchor.shard_bytes = c.shard_bytes;
  options.anchor.threads = c.threads;
  options.pool = &pool;
  options.log = c.log;
  // The input is checked before the journal is opened, so a refused one leaves no trace.
  ASSIGN_OR_RETURN(auto model, read_model_files(c.from));
  if (model->tensors.empty()) {
    return invalid_argument("'" + c.from + "' has no tensors: nothing to publish");
  }
  ASSIGN_OR_RETURN(auto writer, JournalWriter::open(options));
  std::vector<PublishTensor> current;
  for (const auto& t : model->tensors) current.push_back({t.name, t.dtype, t.shape, t.bytes});

  std::vector<std::vector<uint8_t>> storage;
  std::vector<ReaderDestination> dests;
  std::vector<PublishTensor> previous;
  const auto& head = writer->head();
  if (head && !c.force_anchor && c.version == head->version() + 1) {
    if (c.log) c.log("rebuilding version " + std::to_string(head->version()) + " to diff against");
    RETURN_IF_ERROR(rebuild(c.root, head->version(), &pool, &storage, &dests, c.log));
    for (const auto& d : dests) previous.push_back({d.name, d.dtype, d.shape, d.bytes});
  }
  return writer->publish(c.version, current, previous, c.force_anchor);
}

Result<nlohmann::json> journal_inspect(const std::string& root, std::optional<uint64_t> version,
                                       bool tensors) {
  JournalLayout layout(root);
  nlohmann::json out;
  ASSIGN_OR_RETURN(auto head, read_journal_head(layout));
  if (!version) {
    out["root"] = root;
    if (head) {
      out["head"] = {{"version", head->version()},
                     {"anchor_version", head->anchor_version()},
                     {"committed_unix_ms", head->committed_unix_ms()}};
    } else {
      out["head"] = nullptr;
    }
    ASSIGN_OR_RETURN(auto steps, layout.list_steps());
    out["steps"] = nlohmann::json::array();
    for (const uint64_t v : steps) {
      nlohmann::json s{{"version", v}};
      auto m = read_manifest_file(layout.manifest(v));
      if (m.ok()) {
        s["kind"] = m->kind() == proto::STEP_ANCHOR  ? "anchor"
                    : m->kind() == proto::STEP_DELTA ? "delta"
                                                     : "parts";
        uint64_t bytes = 0;
        for (const auto& p : m->parts()) bytes += p.bytes();
        s["bytes"] = bytes;
        s["tensors"] = m->tensors_size();
      } else {
        s["error"] = m.status().message();
      }
      if (!head || v > head->version()) s["uncommitted"] = true;
      out["steps"].push_back(s);
    }
    out["leases"] = nlohmann::json::array();
    ASSIGN_OR_RETURN(auto leases, list_leases(layout));
    for (const auto& l : leases) {
      out["leases"].push_back({{"holder", l.holder()},
                               {"version", l.version()},
                               {"expires_unix_ms", l.expires_unix_ms()}});
    }
    return out;
  }
  ASSIGN_OR_RETURN(auto m, read_manifest_file(layout.manifest(*version)));
  out["version"] = m.version();
  out["kind"] = m.kind() == proto::STEP_ANCHOR  ? "anchor"
                : m.kind() == proto::STEP_DELTA ? "delta"
                                                : "parts";
  out["base_version"] = m.base_version();
  out["anchor_version"] = m.anchor_version();
  out["created_unix_ms"] = m.created_unix_ms();
  out["writer"] = m.writer();
  out["parts"] = nlohmann::json::array();
  for (const auto& p : m.parts()) {
    out["parts"].push_back(
        {{"file", p.file()},
         {"bytes", p.bytes()},
         {"raw_bytes", p.raw_bytes()},
         {"xxh3", p.xxh3()},
         {"compression",
          p.compression() == proto::COMPRESSION_NONE ? "none" : "zstd-byte-planes"}});
  }
  out["extents"] = m.extents_size();
  uint64_t changed = 0, changed_elements = 0;
  for (const auto& t : m.tensors()) {
    changed += t.changed() ? 1 : 0;
    changed_elements += t.changed_elements();
  }
  out["tensor_count"] = m.tensors_size();
  if (m.kind() == proto::STEP_DELTA) {
    out["changed_tensors"] = changed;
    out["changed_elements"] = changed_elements;
  }
  if (tensors) {
    out["tensors"] = nlohmann::json::array();
    for (const auto& t : m.tensors()) {
      nlohmann::json j{{"name", t.name()},
                       {"dtype", proto::DType_Name(t.dtype())},
                       {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
                       {"checksum", t.checksum()}};
      if (m.kind() == proto::STEP_ANCHOR || t.changed()) {
        j["part"] = t.part();
        j["offset"] = t.offset();
        j["bytes"] = t.bytes();
      }
      if (t.changed()) j["changed_elements"] = t.changed_elements();
      if (!t.ranges().empty()) {  // written by several publisher ranks
        j.erase("part");
        j.erase("offset");
        j.erase("bytes");
        j["ranges"] = nlohmann::json::array();
        for (const auto& r : t.ranges()) {
          nlohmann::json jr{{"rank", r.rank()},
                            {"range_offset", r.range_offset()},
                            {"range_elements", r.range_elements()},
                            {"checksum", r.checksum()}};
          if (r.has_box()) jr["box"] = describe_slice(range_slice(r));
          if (r.changed()) {
            jr["changed_elements"] = r.changed_elements();
            jr["part"] = r.part();
            jr["offset"] = r.offset();
            jr["bytes"] = r.bytes();
          }
          j["ranges"].push_back(jr);
        }
      }
      out["tensors"].push_back(j);
    }
  }
  return out;
}

namespace {

// Every part's XXH3 and every record of a delta step (in `dir`).
void verify_delta_dir(const std::string& dir, std::vector<std::string>* problems) {
  auto m = read_manifest_file(dir + "/MANIFEST");
  if (!m.ok()) {
    problems->push_back(m.status().message());
    return;
  }
  for (int p = 0; p < m->parts_size(); ++p) {
    auto bytes = read_delta_part(dir, *m, static_cast<size_t>(p));
    if (!bytes.ok()) {
      problems->push_back(bytes.status().message());
      continue;
    }
    const auto check = [&](const std::string& what, uint64_t offset, uint64_t size) {
      auto record = parse_delta_record(std::span<const uint8_t>(*bytes).subspan(offset, size));
      if (!record.ok()) problems->push_back(dir + ": " + what + ": " + record.status().message());
    };
    for (const auto& t : m->tensors()) {
      for (const auto& r : t.ranges()) {  // a tensor several publisher ranks wrote
        if (!r.changed() || r.part() != static_cast<uint32_t>(p)) continue;
        check("record of '" + t.name() + "' " + describe_range(r), r.offset(), r.bytes());
      }
      if (!t.ranges().empty() || !t.changed() || t.part() != static_cast<uint32_t>(p)) continue;
      check("record of '" + t.name() + "'", t.offset(), t.bytes());
    }
  }
}

}  // namespace

Result<std::vector<std::string>> journal_verify(
    const std::string& root, size_t threads, const std::function<void(const std::string&)>& log) {
  JournalLayout layout(root);
  ThreadPool pool(threads);
  std::vector<std::string> problems;
  ASSIGN_OR_RETURN(auto head, read_journal_head(layout));
  if (!head) return not_found("journal '" + root + "' has no HEAD");
  ASSIGN_OR_RETURN(auto steps, layout.list_steps());
  std::optional<uint64_t> oldest_anchor;
  for (const uint64_t v : steps) {
    if (v > head->version()) {
      problems.push_back(layout.step(v) + ": uncommitted step (newer than HEAD)");
      continue;
    }
    if (log) log("checking step " + std::to_string(v));
    auto m = read_manifest_file(layout.manifest(v));
    if (!m.ok()) {
      problems.push_back(m.status().message());
      continue;
    }
    if (m->kind() == proto::STEP_ANCHOR) {
      Status s = verify_anchor(layout.step(v), *m, &pool);
      if (!s.ok()) problems.push_back(s.message());
      if (!oldest_anchor) oldest_anchor = v;
      if (std::filesystem::exists(layout.step(v) + "/delta/MANIFEST")) {
        verify_delta_dir(layout.step(v) + "/delta", &problems);
      }
    } else {
      verify_delta_dir(layout.step(v), &problems);
    }
  }
  if (!oldest_anchor) {
    problems.push_back("journal '" + root + "' has no anchor at or below HEAD");
    return problems;
  }
  // The replay: every committed version from the oldest anchor must verify (invariant 3).
  std::vector<std::vector<uint8_t>> storage;
  std::vector<ReaderDestination> dests;
  auto anchor = read_manifest_file(layout.manifest(*oldest_anchor));
  if (!anchor.ok()) return problems;
  auto d = destinations_for(*anchor, &storage);
  if (!d.ok()) return d.status();
  CatchUpOptions options;
  options.pool = &pool;
  CatchUpReader reader(root, *d, options);
  // Only the versions that have a step: a journal may skip versions (v2 then v10, the later
  // one an anchor since it does not follow), and a skipped version was never committed.
  for (const uint64_t v : steps) {
    if (v < *oldest_anchor || v > head->version()) continue;
    auto r = reader.catch_up(v);
    if (!r.ok()) {
      problems.push_back("replay to version " + std::to_string(v) + ": " + r.status().message());
      break;
    }
  }
  return problems;
}

Status journal_materialize(const std::string& root, std::optional<uint64_t> version,
                           const std::string& out, size_t threads,
                           const std::function<void(const std::string&)>& log) {
  ThreadPool pool(threads);
  JournalLayout layout(root);
  if (!version) {
    ASSIGN_OR_RETURN(auto head, read_journal_head(layout));
    if (!head) return not_found("journal '" + root + "' has no HEAD (nothing published)");
    version = head->version();
  }
  // Refused before the rebuild: an output inside the journal would replace one of its files.
  const UserFileOptions output{UserWriteMode::kAtomicReplace, {}, {root}};
  RETURN_IF_ERROR(check_user_output(out, output));
  std::vector<std::vector<uint8_t>> storage;
  std::vector<ReaderDestination> dests;
  RETURN_IF_ERROR(rebuild(root, *version, &pool, &storage, &dests, log));
  std::vector<TensorBytesView> views;
  for (const auto& d : dests) views.push_back({d.name, d.dtype, d.shape, d.bytes});
  return write_model_file(out, views, output);
}

}  // namespace weightcast
