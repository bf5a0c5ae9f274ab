#include "transport/ucx/ucx_version_blob.h"

#include <cstring>
#include <set>

namespace weightcast {
namespace {

// "WCUX" then a format number: a blob of another backend or format is refused by name.
constexpr uint32_t kMagic = 0x58554357;
constexpr uint32_t kFormat = 2;  // 2: the shared segment and the parts' offsets in it

class Writer {
 public:
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void bytes(std::span<const uint8_t> b) {
    u32(static_cast<uint32_t>(b.size()));
    raw(b.data(), b.size());
  }
  std::vector<uint8_t> take() { return std::move(out_); }
  // Little-endian hosts only (x86-64, aarch64), like the rest of the wire formats.
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}

  Status u32(uint32_t& v, const std::string& field) { return raw(&v, sizeof v, field); }
  Status u64(uint64_t& v, const std::string& field) { return raw(&v, sizeof v, field); }
  // A length-prefixed byte string of at most `limit` bytes.
  Status bytes(std::vector<uint8_t>& v, uint32_t limit, const std::string& field) {
    uint32_t n = 0;
    RETURN_IF_ERROR(u32(n, field + " length"));
    if (n > limit) {
      return data_loss("ucx version blob: " + field + " length " + std::to_string(n) + " exceeds " +
                       std::to_string(limit));
    }
    if (n > in_.size() - pos_) return truncated(field);
    v.assign(in_.begin() + pos_, in_.begin() + pos_ + n);
    pos_ += n;
    return ok_status();
  }
  size_t remaining() const { return in_.size() - pos_; }
  Status raw(void* p, size_t n, const std::string& field) {
    if (n > in_.size() - pos_) return truncated(field);
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return ok_status();
  }

