#include "bench/drivers/group_codec_reference.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>

#include "codec/base/allocation.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/delta_format.h"
#include "src/daemon/synthetic_model.h"

namespace weightcast {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::span<const uint8_t> bytes_of(const TensorRef& t) {
  return {static_cast<const uint8_t*>(t.data), t.numel() * t.element_size()};
}

// A copy of every tensor's bytes, allocated as a Status on failure.
Result<std::vector<std::vector<uint8_t>>> copy_tensors(const std::vector<TensorRef>& refs,
                                                       const std::string& what) {
  std::vector<std::vector<uint8_t>> out;
  out.reserve(refs.size());
  for (const auto& t : refs) {
    const auto src = bytes_of(t);
    ASSIGN_OR_RETURN(auto copy, allocate_bytes(src.size(), what + " of tensor '" + t.name + "'"));
    std::memcpy(copy.data(), src.data(), src.size());
    out.push_back(std::move(copy));
  }
  return out;
}

void copy_into(const std::vector<TensorRef>& refs, std::vector<std::vector<uint8_t>>& dst) {
  for (size_t i = 0; i < refs.size(); ++i) {
    const auto src = bytes_of(refs[i]);
    std::memcpy(dst[i].data(), src.data(), src.size());
  }
}

}  // namespace

Result<CodecReference> measure_codec_reference(const CodecReferenceConfig& c) {
  if (c.parameters == 0) return invalid_argument("codec reference: parameters must be > 0");
  for (uint64_t v : c.delta_versions) {
    if (v == 0 || v > c.last_version) {
      return invalid_argument("codec reference: delta version " + std::to_string(v) +
                              " is outside 1.." + std::to_string(c.last_version));
    }
  }
  ThreadPool pool(c.threads);
  ASSIGN_OR_RETURN(std::unique_ptr<SyntheticModel> model,
                   SyntheticModel::create(c.parameters, c.density, c.seed, &pool));
  const std::vector<TensorRef> refs = model->tensor_refs();
  ASSIGN_OR_RETURN(auto previous, copy_tensors(refs, "the codec reference's previous copy"));
  ASSIGN_OR_RETURN(auto engine, copy_tensors(refs, "the codec reference's engine copy"));
  std::vector<uint64_t> checksums(refs.size());
  const auto recompute_checksums = [&] {
    for (size_t i = 0; i < refs.size(); ++i) {
      checksums[i] = checksum_range(previous[i].data(), 2, refs[i].numel(), 0, &pool);
    }
  };
  recompute_checksums();

  CodecReference out;
  out.parameters = model->parameters();
  out.tensors = refs.size();
  out.threads = pool.size();
  for (uint64_t v = 1; v <= c.last_version; ++v) {
    model->fast_forward(v);
    if (!c.delta_versions.count(v)) {  // an anchor: the engine loads it whole, untimed here
      copy_into(refs, previous);
      copy_into(refs, engine);
      recompute_checksums();
      continue;
    }
    CodecVersionFigures f;
    f.version = v;
    const std::string what = "codec reference, version " + std::to_string(v);
    for (size_t i = 0; i < refs.size(); ++i) {
      const TensorRef& t = refs[i];
      EncodeOptions eo;
      eo.name = t.name;
      eo.dtype = t.dtype;
      eo.base_version = v - 1;
      eo.target_version = v;
      eo.base_checksum = checksums[i];
      eo.pool = &pool;
      auto t0 = std::chrono::steady_clock::now();
      auto encoded = encode_delta(previous[i], bytes_of(t), eo);
      f.encode_s += seconds_since(t0);
      if (!encoded.ok()) return encoded.status().with_context(what);
      if (encoded->header.changed == 0) continue;
      f.changed_elements += encoded->header.changed;
      f.record_bytes += encoded->record.size();
      ++f.changed_tensors;
      ApplyOptions ao;
      ao.current_checksum = checksums[i];
      ao.pool = &pool;
      t0 = std::chrono::steady_clock::now();
      auto record = parse_delta_record(encoded->record);
      if (!record.ok()) return record.status().with_context(what);
      auto applied = apply_delta(
          *record,
          TensorRef::contiguous(t.name, t.dtype, engine[i].data(), static_cast<int64_t>(t.numel())),
          ao);
      f.apply_s += seconds_since(t0);
      if (!applied.ok()) return applied.status().with_context(what);
      checksums[i] = encoded->header.target_checksum;
      std::memcpy(previous[i].data(), t.data, previous[i].size());
    }
    for (size_t i = 0; i < refs.size(); ++i) {
      if (std::memcmp(engine[i].data(), refs[i].data, engine[i].size()) != 0) {
        return internal_error(what + ": the applied engine copy of tensor '" + refs[i].name +
                              "' differs from the version");
      }
    }
    if (c.log) {
      char line[200];
      std::snprintf(line, sizeof line,
                    "codec reference: v%llu, %llu changed elements, encode %.3f s, apply %.3f s",
                    static_cast<unsigned long long>(v),
                    static_cast<unsigned long long>(f.changed_elements), f.encode_s, f.apply_s);
      c.log(line);
    }
    out.versions.push_back(f);
  }
  return out;
}

}  // namespace weightcast
