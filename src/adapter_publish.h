// Publishing a LoRA adapter the way engines load it (PEFT layout), compactly when its keys
// repeat storages (the "compact duplicate LoRA adapter tensors" seed).
//
// Representation rule: when the unique bytes are less than half the logical bytes, the
// adapter is written as `adapter_model.bin`, a torch.save zip in which every alias points at
// one shared storage; otherwise as `adapter_model.safetensors`. Either way every public key
// and every exact value (signed zeros, NaN payloads) is preserved.
//
// Crash safety: the config and the model file each appear by temp file + fsync + rename; then
// the marker `.weightcast_adapter` (which names the model file) is replaced the same way;
// only then is the stale file of the other format removed. A reader that finds both formats
// believes the marker, so a publication killed at any instant leaves the old adapter or the
// new one, never a mix. That atomic replace is this format's contract, so the files go through
// UserFileWriter's kAtomicReplace (transport/user_file_writer.h): a symlinked file is replaced
// at its resolved target (the link stays), an existing file's mode (and owner, as root) is
// kept, and a FIFO, read-only file, journal directory or input in the way is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/dedup.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

class ThreadPool;

inline constexpr const char kAdapterBinFile[] = "adapter_model.bin";
inline constexpr const char kAdapterSafetensorsFile[] = "adapter_model.safetensors";
inline constexpr const char kAdapterConfigFile[] = "adapter_config.json";
inline constexpr const char kAdapterMarkerFile[] = ".weightcast_adapter";

enum class AdapterFormat { kTorchCompact, kSafetensors };
const char* adapter_format_name(AdapterFormat format);  // "torch-compact" | "safetensors"
const char* adapter_file_name(AdapterFormat format);

// The rule above, as a function of the dedup statistics.
AdapterFormat choose_adapter_format(const DedupStats& stats);

struct AdapterPublication {
  AdapterFormat format = AdapterFormat::kSafetensors;
  std::string model_path;
  DedupStats stats;
  uint64_t file_bytes = 0;
  double dedup_s = 0;
  double write_s = 0;
};

// Publishes into `dir` (created if missing). `tensors` are contiguous host views with unique
// names, at least one; `adapter_config_json` is written as adapter_config.json verbatim.
// Errors name the file or tensor at fault; on error the directory still holds the previous
// adapter (and is not created when the input is refused).
// `force` overrides the representation rule (benchmarks compare both formats). `inputs` are
// the files the tensors and config were read from: none of the files written may be one.
Result<AdapterPublication> publish_adapter(const std::string& dir,
                                           std::span<const TensorBytesView> tensors,
                                           std::string_view adapter_config_json,
                                           ThreadPool* pool = nullptr,
                                           std::optional<AdapterFormat> force = std::nullopt,
                                           const std::vector<std::string>& inputs = {});

// A plain safetensors file written atomically (no dedup): what publication does for
// non-duplicated adapters, and the benchmarks' reference.
Status write_safetensors_file(const std::string& path, std::span<const TensorBytesView> tensors,
                              const std::vector<std::string>& inputs = {});

}  // namespace weightcast
