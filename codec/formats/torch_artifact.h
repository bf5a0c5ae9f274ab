// The torch.save artifact (`torch.load(path, weights_only=True)` reads it, torch 1.13 and
// newer): a ZIP of stored entries inside one top-level folder <archive>/ holding
//
//   <archive>/data.pkl     protocol-2 pickle of {name: tensor} (codec/formats/torch_pickle.h)
//   <archive>/byteorder    "little" (torch >= 2.0 writes it; older torch ignores it)
//   <archive>/data/<key>   the raw little-endian bytes of one storage, 64-byte aligned
//   <archive>/version      "3\n"; PyTorchStreamReader refuses an archive without it
//
// in that order, as torch.save does. Several tensors may view one storage (aliases) with
// their own offset, shape and stride; torch.load gives them one shared storage.
//
// Reading accepts this layout as written by us and by Python's torch.save (1.13: no
// byteorder, data descriptors; 2.x: extra records such as .data/serialization_id, which are
// ignored). Storage bytes are returned as views into the file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "codec/formats/torch_pickle.h"
#include "codec/formats/zip_archive.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

struct TorchStorage {
  std::string key;  // record name under data/: [A-Za-z0-9_.-], not "." or ".."
  DType dtype = DType::kF32;
  std::span<const uint8_t> bytes;  // a whole number of elements
};

struct TorchTensorRef {
  std::string name;            // key of the pickled dict
  size_t storage = 0;          // index into the storages
  int64_t storage_offset = 0;  // in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  // in elements, non-negative
};

struct TorchArtifact {
  std::string archive_name;
  uint64_t version = 0;                 // the archive's version record
  std::vector<TorchStorage> storages;   // order of first use by a tensor
  std::vector<TorchTensorRef> tensors;  // dict order
};

struct TorchWriteOptions {
  bool force_zip64 = false;  // for tests: ZIP64 records without 4 GiB of data
};

struct TorchReadOptions {
  ZipLimits zip;  // verify_crc = false defers CRC checks to the caller (verify_zip_entry_crc)
  TorchPickleLimits pickle;
};

// Checks that a view lies inside a storage of `storage_numel` elements: ranks agree, sizes and
// strides are non-negative, and offset + sum((size - 1) * stride) < numel (an empty view only
// needs offset <= numel). `what` names the tensor in the error (data_loss).
Status check_view_in_storage(const TorchTensorRef& view, uint64_t storage_numel,
                             const std::string& what);

// Writes the artifact to `sink`. Validates first (invalid_argument, before any byte is
// emitted): archive name a single safe path component, storage keys unique and safe, byte
// counts whole elements, tensor names unique UTF-8, storage indices valid, every view inside
// its storage, every storage used by some tensor.
Status write_torch_artifact(std::string_view archive_name, std::span<const TorchStorage> storages,
                            std::span<const TorchTensorRef> tensors, const ByteSink& sink,
                            const TorchWriteOptions& options = {});

// Parses and validates a whole artifact: the ZIP (codec/formats/zip_archive.h, CRCs verified unless
// options.zip says otherwise), one top-level folder, a version record, byteorder "little" if
// present, the pickle (restricted reader), one data/<key> record per storage with exactly
// numel * dtype size bytes, and every view inside its storage. Errors are data_loss (limits:
// out_of_range) and name the record or tensor.
Result<TorchArtifact> parse_torch_artifact(std::span<const uint8_t> file,
                                           const TorchReadOptions& options = {});

}  // namespace weightcast
