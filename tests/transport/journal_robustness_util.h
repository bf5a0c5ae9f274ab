// Helpers shared by the journal's robustness suites (crash, corruption, ENOSPC, retention):
// publishing a JournalTestModel version by version, checking what a reader holds against the
// model rebuilt at that version, and damaging files the way disks and people do.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tests/transport/journal_test_model.h"
#include "transport/fs/journal_writer.h"

namespace weightcast::testing {

// Small files everywhere so each step writes several parts or shards: a delta spreads over
// parts of `part_bytes`, an anchor over shards of 8 KiB written in 1 KiB slices.
inline JournalOptions robustness_options(const std::string& root, uint64_t anchor_every = 3,
                                         size_t keep_anchors = 10) {
  JournalOptions o;
  o.root = root;
  o.anchor_every = anchor_every;
  o.retention.keep_anchors = keep_anchors;
  o.delta.part_bytes = 256;
  o.anchor.shard_bytes = 8192;
  o.anchor.slice_bytes = 1024;
  o.anchor.threads = 2;
  return o;
}

// Publishes `version` from the model's current state (the writer's head, or nothing on an
// empty journal) and advances the model to it. The previous bytes are copied because publish
// reads them while the model already holds the new ones.
inline Result<PublishReport> publish_model_version(JournalWriter* writer, JournalTestModel* model,
                                                   uint64_t version, bool force_anchor = false) {
  std::vector<std::vector<uint8_t>> before;
  for (size_t i = 0; i < model->size(); ++i) before.push_back(model->bytes(i));
  std::vector<PublishTensor> previous = model->tensors();
  for (size_t i = 0; i < previous.size(); ++i) previous[i].bytes = before[i];
  model->advance_to(version);
  const std::vector<PublishTensor> current = model->tensors();
  return writer->publish(
      version, current,
      writer->head() ? std::span<const PublishTensor>(previous) : std::span<const PublishTensor>(),
      force_anchor);
}

// Publishes every version after the writer's head up to `last` (from 0 on an empty journal).
inline Status publish_model_through(JournalWriter* writer, JournalTestModel* model, uint64_t last) {
  for (uint64_t v = writer->head() ? writer->head()->version() + 1 : 0; v <= last; ++v) {
    auto report = publish_model_version(writer, model, v);
    if (!report.ok()) return report.status();
  }
  return ok_status();
}

// Empty when the reader holds nothing or holds exactly the model rebuilt at its held version
// (bytes and tracked checksums: invariant 1); otherwise what differs.
inline std::string held_mismatch(const CatchUpReader& reader,
                                 const std::vector<std::vector<uint8_t>>& storage, uint64_t seed) {
  if (!reader.held()) return {};
  JournalTestModel model(seed);
  model.advance_to(*reader.held());
  for (size_t i = 0; i < model.size(); ++i) {
    if (storage[i] != model.bytes(i) || reader.checksum(i) != model.checksum(i)) {
      return "tensor " + std::to_string(i) + " differs from version " +
             std::to_string(*reader.held());
    }
  }
  return {};
}

// Names of the entries of `dir` (none for a missing directory).
inline std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

// Copies the contents of directory `from` into the existing directory `to`.
inline bool copy_tree(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive, ec);
  return !ec;
}

inline bool flip_byte(const std::string& path, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  uint8_t b = 0;
  bool ok = ::pread(fd, &b, 1, static_cast<off_t>(offset)) == 1;
  b ^= 0x20;
  ok = ok && ::pwrite(fd, &b, 1, static_cast<off_t>(offset)) == 1;
  ::close(fd);
  return ok;
}

inline uint64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

inline bool truncate_to(const std::string& path, uint64_t size) {
  return ::truncate(path.c_str(), static_cast<off_t>(size)) == 0;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace weightcast::testing
