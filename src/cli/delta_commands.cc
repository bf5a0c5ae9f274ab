// `weightcast delta encode|apply|inspect`: the sparse delta codec on raw element files.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/base/file_io.h"
#include "codec/base/hex.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/delta_manifest.h"
#include "src/cli/commands.h"
#include "src/cli/number_flags.h"
#include "src/cli/path_flags.h"
#include "transport/fault_point.h"
#include "transport/user_file_writer.h"

namespace weightcast::cli {
namespace {

struct EncodeArgs {
  std::string dtype = "bf16", old_path, new_path, out_path, name;
  uint64_t base_version = 0, version = 1;
  uint32_t chunk_elements = kDefaultChunkElements;
  size_t threads = 1;
};

struct ApplyArgs {
  std::string dtype = "bf16", delta_path, target_path, tensor;
  size_t threads = 1;
};

struct InspectArgs {
  std::string delta_path;
  bool json = false;
  bool chunks = false;
};

std::unique_ptr<ThreadPool> make_pool(size_t threads) {
  return threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
}

Status run_encode(const EncodeArgs& a) {
  ASSIGN_OR_RETURN(const DType dtype, dtype_from_name(a.dtype));
  ASSIGN_OR_RETURN(const auto old_bytes, read_whole_file(a.old_path));
  ASSIGN_OR_RETURN(const auto new_bytes, read_whole_file(a.new_path));
  auto pool = make_pool(a.threads);
  EncodeOptions o;
  o.name = a.name.empty() ? std::filesystem::path(a.new_path).stem().string() : a.name;
  o.dtype = dtype;
  o.base_version = a.base_version;
  o.target_version = a.version;
  o.chunk_elements = a.chunk_elements;
  o.pool = pool.get();
  auto encoded = encode_delta(old_bytes, new_bytes, o);
  if (!encoded.ok())
    return encoded.status().with_context("encoding " + a.old_path + " -> " + a.new_path);
  std::vector<uint8_t> file = delta_file_header(1);
  file.insert(file.end(), encoded->record.begin(), encoded->record.end());
  // A new artifact: replaced atomically, so a reader never sees half a delta.
  ASSIGN_OR_RETURN(UserFileWriter out,
                   UserFileWriter::create(
                       a.out_path, {UserWriteMode::kAtomicReplace, {a.old_path, a.new_path}}));
  RETURN_IF_ERROR(out.write(file));
  // Every byte is in the temp file, the output still the old file (or absent).
  fault_point("delta_encode.temp_written", a.version);
  RETURN_IF_ERROR(out.commit());
  const auto& h = encoded->header;
  const double bits =
      h.changed == 0 ? 0.0 : 8.0 * static_cast<double>(encoded->record.size()) / h.changed;
  std::printf(
      "%s: %llu of %llu elements changed, %zu bytes (%.2f bits per change), "
      "version %llu -> %llu, checksum %s -> %s\n",
      a.out_path.c_str(), static_cast<unsigned long long>(h.changed),
      static_cast<unsigned long long>(h.range_elements), file.size(), bits,
      static_cast<unsigned long long>(h.base_version),
      static_cast<unsigned long long>(h.target_version), hex16(h.base_checksum).c_str(),
      hex16(h.target_checksum).c_str());
  return ok_status();
}

Result<size_t> pick_record(const std::vector<DeltaRecordView>& records, const std::string& tensor,
                           const std::string& path) {
  if (tensor.empty()) {
    if (records.size() == 1) return size_t{0};
    return invalid_argument("'" + path + "' holds " + std::to_string(records.size()) +
                            " records; choose one with --tensor NAME");
  }
  for (size_t r = 0; r < records.size(); ++r) {
    if (records[r].header.name == tensor) return r;
  }
  return not_found("'" + path + "' has no record for tensor '" + tensor + "'");
}

Status run_apply(const ApplyArgs& a) {
  ASSIGN_OR_RETURN(const DType dtype, dtype_from_name(a.dtype));
  ASSIGN_OR_RETURN(const auto delta_bytes, read_whole_file(a.delta_path));
  auto records = parse_delta_file(delta_bytes);
  if (!records.ok()) return records.status().with_context(a.delta_path);
  ASSIGN_OR_RETURN(const size_t r, pick_record(*records, a.tensor, a.delta_path));
  const DeltaRecordView& rec = (*records)[r];
  if (rec.header.dtype != dtype) {
    return invalid_argument("'" + a.delta_path + "' is a " +
                            std::string(dtype_name(rec.header.dtype)) + " delta but --dtype is " +
                            std::string(dtype_name(dtype)));
  }
  // Opened (and checked: writable, not the delta, no journal file) before any work is done.
  ASSIGN_OR_RETURN(
      UserFileWriter out,
      UserFileWriter::create(a.target_path, {UserWriteMode::kInPlace, {a.delta_path}}));
  ASSIGN_OR_RETURN(auto target, read_whole_file(out.resolved_path()));
  const size_t es = dtype_size(dtype);
  if (target.size() != rec.header.range_elements * es) {
    return invalid_argument("'" + a.target_path + "' has " + std::to_string(target.size()) +
                            " bytes but the delta for '" + rec.header.name + "' covers " +
                            std::to_string(rec.header.range_elements) + " " +
                            std::string(dtype_name(dtype)) + " elements");
  }
  auto pool = make_pool(a.threads);
  const TensorRef dest = TensorRef::contiguous(a.target_path, dtype, target.data(),
                                               static_cast<int64_t>(rec.header.range_elements));
  ApplyOptions o;
  o.pool = pool.get();
  auto report = apply_delta(rec, dest, o);
  if (!report.ok()) return report.status().with_context("'" + a.target_path + "' left unchanged");
  // The new content is verified in memory; the target has not been written yet.
  fault_point("delta_apply.verified", rec.header.target_version);
  // In place (user_file_writer.h): the target keeps its inode, links, mode and owner.
  RETURN_IF_ERROR(out.write(target));
  RETURN_IF_ERROR(out.commit());
  std::printf("%s: applied %llu changes, version %llu -> %llu, checksum %s verified\n",
              a.target_path.c_str(), static_cast<unsigned long long>(report->changed),
              static_cast<unsigned long long>(rec.header.base_version),
              static_cast<unsigned long long>(rec.header.target_version),
              hex16(report->checksum).c_str());
  return ok_status();
}

const char* mode_label(proto::ChunkMode mode) {
  return chunk_mode_name(static_cast<ChunkMode>(mode));
}

nlohmann::json record_json(const proto::DeltaRecordInfo& info, bool with_chunks) {
  nlohmann::json modes = nlohmann::json::object();
  nlohmann::json chunks = nlohmann::json::array();
  for (const auto& c : info.chunks()) {
    auto& count = modes[mode_label(c.mode())];
    count = count.is_null() ? 1 : count.get<int>() + 1;
    if (with_chunks) {
      chunks.push_back({{"mode", mode_label(c.mode())},
                        {"changed", c.changed()},
                        {"bytes", c.encoded_bytes()},
                        {"value_bits", c.value_bits()},
                        {"exceptions", c.exceptions()}});
    }
  }
  nlohmann::json j = {
      {"tensor", info.tensor()},
      {"dtype", std::string(dtype_name(static_cast<DType>(info.dtype())))},
      {"tensor_elements", info.tensor_elements()},
      {"range_offset", info.range_offset()},
      {"range_elements", info.range_elements()},
      {"base_version", info.base_version()},
      {"target_version", info.target_version()},
      {"base_checksum", hex_digits16(info.base_checksum())},
      {"target_checksum", hex_digits16(info.target_checksum())},
      {"changed", info.changed()},
      {"chunk_elements", info.chunk_elements()},
      {"chunk_count", info.chunks_size()},
      {"encoded_bytes", info.encoded_bytes()},
      {"bits_per_change", info.changed() == 0 ? 0.0 : 8.0 * info.encoded_bytes() / info.changed()},
      {"record_xxh3", hex_digits16(info.record_xxh3())},
      {"chunk_modes", modes},
  };
  if (with_chunks) j["chunks"] = chunks;
  return j;
}

Status run_inspect(const InspectArgs& a) {
  ASSIGN_OR_RETURN(const auto bytes, read_whole_file(a.delta_path));
  auto records = parse_delta_file(bytes);
  if (!records.ok()) return records.status().with_context(a.delta_path);
  nlohmann::json out = {{"file", a.delta_path},
                        {"format_version", kDeltaFormatVersion},
                        {"file_bytes", bytes.size()},
                        {"records", nlohmann::json::array()}};
  for (const auto& rec : *records) {
    ASSIGN_OR_RETURN(const auto info, describe_delta_record(rec));
    out["records"].push_back(record_json(info, a.json ? a.chunks : true));
  }
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return ok_status();
  }
  std::printf("%s: delta format %u, %zu bytes, %zu record(s)\n", a.delta_path.c_str(),
              static_cast<unsigned>(kDeltaFormatVersion), bytes.size(), records->size());
  for (const auto& r : out["records"]) {
    std::printf("\n  tensor %s (%s), elements [%llu, +%llu) of %llu\n",
                r["tensor"].get<std::string>().c_str(), r["dtype"].get<std::string>().c_str(),
                r["range_offset"].get<unsigned long long>(),
                r["range_elements"].get<unsigned long long>(),
                r["tensor_elements"].get<unsigned long long>());
    std::printf("    version  %llu -> %llu\n", r["base_version"].get<unsigned long long>(),
                r["target_version"].get<unsigned long long>());
    std::printf("    checksum %s -> %s\n", r["base_checksum"].get<std::string>().c_str(),
                r["target_checksum"].get<std::string>().c_str());
    std::printf("    changed  %llu, %llu bytes, %.2f bits per change\n",
                r["changed"].get<unsigned long long>(),
                r["encoded_bytes"].get<unsigned long long>(), r["bits_per_change"].get<double>());
    std::printf("    chunks   %d of %u elements: %s\n", r["chunk_count"].get<int>(),
                r["chunk_elements"].get<unsigned>(), r["chunk_modes"].dump().c_str());
    if (!a.chunks) continue;
    int index = 0;
    for (const auto& c : r["chunks"]) {
      std::printf("      chunk %5d  %-16s changed %6u  bytes %7u  value_bits %2u  exceptions %u\n",
                  index++, c["mode"].get<std::string>().c_str(), c["changed"].get<unsigned>(),
                  c["bytes"].get<unsigned>(), c["value_bits"].get<unsigned>(),
                  c["exceptions"].get<unsigned>());
    }
  }
  return ok_status();
}

}  // namespace

