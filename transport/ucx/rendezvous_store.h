// Where a UCX publisher leaves its version blobs (ucx_version_blob.h) for subscribers to
// find, in the manner of gloo's rendezvous stores. Keys are short paths such as
// "v/00000000000000000007" and "latest"; values are opaque bytes.
//
// Contracts: put replaces a key's value atomically (a get sees the old value or the new one,
// never a mix); get of an absent key is an empty optional, not an error; erase of an absent
// key succeeds. Errors are kIoError naming the key. Both stores are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  [[nodiscard]] virtual Status put(const std::string& key, std::vector<uint8_t> value) = 0;
  [[nodiscard]] virtual Result<std::optional<std::vector<uint8_t>>> get(const std::string& key) = 0;
  [[nodiscard]] virtual Status erase(const std::string& key) = 0;
};

// Peers that are threads of one process.
class InMemoryStore final : public RendezvousStore {
 public:
  Status put(const std::string& key, std::vector<uint8_t> value) override;
  Result<std::optional<std::vector<uint8_t>>> get(const std::string& key) override;
  Status erase(const std::string& key) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

// Peers that are processes sharing a directory (which must exist): one file per key,
// written to a temporary name and renamed into place. Not durable across a host crash (no
// fsync): a rendezvous only lives as long as its publisher.
class FileStore final : public RendezvousStore {
 public:
  explicit FileStore(std::string dir);

  Status put(const std::string& key, std::vector<uint8_t> value) override;
  Result<std::optional<std::vector<uint8_t>>> get(const std::string& key) override;
  Status erase(const std::string& key) override;

 private:
  // The key's file; every byte other than [A-Za-z0-9.-] is escaped as _XX so that distinct
  // keys never share a file and no key escapes the directory.
  std::string path_of(const std::string& key) const;

  std::string dir_;
};

}  // namespace weightcast
