// Seed inputs for the journal files fuzz target: files as the journal writes them.
#include "tests/fuzz/journal_files_fuzz_seeds.h"

#include <stdlib.h>
#include <xxhash.h>

#include <filesystem>
#include <string>

#include "codec/base/byte_io.h"
#include "transport/fs/anchor_writer.h"

namespace weightcast::fuzzing {
namespace {

// The manifest write_anchor gives a small model: 16 KiB of tensors of mixed dtypes over
// 4 KiB shards in 1 KiB slices, so there are several shards, each with several extents.
proto::StepManifest written_anchor() {
  proto::StepManifest m;
  std::string dir = (std::filesystem::temp_directory_path() / "wc-journal-seeds.XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) return m;
  struct Spec {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const std::vector<Spec> specs = {{"model.embed_tokens.weight", DType::kBF16, {64, 40}},
                                   {"model.layers.0.norm.weight", DType::kF32, {301}},
                                   {"model.layers.0.q.weight", DType::kF8E4M3FN, {33, 17}},
                                   {"model.position_ids", DType::kI64, {16}},
                                   {"model.scale", DType::kF64, {}},
                                   {"model.empty", DType::kF16, {0, 7}},
                                   {"lm_head.weight", DType::kBF16, {40, 64}}};
  std::vector<std::vector<uint8_t>> data;
  std::vector<AnchorTensor> tensors;
  for (const auto& s : specs) {
    uint64_t n = dtype_size(s.dtype);
    for (const int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    data.emplace_back(n);
    for (size_t i = 0; i < n; ++i) data.back()[i] = static_cast<uint8_t>(i * 131 + data.size());
    tensors.push_back({s.name, s.dtype, s.shape, {}});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = data[i];
  AnchorWriteOptions options;
  options.shard_bytes = 4096;
  options.slice_bytes = 1024;
  options.threads = 1;
  if (!write_anchor(dir + "/step", tensors, options, &m).ok()) m.Clear();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  m.set_format_version(1);
  m.set_version(40);
  m.set_anchor_version(40);
  m.set_created_unix_ms(1'700'000'000'000);
  m.set_writer("trainer-0:4242");
  return m;
}

// An anchor of one shard with a 128-byte header, a bf16 and an f32 tensor and an empty one.
proto::StepManifest small_anchor() {
  proto::StepManifest m;
  m.set_format_version(1);
  m.set_version(5);
  m.set_kind(proto::STEP_ANCHOR);
  m.set_anchor_version(5);
  m.set_index_file("model.safetensors.index.json");
  auto* part = m.add_parts();
  part->set_file("model-00001-of-00001.safetensors");
  part->set_bytes(204);
  part->set_raw_bytes(204);
  m.add_extents()->set_bytes(128);
  const struct {
    const char* name;
    proto::DType dtype;
    int64_t n;
    uint64_t offset, bytes;
  } specs[] = {{"a", proto::DTYPE_BF16, 32, 128, 64},
               {"b", proto::DTYPE_F32, 3, 192, 12},
               {"c", proto::DTYPE_I64, 0, 204, 0}};
  for (const auto& s : specs) {
    auto* t = m.add_tensors();
    t->set_name(s.name);
    t->set_dtype(s.dtype);
    t->add_shape(s.n);
    t->set_offset(s.offset);
    t->set_bytes(s.bytes);
    t->set_checksum(0x9E3779B97F4A7C15ull ^ s.offset);
    if (s.bytes == 0) continue;
    auto* x = m.add_extents();
    x->set_offset(s.offset);
    x->set_bytes(s.bytes);
    x->set_xxh3(0xC2B2AE3D27D4EB4Full ^ s.offset);
  }
  return m;
}

// A delta from 40 to 41: an uncompressed and a byte-plane compressed part, changed tensors in
// both and unchanged ones.
proto::StepManifest delta() {
  proto::StepManifest m;
  m.set_format_version(1);
  m.set_version(41);
  m.set_kind(proto::STEP_DELTA);
  m.set_base_version(40);
  m.set_anchor_version(40);
  m.set_created_unix_ms(1'700'000'001'000);
  m.set_writer("trainer-0:4242");
  auto* p0 = m.add_parts();
  p0->set_file("part-00000.wcd");
  p0->set_bytes(900);
  p0->set_raw_bytes(900);
  p0->set_xxh3(0x0123456789ABCDEFull);
  auto* p1 = m.add_parts();
  p1->set_file("part-00001.wcd");
  p1->set_bytes(333);
  p1->set_raw_bytes(1500);
  p1->set_xxh3(0xFEDCBA9876543210ull);
  p1->set_compression(proto::COMPRESSION_ZSTD_BYTE_PLANES);
  const struct {
    const char* name;
    proto::DType dtype;
    int64_t rows, cols;
    bool changed;
    uint32_t part;
    uint64_t offset, bytes;
  } specs[] = {{"model.embed_tokens.weight", proto::DTYPE_BF16, 64, 40, true, 0, 0, 600},
               {"model.layers.0.norm.weight", proto::DTYPE_F32, 1, 301, false, 0, 0, 0},
               {"model.layers.0.q.weight", proto::DTYPE_F8_E4M3FN, 33, 17, true, 0, 600, 300},
               {"model.position_ids", proto::DTYPE_I64, 1, 16, false, 0, 0, 0},
               {"lm_head.weight", proto::DTYPE_BF16, 40, 64, true, 1, 0, 1500}};
  for (const auto& s : specs) {
    auto* t = m.add_tensors();
    t->set_name(s.name);
    t->set_dtype(s.dtype);
    t->add_shape(s.rows);
    t->add_shape(s.cols);
    t->set_checksum(0x5555 + s.offset);
    t->set_changed(s.changed);
    t->set_part(s.part);
    t->set_offset(s.offset);
    t->set_bytes(s.bytes);
    t->set_changed_elements(s.changed ? 17 : 0);
  }
  return m;
}

proto::StepManifest parts() {
  proto::StepManifest m;
  m.set_format_version(1);
  m.set_version(3);
  m.set_kind(proto::STEP_PARTS);
  m.set_writer("publisher:7");
  for (const char* name : {"shard-0.bin", "shard-1.bin", "meta.json"}) {
    auto* p = m.add_parts();
    p->set_file(name);
    p->set_bytes(4096);
    p->set_raw_bytes(4096);
    p->set_xxh3(XXH3_64bits(name, 4));
  }
  return m;
}

void add_both_forms(JournalFileKind kind, const google::protobuf::MessageLite& message,
                    std::vector<std::vector<uint8_t>>* seeds) {
  const uint8_t selector = static_cast<uint8_t>(kind == JournalFileKind::kHead       ? 0
                                                : kind == JournalFileKind::kManifest ? 1
                                                : kind == JournalFileKind::kLease    ? 2
                                                                                     : 3);
  std::vector<uint8_t> file{selector};
  const std::vector<uint8_t> framed = frame_journal_message(kind, message);
  file.insert(file.end(), framed.begin(), framed.end());
  seeds->push_back(std::move(file));
  std::vector<uint8_t> bare{static_cast<uint8_t>(selector + 4)};
  const std::string payload = message.SerializeAsString();
  bare.insert(bare.end(), payload.begin(), payload.end());
  seeds->push_back(std::move(bare));
}

}  // namespace

std::vector<uint8_t> frame_raw_journal_payload(JournalFileKind kind,
                                               std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(journal_file_magic(kind), journal_file_magic(kind) + 4);
  append_le<uint32_t>(&out, static_cast<uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  append_le<uint64_t>(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::vector<std::vector<uint8_t>> make_journal_files_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  proto::JournalHead head;
  head.set_version(41);
  head.set_anchor_version(40);
  head.set_committed_unix_ms(1'700'000'001'500);
  head.set_journal_id("0123456789abcdef0123456789abcdef");
  add_both_forms(JournalFileKind::kHead, head, &seeds);
  add_both_forms(JournalFileKind::kHead, proto::JournalHead(), &seeds);
  proto::JournalHead empty;  // a new journal's HEAD
  empty.set_empty(true);
  empty.set_journal_id("fedcba9876543210fedcba9876543210");
  add_both_forms(JournalFileKind::kHead, empty, &seeds);
  for (const auto& m : {written_anchor(), small_anchor(), delta(), parts()}) {
    add_both_forms(JournalFileKind::kManifest, m, &seeds);
  }
  // A delta with the slice checksums of engine layouts: a box and a flat range.
  proto::StepManifest sliced = delta();
  auto* box = sliced.add_slice_checksums();
  box->set_tensor("model.embed_tokens.weight");
  box->mutable_slice()->add_offsets(32);
  box->mutable_slice()->add_offsets(0);
  box->mutable_slice()->add_sizes(32);
  box->mutable_slice()->add_sizes(40);
  box->set_checksum(0x1234);
  auto* flat = sliced.add_slice_checksums();
  flat->set_tensor("lm_head.weight");
  flat->mutable_slice()->set_flat(true);
  flat->mutable_slice()->set_begin(100);
  flat->mutable_slice()->set_end(2000);
  flat->set_checksum(0x5678);
  add_both_forms(JournalFileKind::kManifest, sliced, &seeds);
  // A delta two publisher ranks wrote: the embedding (64 x 40) in three range records, the
  // middle one unchanged (docs/FORMATS.md "Range records").
  proto::StepManifest ranged = delta();
  proto::TensorState* t = ranged.mutable_tensors(0);
  const struct {
    uint32_t rank;
    uint64_t first, count, base, sum, changed, offset, bytes;
  } ranges[] = {{0, 0, 1000, 7, 11, 12, 0, 300},
                {0, 1000, 500, 5, 5, 0, 0, 0},
                {1, 1500, 1060, 9, 30, 20, 300, 300}};
  uint64_t sum = 0, changed = 0;
  for (const auto& r : ranges) {
    proto::RangeRecord* e = t->add_ranges();
    e->set_rank(r.rank);
    e->set_range_offset(r.first);
    e->set_range_elements(r.count);
    e->set_base_checksum(r.base);
    e->set_checksum(r.sum);
    e->set_changed(r.changed != 0);
    e->set_changed_elements(r.changed);
    e->set_offset(r.offset);
    e->set_bytes(r.bytes);
    sum += r.sum;
    changed += r.changed;
  }
  t->set_checksum(sum);
  t->set_changed_elements(changed);
  add_both_forms(JournalFileKind::kManifest, ranged, &seeds);
  // The same tensor from two tensor-parallel ranks: column blocks [0:64, 0:16] and
  // [0:64, 16:40] as boxes, named by their first element and volume.
  proto::StepManifest boxed = ranged;
  t = boxed.mutable_tensors(0);
  for (int k = 0; k < 2; ++k) {
    proto::RangeRecord* e = t->mutable_ranges(k);
    proto::TensorSliceSpec* box = e->mutable_box();
    for (const int64_t o : {int64_t{0}, int64_t{16} * k}) box->add_offsets(o);
    for (const int64_t z : {int64_t{64}, k == 0 ? int64_t{16} : int64_t{24}}) box->add_sizes(z);
    e->set_range_offset(16 * static_cast<uint64_t>(k));
    e->set_range_elements(k == 0 ? 1024 : 1536);
  }
  t->mutable_ranges()->RemoveLast();
  t->set_checksum(t->ranges(0).checksum() + t->ranges(1).checksum());
  t->set_changed_elements(t->ranges(0).changed_elements() + t->ranges(1).changed_elements());
  add_both_forms(JournalFileKind::kManifest, boxed, &seeds);
  // Rank 1's fragment of that version: its box only (its own ranges need not tile the tensor).
  proto::StepManifest fragment = boxed;
  t = fragment.mutable_tensors(0);
  t->mutable_ranges()->DeleteSubrange(0, 1);
  t->mutable_ranges(0)->set_rank(1);
  t->set_checksum(t->ranges(0).checksum());
  t->set_changed_elements(t->ranges(0).changed_elements());
  add_both_forms(JournalFileKind::kFragment, fragment, &seeds);
  // The same fragment as a rank serving its parts over ucx writes it.
  (*fragment.mutable_live_descriptors())["ucx"] = std::string("WCUB\x01\x00\x00\x00", 8);
  add_both_forms(JournalFileKind::kFragment, fragment, &seeds);
  proto::Lease lease;
  lease.set_holder("reader-7.node-3.12345");
  lease.set_version(40);
  lease.set_expires_unix_ms(1'700'000'060'000);
  add_both_forms(JournalFileKind::kLease, lease, &seeds);
  return seeds;
}

}  // namespace weightcast::fuzzing
