// Valid journal files of every kind for the journal_files tests, built by hand so each
// malformed case is one edit away from a file the parsers accept, plus the assertion that a
// refusal is kDataLoss naming the file and the problem.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "transport/fs/journal_files.h"

namespace weightcast::testing {

inline constexpr const char* kManifestWhat = "journal/step-00000007/MANIFEST";

// An anchor at version 5: one shard of a 128-byte safetensors header and three tensors (a
// 4x8 bf16, a 3-element f32 and an empty i64), one extent each after the header's.
inline proto::StepManifest valid_anchor() {
  proto::StepManifest m;
  m.set_format_version(1);
  m.set_version(5);
  m.set_kind(proto::STEP_ANCHOR);
  m.set_anchor_version(5);
  m.set_index_file("model.safetensors.index.json");
  m.set_writer("host:42");
  auto* part = m.add_parts();
  part->set_file("model-00001-of-00001.safetensors");
  part->set_bytes(204);
  part->set_raw_bytes(204);
  struct Spec {
    const char* name;
    proto::DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
  };
  const Spec specs[] = {{"model.a.weight", proto::DTYPE_BF16, {4, 8}, 128, 64},
                        {"model.b.scale", proto::DTYPE_F32, {3}, 192, 12},
                        {"model.c.empty", proto::DTYPE_I64, {0}, 204, 0}};
  auto* header = m.add_extents();
  header->set_bytes(128);
  for (const auto& s : specs) {
    auto* t = m.add_tensors();
    t->set_name(s.name);
    t->set_dtype(s.dtype);
    for (const int64_t d : s.shape) t->add_shape(d);
    t->set_checksum(0x1234 + s.offset);
    t->set_offset(s.offset);
    t->set_bytes(s.bytes);
    if (s.bytes == 0) continue;
    auto* x = m.add_extents();
    x->set_offset(s.offset);
    x->set_bytes(s.bytes);
    x->set_xxh3(0xABCD + s.offset);
  }
  return m;
}

// A delta from 6 to 7 over anchor 5: an uncompressed and a compressed part, two changed
// tensors (one in each part) and an unchanged one.
inline proto::StepManifest valid_delta() {
  proto::StepManifest m;
  m.set_format_version(1);
  m.set_version(7);
  m.set_kind(proto::STEP_DELTA);
  m.set_base_version(6);
  m.set_anchor_version(5);
  m.set_created_unix_ms(1'700'000'000'000);
  auto* p0 = m.add_parts();
  p0->set_file("part-00000.wcd");
  p0->set_bytes(100);
  p0->set_raw_bytes(100);
  p0->set_xxh3(0x1111);
  auto* p1 = m.add_parts();
  p1->set_file("part-00001.wcd");
  p1->set_bytes(50);
  p1->set_raw_bytes(300);
  p1->set_xxh3(0x2222);
  p1->set_compression(proto::COMPRESSION_ZSTD_BYTE_PLANES);
  auto add = [&](const char* name, proto::DType dtype, int64_t n, bool changed, uint32_t part,
                 uint64_t offset, uint64_t bytes) {
    auto* t = m.add_tensors();
    t->set_name(name);
    t->set_dtype(dtype);
    t->add_shape(n);
    t->set_changed(changed);
    t->set_part(part);
    t->set_offset(offset);
    t->set_bytes(bytes);
    t->set_changed_elements(changed ? 3 : 0);
  };
  add("model.a.weight", proto::DTYPE_BF16, 32, true, 0, 0, 80);
  add("model.b.scale", proto::DTYPE_F32, 3, false, 0, 0, 0);
  add("model.c.weight", proto::DTYPE_F16, 500, true, 1, 100, 200);
  return m;
}

// Opaque parts published through the transport interface (a PartPublisher).
inline proto::StepManifest valid_parts() {
  proto::StepManifest m;
  m.set_format_version(1);
  m.set_version(3);
  m.set_kind(proto::STEP_PARTS);
  for (const char* name : {"blob-0.bin", "blob-1.bin"}) {
    auto* p = m.add_parts();
    p->set_file(name);
    p->set_bytes(4096);
    p->set_raw_bytes(4096);
    p->set_xxh3(0x3333);
  }
  return m;
}

inline std::vector<uint8_t> framed(const proto::StepManifest& m) {
  return frame_journal_message(JournalFileKind::kManifest, m);
}

// The status parse_manifest gives the framed `m`.
inline Status manifest_status(const proto::StepManifest& m, const JournalFileLimits& limits = {}) {
  return parse_manifest(framed(m), kManifestWhat, limits).status();
}

// `s` is kDataLoss and its message names `what` and every one of `needles`.
inline void expect_data_loss(const Status& s, const std::string& what,
                             const std::vector<std::string>& needles) {
  ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << "\nlacks: " << what;
  for (const auto& n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message() << "\nlacks: " << n;
  }
}

}  // namespace weightcast::testing
