#include "transport/fs/anchor_slices.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "codec/base/allocation.h"
#include "codec/base/hex.h"
#include "codec/checksum.h"
#include "transport/tensor_staging.h"

namespace weightcast {

Status read_anchor_slice(const std::string& dir, const proto::StepManifest& m, size_t index,
                         const SliceDestination& where, const TensorRef& view, uint64_t expected,
                         uint64_t* bytes_written) {
  const auto& t = m.tensors(static_cast<int>(index));
  const std::string who =
      "anchor '" + dir + "': tensor '" + t.name() + "' slice " + describe_slice(where.slice);
  if (t.part() >= static_cast<uint32_t>(m.parts_size())) {
    return data_loss(who + " lies in part " + std::to_string(t.part()) + ", which is not listed");
  }
  const size_t es = view.element_size();
  const uint64_t held = slice_elements(where.shape, where.slice);
  if (view.numel() != held) {
    return invalid_argument(who + ": the destination has " + std::to_string(view.numel()) +
                            " elements, the slice " + std::to_string(held));
  }
  // A contiguous host view is read into in place, as whole tensors are (anchor_in_place.h):
  // on an error it then holds unspecified bytes, and the reader holds no version. Any other
  // view goes through a host buffer of the slice's size.
  const bool direct = view.memory != MemoryKind::kCuda && view.is_contiguous();
  std::vector<uint8_t> buffer;
  if (!direct) {
    ASSIGN_OR_RETURN(buffer,
                     allocate_bytes(held * es, "the slice of anchor tensor '" + t.name() + "'"));
  }
  uint8_t* const into = direct ? view.first_byte() : buffer.data();
  const std::string path = dir + "/" + m.parts(static_cast<int>(t.part())).file();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open anchor shard '" + path + "': " + std::strerror(errno));
  Status read = ok_status();
  uint64_t checksum = 0;
  for_each_slice_run(where.shape, where.slice, [&](const SliceRun& r) {
    uint8_t* to = into + r.local * es;
    const uint64_t n = r.count * es;
    if (r.global * es + n > t.bytes()) {
      read = data_loss(who + " reaches past the tensor's " + std::to_string(t.bytes()) + " bytes");
      return false;
    }
    for (uint64_t got = 0; got < n;) {
      const ssize_t k =
          ::pread(fd, to + got, n - got, static_cast<off_t>(t.offset() + r.global * es + got));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        read = data_loss("cannot read anchor shard '" + path + "' at offset " +
                         std::to_string(t.offset() + r.global * es + got) + ": " +
                         (k == 0 ? "file ends early" : std::strerror(errno)));
        return false;
      }
      got += static_cast<uint64_t>(k);
    }
    checksum += checksum_range(to, es, r.count, r.global);
    return true;
  });
  ::close(fd);
  RETURN_IF_ERROR(read);
  if (checksum != expected) {
    return data_loss(who + ": checksum " + hex16(checksum) + " differs from the manifest's " +
                     hex16(expected));
  }
  if (!direct) RETURN_IF_ERROR(scatter_tensor(buffer, view));
  if (bytes_written != nullptr) *bytes_written += held * es;
  return ok_status();
}

}  // namespace weightcast