 private:
  Status truncated(const std::string& field) const {
    return data_loss("ucx version blob: truncated at " + field + " (offset " +
                     std::to_string(pos_) + " of " + std::to_string(in_.size()) + ")");
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

Status decode_segment(Reader& r, UcxVersionBlob& blob) {
  uint32_t has = 0;
  RETURN_IF_ERROR(r.u32(has, "segment flag"));
  if (has > 1)
    return data_loss("ucx version blob: segment flag " + std::to_string(has) + " is not 0 or 1");
  blob.has_segment = has == 1;
  if (!blob.has_segment) return ok_status();
  std::vector<uint8_t> host;
  RETURN_IF_ERROR(r.bytes(host, kSharedSegmentMaxHostBytes, "segment host"));
  if (host.empty()) return data_loss("ucx version blob: the segment's host id is empty");
  blob.segment.host.assign(host.begin(), host.end());
  RETURN_IF_ERROR(r.u64(blob.segment.pid_namespace, "segment pid namespace"));
  RETURN_IF_ERROR(r.u32(blob.segment.pid, "segment pid"));
  RETURN_IF_ERROR(r.u32(blob.segment.fd, "segment fd"));
  RETURN_IF_ERROR(r.raw(blob.segment.nonce.data(), blob.segment.nonce.size(), "segment nonce"));
  RETURN_IF_ERROR(r.u64(blob.segment.bytes, "segment bytes"));
  return ok_status();
}

}  // namespace

Result<std::vector<uint8_t>> encode_ucx_version_blob(const UcxVersionBlob& blob) {
  if (blob.parts.size() > kUcxBlobMaxParts) {
    return invalid_argument("ucx version blob: " + std::to_string(blob.parts.size()) +
                            " parts exceed " + std::to_string(kUcxBlobMaxParts));
  }
  if (blob.worker_address.size() > kUcxBlobMaxKeyBytes) {
    return invalid_argument("ucx version blob: worker address of " +
                            std::to_string(blob.worker_address.size()) + " bytes is too long");
  }
  Writer w;
  w.u32(kMagic);
  w.u32(kFormat);
  w.u64(blob.version);
  w.bytes(blob.worker_address);
  w.u32(blob.has_segment ? 1 : 0);
  if (blob.has_segment) {
    if (blob.segment.host.empty() || blob.segment.host.size() > kSharedSegmentMaxHostBytes) {
      return invalid_argument("ucx version blob: the segment's host id is empty or too long");
    }
    w.bytes({reinterpret_cast<const uint8_t*>(blob.segment.host.data()), blob.segment.host.size()});
    w.u64(blob.segment.pid_namespace);
    w.u32(blob.segment.pid);
    w.u32(blob.segment.fd);
    w.raw(blob.segment.nonce.data(), blob.segment.nonce.size());
    w.u64(blob.segment.bytes);
  }
  w.u32(static_cast<uint32_t>(blob.parts.size()));
  for (const auto& p : blob.parts) {
    if (p.name.empty() || p.name.size() > kUcxBlobMaxNameBytes ||
        p.rkey.size() > kUcxBlobMaxKeyBytes) {
      return invalid_argument("ucx version blob: part '" + p.name.substr(0, 64) +
                              "' has an empty or too long name or rkey");
    }
    w.bytes({reinterpret_cast<const uint8_t*>(p.name.data()), p.name.size()});
    w.u64(p.bytes);
    w.u64(p.xxh3);
    w.u64(p.remote_address);
    w.bytes(p.rkey);
    w.u64(p.segment_offset);
  }
  return w.take();
}

Result<UcxVersionBlob> decode_ucx_version_blob(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  uint32_t magic = 0, format = 0, count = 0;
  RETURN_IF_ERROR(r.u32(magic, "magic"));
  if (magic != kMagic) return data_loss("ucx version blob: bad magic (not a ucx version blob)");
  RETURN_IF_ERROR(r.u32(format, "format"));
  if (format != kFormat) {
    return data_loss("ucx version blob: unknown format " + std::to_string(format));
  }
  UcxVersionBlob blob;
  RETURN_IF_ERROR(r.u64(blob.version, "version"));
  RETURN_IF_ERROR(r.bytes(blob.worker_address, kUcxBlobMaxKeyBytes, "worker address"));
  if (blob.worker_address.empty()) return data_loss("ucx version blob: empty worker address");
  RETURN_IF_ERROR(decode_segment(r, blob));
  RETURN_IF_ERROR(r.u32(count, "part count"));
  if (count > kUcxBlobMaxParts) {
    return data_loss("ucx version blob: part count " + std::to_string(count) + " exceeds " +
                     std::to_string(kUcxBlobMaxParts));
  }
  // Each part takes at least 44 bytes: a count larger than the rest allows is a lie.
  if (count > r.remaining() / 44) {
    return data_loss("ucx version blob: part count " + std::to_string(count) +
                     " does not fit in the remaining " + std::to_string(r.remaining()) + " bytes");
  }
  std::set<std::string> names;
  blob.parts.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const std::string field = "part " + std::to_string(i);
    UcxPartBlob& p = blob.parts[i];
    std::vector<uint8_t> name;
    RETURN_IF_ERROR(r.bytes(name, kUcxBlobMaxNameBytes, field + " name"));
    p.name.assign(name.begin(), name.end());
    if (p.name.empty()) return data_loss("ucx version blob: " + field + " has an empty name");
    if (!names.insert(p.name).second) {
      return data_loss("ucx version blob: " + field + " repeats the name '" + p.name + "'");
    }
    RETURN_IF_ERROR(r.u64(p.bytes, field + " bytes"));
    RETURN_IF_ERROR(r.u64(p.xxh3, field + " xxh3"));
    RETURN_IF_ERROR(r.u64(p.remote_address, field + " remote address"));
    RETURN_IF_ERROR(r.bytes(p.rkey, kUcxBlobMaxKeyBytes, field + " rkey"));
    if (p.bytes > 0 && p.rkey.empty()) {
      return data_loss("ucx version blob: " + field + " ('" + p.name + "') has " +
                       std::to_string(p.bytes) + " bytes but no rkey");
    }
    RETURN_IF_ERROR(r.u64(p.segment_offset, field + " segment offset"));
    if (blob.has_segment && p.bytes > 0 &&
        (p.segment_offset > blob.segment.bytes ||
         p.bytes > blob.segment.bytes - p.segment_offset)) {
      return data_loss("ucx version blob: " + field + " ('" + p.name + "') at offset " +
                       std::to_string(p.segment_offset) + " with " + std::to_string(p.bytes) +
                       " bytes lies outside its " + std::to_string(blob.segment.bytes) +
                       "-byte segment");
    }
  }
  if (r.remaining() != 0) {
    return data_loss("ucx version blob: " + std::to_string(r.remaining()) +
                     " trailing bytes after the last part");
  }
  return blob;
}

}  // namespace weightcast