void register_delta_commands(CLI::App& app, int& exit_code) {
  auto* delta = app.add_subcommand("delta", "Encode, apply and inspect sparse delta files");
  delta->require_subcommand(1);

  auto enc = std::make_shared<EncodeArgs>();
  auto* e = delta->add_subcommand(
      "encode", "Encode the changes from OLD to NEW (raw little-endian element files)");
  e->add_option("--dtype", enc->dtype, "Element type: bf16, f16, f32, f8_e4m3fn, u8, ...")
      ->capture_default_str();
  e->add_option("--old", enc->old_path, "Raw file of the base version")
      ->required()
      ->check(existing_regular_file());
  e->add_option("--new", enc->new_path, "Raw file of the new version")
      ->required()
      ->check(existing_regular_file());
  e->add_option("-o,--output", enc->out_path, "Delta file to write (.wcd)")->required();
  e->add_option("--name", enc->name, "Tensor name stored in the record (default: NEW's file stem)");
  e->add_option("--base-version", enc->base_version, "Version of OLD")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxVersion));
  e->add_option("--version", enc->version, "Version of NEW")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxVersion));
  e->add_option("--chunk-elements", enc->chunk_elements, "Elements per independently encoded chunk")
      ->capture_default_str()
      ->check(number_in<uint32_t>(kMinChunkElements, kMaxChunkElements));
  e->add_option("--threads", enc->threads, "Threads encoding chunks")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  e->callback([enc, &exit_code] { exit_code = report(run_encode(*enc)); });

  auto app_args = std::make_shared<ApplyArgs>();
  auto* p = delta->add_subcommand("apply",
                                  "Apply a delta to a raw element file in place; refuses a wrong "
                                  "base and leaves the file unchanged on any failure");
  p->add_option("--dtype", app_args->dtype, "Element type of TARGET")->capture_default_str();
  p->add_option("--delta", app_args->delta_path, "Delta file (.wcd)")
      ->required()
      ->check(existing_regular_file());
  p->add_option("--target", app_args->target_path, "Raw file holding the base version")
      ->required()
      ->check(existing_regular_file());
  p->add_option("--tensor", app_args->tensor, "Record to apply when the file holds several");
  p->add_option("--threads", app_args->threads, "Threads applying chunks")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  p->callback([app_args, &exit_code] { exit_code = report(run_apply(*app_args)); });

  auto ins = std::make_shared<InspectArgs>();
  auto* i = delta->add_subcommand(
      "inspect", "Print a delta file's records: versions, checksums, chunks, sizes");
  i->add_option("delta", ins->delta_path, "Delta file (.wcd)")
      ->required()
      ->check(existing_regular_file());
  i->add_flag("--json", ins->json, "Print one JSON object");
  i->add_flag("--chunks", ins->chunks, "List every chunk");
  i->callback([ins, &exit_code] { exit_code = report(run_inspect(*ins)); });
}

}  // namespace weightcast::cli
