// The public ShardPublisher over src/endpoint/shard_publisher.h.
#include "weightcast/shard_publisher.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "src/api/conversions.h"
#include "src/endpoint/shard_publisher.h"

namespace weightcast::api {

namespace in = ::weightcast;

struct ShardPublisher::Impl {
  std::unique_ptr<in::ShardPublisher> publisher;
};

ShardPublisher::ShardPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardPublisher::~ShardPublisher() {
  stop();
}

Result<std::unique_ptr<ShardPublisher>> ShardPublisher::start(const std::string& config_path,
                                                              uint32_t rank,
                                                              std::vector<TensorSpec> model,
                                                              std::vector<ShardRange> ranges,
                                                              ShardPublisherOptions options) {
  auto config = load_config_for_role(config_path, rank, proto::ROLE_PUBLISHER);
  if (!config.ok()) return from_internal(config.status());
  std::vector<in::SafetensorsTensorSpec> specs;
  for (TensorSpec& t : model) {
    specs.push_back({std::move(t.name), static_cast<in::DType>(t.dtype), std::move(t.shape)});
  }
  std::unordered_map<std::string, in::DType> dtypes;
  for (const auto& t : specs) dtypes.emplace(t.name, t.dtype);
  std::vector<in::OwnedRange> owned;
  for (const ShardRange& r : ranges) {
    const std::string who =
        "rank " + std::to_string(rank) + ": the range of tensor '" + r.name + "' at " +
        (r.offsets.empty()
             ? "element " + std::to_string(r.first)
             : "offsets " + in::describe_slice(in::TensorSlice::box(r.offsets, r.data.shape)));
    bool contiguous = true;  // row-major over its shape
    for (size_t e = r.data.strides.size(), step = 1; e-- > 0;) {
      if (r.data.shape[e] != 1 && r.data.strides[e] != static_cast<int64_t>(step))
        contiguous = false;
      step *= static_cast<size_t>(std::max<int64_t>(r.data.shape[e], 0));
    }
    if (r.data.memory == MemoryKind::kCuda || !contiguous || r.data.data == nullptr) {
      return Status(StatusCode::kInvalidArgument,
                    who + " must be contiguous host memory (copy a CUDA shard to the host)");
    }
    const auto spec = dtypes.find(r.name);
    if (spec != dtypes.end() && spec->second != static_cast<in::DType>(r.data.dtype)) {
      return Status(StatusCode::kInvalidArgument,
                    who + " has another dtype than the tensor the model declares");
    }
    const auto* base = static_cast<const uint8_t*>(r.data.data) +
                       r.data.offset * static_cast<int64_t>(dtype_size(r.data.dtype));
    in::OwnedRange range{r.name, r.first, r.data.numel(), base};
    if (!r.offsets.empty()) {
      if (r.offsets.size() != r.data.shape.size()) {
        return Status(StatusCode::kInvalidArgument,
                      who + ": " + std::to_string(r.offsets.size()) + " offsets for data of " +
                          std::to_string(r.data.shape.size()) + " dimensions");
      }
      range.box = in::TensorSlice::box(r.offsets, r.data.shape);
    }
    owned.push_back(std::move(range));
  }
  in::ShardPublisherOptions so;
  so.rank = rank;
  so.threads = options.threads;
  so.parts_wait = options.parts_wait;
  so.credit_timeout = options.credit_timeout;
  so.log = std::move(options.log);
  auto started =
      in::ShardPublisher::start(*config, std::move(so), std::move(specs), std::move(owned));
  if (!started.ok()) return from_internal(started.status());
  auto impl = std::make_unique<Impl>();
  impl->publisher = std::move(started).value();
  return std::unique_ptr<ShardPublisher>(new ShardPublisher(std::move(impl)));
}

uint32_t ShardPublisher::shard() const {
  return impl_->publisher->shard();
}

uint32_t ShardPublisher::shards() const {
  return impl_->publisher->shards();
}

bool ShardPublisher::lead() const {
  return impl_->publisher->lead();
}

Result<ShardPublishReport> ShardPublisher::publish(uint64_t version, bool force_anchor) {
  auto report = impl_->publisher->publish(version, force_anchor);
  if (!report.ok()) return from_internal(report.status());
  ShardPublishReport out;
  out.version = report->version;
  out.anchor = report->anchor;
  out.stored_bytes = report->stored_bytes;
  out.committed_here = report->commit.has_value();
  return out;
}

std::optional<uint64_t> ShardPublisher::committed() const {
  return impl_->publisher->committed();
}

Status ShardPublisher::wait_committed(uint64_t version, Deadline deadline) const {
  return from_internal(impl_->publisher->wait_committed(version, deadline));
}

void ShardPublisher::stop(const std::string& reason) {
  if (impl_ && impl_->publisher) impl_->publisher->stop(reason);
}

}  // namespace weightcast::api
