// weightcast._core's ShardPublisher: a thin owner of the public C++ ShardPublisher
// (include/weightcast/shard_publisher.h); python/weightcast/shard_publisher.py adds the
// references that keep the ranges' arrays alive and a context manager. The lifetime rules of
// endpoints.cc hold: close() stops the endpoint with the GIL released, then drops the callables.
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "python/src/binding.h"

namespace weightcast::python {
namespace {

using nb::arg;

class PyShardPublisher {
 public:
  // `model`: (name, dtype name, shape) of every tensor; `ranges`: (name, first element, block
  // offsets (empty for a flat range), array).
  PyShardPublisher(
      const std::string& config, uint32_t rank,
      const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>& model,
      const std::vector<std::tuple<std::string, uint64_t, std::vector<int64_t>, AnyArray>>& ranges,
      size_t threads, std::optional<double> parts_wait_s, std::optional<double> credit_timeout_s,
      nb::object log)
      : callbacks_(std::make_unique<Callbacks>()) {
    callbacks_->log = std::move(log);
    std::vector<api::TensorSpec> specs;
    for (const auto& [name, dtype, shape] : model) {
      const std::optional<api::DType> d = dtype_from_name(dtype);
      if (!d) {
        check(
            api::Status(api::StatusCode::kInvalidArgument,
                        "tensor '" + name + "': '" + dtype + "' is not a dtype weightcast knows"));
      }
      specs.push_back({name, *d, shape});
    }
    std::unordered_map<std::string, api::DType> dtypes;
    for (const api::TensorSpec& t : specs) dtypes.emplace(t.name, t.dtype);
    std::vector<api::ShardRange> owned;
    for (const auto& [name, first, offsets, array] : ranges) {
      const auto spec = dtypes.find(name);
      const std::optional<std::string> dtype =
          spec == dtypes.end() ? std::nullopt
                               : std::optional<std::string>(dtype_name(spec->second));
      owned.push_back({name, first, tensor_ref(name, array, dtype), offsets});
    }
    api::ShardPublisherOptions options;
    options.threads = threads;
    const auto ms = [](double s) {
      return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
    };
    if (parts_wait_s) options.parts_wait = ms(*parts_wait_s);
    if (credit_timeout_s) options.credit_timeout = ms(*credit_timeout_s);
    options.log = log_callback(callbacks_.get());
    api::Result<std::unique_ptr<api::ShardPublisher>> started = api::Status();
    {
      nb::gil_scoped_release release;
      started = api::ShardPublisher::start(config, rank, std::move(specs), std::move(owned),
                                           std::move(options));
    }
    check(started.status());
    publisher_ = std::move(started).value();
  }
  ~PyShardPublisher() { close("publisher closed"); }

  api::ShardPublisher& get() {
    if (!publisher_) check(api::Status(api::StatusCode::kFailedPrecondition, "publisher closed"));
    return *publisher_;
  }

  nb::dict publish(uint64_t version, bool force_anchor) {
    api::ShardPublisher& p = get();
    api::Result<api::ShardPublishReport> report = api::Status();
    {
      nb::gil_scoped_release release;
      report = p.publish(version, force_anchor);
    }
    check(report.status());
    nb::dict d;
    d["version"] = report->version;
    d["anchor"] = report->anchor;
    d["stored_bytes"] = report->stored_bytes;
    d["committed_here"] = report->committed_here;
    return d;
  }

  void wait_committed(uint64_t version, std::optional<double> timeout_s) {
    api::ShardPublisher& p = get();
    wait_interruptibly(deadline_from(timeout_s),
                       [&](api::Deadline d) { return p.wait_committed(version, d); });
  }

  void close(const std::string& reason) { close_endpoint(publisher_, reason); }

 private:
  std::unique_ptr<Callbacks> callbacks_;  // outlives publisher_ (declared first)
  std::unique_ptr<api::ShardPublisher> publisher_;
};

}  // namespace

void bind_shard_publisher(nb::module_& m) {
  nb::class_<PyShardPublisher>(m, "ShardPublisher")
      .def(
          nb::init<
              const std::string&, uint32_t,
              const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>&,
              const std::vector<std::tuple<std::string, uint64_t, std::vector<int64_t>, AnyArray>>&,
              size_t, std::optional<double>, std::optional<double>, nb::object>(),
          arg("config"), arg("rank"), arg("model"), arg("ranges"), arg("threads") = 0,
          arg("parts_wait").none() = nb::none(), arg("credit_timeout").none() = nb::none(),
          arg("log").none() = nb::none())
      .def("publish", &PyShardPublisher::publish, arg("version"), arg("force_anchor") = false)
      .def_prop_ro("shard", [](PyShardPublisher& p) { return p.get().shard(); })
      .def_prop_ro("shards", [](PyShardPublisher& p) { return p.get().shards(); })
      .def_prop_ro("lead", [](PyShardPublisher& p) { return p.get().lead(); })
      .def_prop_ro("committed", [](PyShardPublisher& p) { return p.get().committed(); })
      .def("wait_committed", &PyShardPublisher::wait_committed, arg("version"),
           arg("timeout") = nb::none())
      .def("close", &PyShardPublisher::close, arg("reason") = "publisher closed");
}

}  // namespace weightcast::python
