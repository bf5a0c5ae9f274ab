#include "transport/fs/anchor_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "codec/base/file_io.h"
#include "codec/delta_manifest.h"
#include "codec/dtype.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

Result<AnchorPlan> plan_anchor(const std::string& dir, std::span<const SafetensorsTensorSpec> specs,
                               const AnchorWriteOptions& options, const std::string& context) {
  // What plan_safetensors rejects, over the whole model so duplicates across shards are caught.
  RETURN_IF_ERROR(
      plan_safetensors({specs.begin(), specs.end()}, {}).status().with_context(context));
  const uint64_t slice_bytes = std::max<uint64_t>(8, options.slice_bytes / 8 * 8);
  AnchorPlan plan;
  plan.tensors.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSIGN_OR_RETURN(const uint64_t numel,
                     shape_numel(specs[i].shape, "tensor '" + specs[i].name + "'"));
    plan.tensors[i].bytes = numel * dtype_size(specs[i].dtype);
  }

  // Greedy packing in input order.
  plan.shards.resize(1);
  uint64_t filled = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t size = plan.tensors[i].bytes;
    if (!plan.shards.back().inputs.empty() && filled + size > options.shard_bytes) {
      plan.shards.emplace_back();
      filled = 0;
    }
    plan.shards.back().inputs.push_back(i);
    filled += size;
  }

  // Headers, offsets and extents, shard by shard in data order.
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    AnchorShardPlan& shard = plan.shards[s];
    shard.file = anchor_shard_name(s, plan.shards.size());
    shard.path = (std::filesystem::path(dir) / shard.file).string();
    std::vector<SafetensorsTensorSpec> shard_specs;
    std::unordered_map<std::string_view, size_t> input_by_name;
    for (const size_t i : shard.inputs) {
      shard_specs.push_back(specs[i]);
      input_by_name.emplace(specs[i].name, i);
    }
    ASSIGN_OR_RETURN(shard.layout, plan_safetensors(std::move(shard_specs), metadata));
    plan.extents.push_back({s, 0, shard.layout.header.size(), -1, 0, 0});
    for (const auto& info : shard.layout.tensors) {
      const size_t input = input_by_name.at(info.name);
      AnchorTensorPlan& t = plan.tensors[input];
      t.shard = static_cast<uint32_t>(s);
      t.offset = shard.layout.data_offset + info.data_begin;
      const uint64_t elem = dtype_size(specs[input].dtype);
      for (uint64_t at = 0; at < t.bytes; at += slice_bytes) {
        const uint64_t n = std::min<uint64_t>(slice_bytes, t.bytes - at);
        plan.extents.push_back({s, t.offset + at, n, static_cast<int64_t>(input), at, at / elem});
      }
    }
    plan.file_bytes += shard.layout.file_size;
  }
  return plan;
}

std::vector<size_t> anchor_round_robin_order(const AnchorPlan& plan) {
  std::vector<std::vector<size_t>> per_shard(plan.shards.size());
  for (size_t e = 0; e < plan.extents.size(); ++e) per_shard[plan.extents[e].shard].push_back(e);
  std::vector<size_t> order;
  order.reserve(plan.extents.size());
  for (size_t k = 0; order.size() < plan.extents.size(); ++k) {
    for (const auto& list : per_shard) {
      if (k < list.size()) order.push_back(list[k]);
    }
  }
  return order;
}

void fill_anchor_manifest(const AnchorPlan& plan, std::span<const SafetensorsTensorSpec> specs,
                          std::span<const uint64_t> extent_xxh3,
                          std::span<const uint64_t> checksums, proto::StepManifest* manifest) {
  manifest->set_kind(proto::STEP_ANCHOR);
  manifest->set_index_file(kAnchorIndexFile);
  manifest->clear_parts();
  manifest->clear_extents();
  manifest->clear_tensors();
  for (const auto& shard : plan.shards) {
    proto::PartInfo* part = manifest->add_parts();
    part->set_file(shard.file);
    part->set_bytes(shard.layout.file_size);
    part->set_raw_bytes(shard.layout.file_size);
  }
  for (size_t e = 0; e < plan.extents.size(); ++e) {
    proto::Extent* extent = manifest->add_extents();
    extent->set_shard(static_cast<uint32_t>(plan.extents[e].shard));
    extent->set_offset(plan.extents[e].offset);
    extent->set_bytes(plan.extents[e].bytes);
    extent->set_xxh3(extent_xxh3[e]);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    proto::TensorState* state = manifest->add_tensors();
    state->set_name(specs[i].name);
    state->set_dtype(dtype_to_proto(specs[i].dtype));
    for (const int64_t d : specs[i].shape) state->add_shape(d);
    state->set_bytes(plan.tensors[i].bytes);
    state->set_part(plan.tensors[i].shard);
    state->set_offset(plan.tensors[i].offset);
    state->set_checksum(checksums[i]);
  }
}

Status anchor_errno_error(const std::string& what, const std::string& path, uint64_t offset) {
  return io_error(what + " '" + path + "' at offset " + std::to_string(offset) + ": " +
                  std::strerror(errno));
}

namespace {

// `text` as the synced file `dir`/`name`.
Status write_anchor_text(const std::string& dir, const char* name, const std::string& text) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  return write_and_sync_file(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                             {});
}

}  // namespace

Status write_anchor_index_json(const std::string& dir, std::span<const SafetensorsTensorSpec> specs,
                               const AnchorPlan& plan) {
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  for (const auto& shard : plan.shards) {
    for (const size_t i : shard.inputs) {
      weight_map[specs[i].name] = shard.file;
      total_size += plan.tensors[i].bytes;
    }
  }
  const nlohmann::json index{{"metadata", {{"total_size", total_size}}},
                             {"weight_map", weight_map}};
  return write_anchor_text(dir, kAnchorIndexFile, index.dump(2) + "\n");
}

Status write_anchor_config_json(const std::string& dir, const AnchorWriteOptions& options) {
  if (options.config_json.empty()) return ok_status();
  return write_anchor_text(dir, kAnchorConfigFile, options.config_json);
}

}  // namespace weightcast
