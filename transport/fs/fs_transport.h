// The filesystem backend of the transport interface (transport.h): each version is a step
// directory of a journal root holding one file per part, committed by the journal's
// publication protocol (step_commit.h), so a reader sees a version whole or not at all and a
// crashed publisher leaves nothing torn. A root holds either these parts steps or the
// journal's anchor/delta steps (journal_writer.h), not both.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "transport/fs/step_commit.h"
#include "transport/transport.h"

namespace weightcast {

struct FsTransportOptions {
  std::string root;
  // Tests: called before every part file is written (injected ENOSPC / I/O failures); the
  // publisher's only.
  std::function<Status(const std::string& file, uint64_t bytes)> before_write;
};

// The publishing half: one per journal root (it takes the root's writer lock at its first
// publish). create() refuses a root that exists and is not a directory.
class FsPartPublisher final : public PartPublisher {
 public:
  static Result<std::unique_ptr<FsPartPublisher>> create(FsTransportOptions options);

  TransportInfo info() const override;
  Status publish(uint64_t version, std::span<const PartPayload> parts, Deadline deadline) override;

 private:
  explicit FsPartPublisher(FsTransportOptions options);
  Status publish_unchecked(uint64_t version, std::span<const PartPayload> parts, Deadline deadline);

  FsTransportOptions options_;
  JournalLayout layout_;
  std::optional<JournalLock> lock_;  // taken by the first publish: one publisher per root
  StickyError sticky_;
};

// The reading half: any number per root, beside its publisher or in other processes.
class FsPartReader final : public PartReader {
 public:
  static Result<std::unique_ptr<FsPartReader>> create(FsTransportOptions options);

  TransportInfo info() const override;
  Result<VersionDescriptor> latest(Deadline deadline) override;
  Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) override;
  Status fetch(uint64_t version, const PartDescriptor& part, std::span<uint8_t> dest,
               Deadline deadline) override;

 private:
  explicit FsPartReader(FsTransportOptions options);

  FsTransportOptions options_;
  JournalLayout layout_;
  StickyError sticky_;
};

}  // namespace weightcast
