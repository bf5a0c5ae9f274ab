// weightcast._core's Publisher, PublishHandle, Step and Subscriber: thin owners of the public
// C++ endpoints (include/weightcast/). The Python classes in python/weightcast/ add module
// registration, references that keep registered tensors alive, and context managers.
//
// Lifetime: an endpoint's threads call Python (log lines, before/after apply) through
// Callbacks held by the owner here. close() stops and destroys the endpoint with the GIL
// released (a thread blocked on the GIL in a callback can then finish), and only then are
// the callables dropped, with the GIL held. Destructors call close().
#include <memory>
#include <utility>

#include "python/src/binding.h"

namespace weightcast::python {
namespace {

nb::dict report_dict(const api::PublishReport& r) {
  nb::dict d;
  d["version"] = r.version;
  d["anchor"] = r.anchor;
  d["why_anchor"] = r.why_anchor;
  d["changed_tensors"] = r.changed_tensors;
  d["changed_elements"] = r.changed_elements;
  d["stored_bytes"] = r.stored_bytes;
  d["seconds"] = r.seconds;
  return d;
}

struct Handle {
  api::PublishHandle handle;
};

struct PyStep {
  std::optional<api::Step> step;

  api::Step& get() {
    if (!step) {
      check(api::Status(api::StatusCode::kFailedPrecondition, "step already published"));
    }
    return *step;
  }
};

class PyPublisher {
 public:
  PyPublisher(const std::string& config, uint32_t rank, size_t threads,
              std::optional<double> credit_timeout_s, nb::object log)
      : callbacks_(std::make_unique<Callbacks>()) {
    callbacks_->log = std::move(log);
    api::PublisherOptions options;
    options.threads = threads;
    if (credit_timeout_s) {
      options.credit_timeout =
          std::chrono::milliseconds(static_cast<int64_t>(*credit_timeout_s * 1000));
    }
    options.log = log_callback(callbacks_.get());
    api::Result<std::unique_ptr<api::Publisher>> started = api::Status();
    {
      nb::gil_scoped_release release;
      started = api::Publisher::start(config, rank, std::move(options));
    }
    check(started.status());
    publisher_ = std::move(started).value();
  }
  ~PyPublisher() { close("publisher closed"); }

  api::Publisher& get() {
    if (!publisher_) check(api::Status(api::StatusCode::kFailedPrecondition, "publisher closed"));
    return *publisher_;
  }

  void register_tensor(const std::string& name, const AnyArray& array,
                       std::optional<std::string> dtype, bool hooked) {
    const api::TensorRef ref = tensor_ref(name, array, dtype);
    api::Publisher& p = get();
    nb::gil_scoped_release release;
    check(p.register_tensor(ref,
                            hooked ? api::TensorUpdates::kHooked : api::TensorUpdates::kSnapshot));
  }

  Handle publish(uint64_t version, bool force_anchor) {
    api::Publisher& p = get();
    api::Result<api::PublishHandle> queued = api::Status();
    {
      nb::gil_scoped_release release;
      queued = p.publish(version, force_anchor);
    }
    check(queued.status());
    return Handle{std::move(queued).value()};
  }

  PyStep begin_step(uint64_t version, bool force_anchor) {
    api::Publisher& p = get();
    api::Result<api::Step> begun = api::Status();
    {
      nb::gil_scoped_release release;
      begun = p.begin_step(version, force_anchor);
    }
    check(begun.status());
    return PyStep{std::move(begun).value()};
  }

  Handle publish_step(PyStep& step) {
    api::Publisher& p = get();
    api::Step s = std::move(step.get());
    step.step.reset();
    api::Result<api::PublishHandle> queued = api::Status();
    {
      nb::gil_scoped_release release;
      queued = p.publish_step(std::move(s));
    }
    check(queued.status());
    return Handle{std::move(queued).value()};
  }

  void wait_committed(uint64_t version, std::optional<double> timeout_s) {
    api::Publisher& p = get();
    wait_interruptibly(deadline_from(timeout_s),
                       [&](api::Deadline d) { return p.wait_committed(version, d); });
  }

  void close(const std::string& reason) { close_endpoint(publisher_, reason); }

 private:
  std::unique_ptr<Callbacks> callbacks_;  // outlives publisher_ (declared first)
  std::unique_ptr<api::Publisher> publisher_;
};

class PySubscriber {
 public:
  PySubscriber(const std::string& config, uint32_t rank, size_t threads,
               std::optional<uint64_t> claimed_version, nb::object events, nb::object log)
      : callbacks_(std::make_unique<Callbacks>()) {
    callbacks_->log = std::move(log);
    callbacks_->events = std::move(events);
    api::SubscriberOptions options;
    options.threads = threads;
    options.claimed_version = claimed_version;
    options.log = log_callback(callbacks_.get());
    if (!callbacks_->events.is_none()) {
      Callbacks* cb = callbacks_.get();
      options.before_apply = [cb](uint64_t v) {
        Callbacks::call(cb->events, "weightcast before_apply", "before_apply", v);
      };
      options.after_apply = [cb](uint64_t v) {
        Callbacks::call(cb->events, "weightcast after_apply", "after_apply", v);
      };
    }
    api::Result<std::unique_ptr<api::Subscriber>> created = api::Status();
    {
      nb::gil_scoped_release release;
      created = api::Subscriber::create(config, rank, std::move(options));
    }
    check(created.status());
    subscriber_ = std::move(created).value();
  }
  ~PySubscriber() { close("subscriber closed"); }

  api::Subscriber& get() {
    if (!subscriber_) {
      check(api::Status(api::StatusCode::kFailedPrecondition, "subscriber closed"));
    }
    return *subscriber_;
  }

  void register_tensor(const std::string& name, const AnyArray& array,
                       std::optional<std::string> dtype) {
    const api::TensorRef ref = tensor_ref(name, array, dtype);
    api::Subscriber& s = get();
    nb::gil_scoped_release release;
    check(s.register_tensor(ref));
  }

  void register_slice(const std::string& name, const AnyArray& array,
                      const std::vector<int64_t>& global_shape, std::optional<std::string> dtype) {
    const api::TensorRef ref = tensor_ref(name, array, dtype);
    api::Subscriber& s = get();
    nb::gil_scoped_release release;
    check(s.register_slice(ref, global_shape));
  }

  // (offsets, sizes) of the box this rank holds of tensor `name`.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> slice_of(
      const std::string& name, const std::vector<int64_t>& shape) {
    auto box = get().slice_of(name, shape);
    check(box.status());
    return {box->offsets, box->sizes};
  }

  void register_from_journal(std::optional<double> timeout_s) {
    api::Subscriber& s = get();
    wait_interruptibly(deadline_from(timeout_s),
                       [&](api::Deadline d) { return s.register_from_journal(d); });
  }

  void connect() {
    api::Subscriber& s = get();
    nb::gil_scoped_release release;
    check(s.connect());
  }

  void wait_for_version(uint64_t version, std::optional<double> timeout_s) {
    api::Subscriber& s = get();
    wait_interruptibly(deadline_from(timeout_s),
                       [&](api::Deadline d) { return s.wait_for_version(version, d); });
  }

  void wait_committed(uint64_t version, std::optional<double> timeout_s) {
    api::Subscriber& s = get();
    wait_interruptibly(deadline_from(timeout_s),
                       [&](api::Deadline d) { return s.wait_committed(version, d); });
  }

  nb::dict stats() {
    api::SubscriberStats st;
    {
      api::Subscriber& s = get();
      nb::gil_scoped_release release;
      st = s.stats();
    }
    nb::dict d;
    d["versions_applied"] = st.versions_applied;
    d["nacks"] = st.nacks;
    d["anchors_loaded"] = st.anchors_loaded;
    d["last_apply_us"] = st.last_apply_us;
    d["versions_by_path"] = st.versions_by_path;
    d["last_transport"] = st.last_transport;
    d["last_bytes_written"] = st.last_bytes_written;
    d["bytes_written"] = st.bytes_written;
    d["claim_verified"] = st.claim_verified;
    return d;
  }

  nb::list tensors() {
    std::vector<api::TensorRef> refs;
    {
      api::Subscriber& s = get();
      nb::gil_scoped_release release;
      refs = s.tensors();
    }
    nb::list out;
    for (const auto& r : refs) {
      nb::dict d;
      d["name"] = r.name;
      d["dtype"] = dtype_name(r.dtype);
      d["shape"] = nb::tuple(nb::cast(r.shape));
      out.append(d);
    }
    return out;
  }

  void close(const std::string& reason) { close_endpoint(subscriber_, reason); }

 private:
  std::unique_ptr<Callbacks> callbacks_;  // outlives subscriber_ (declared first)
  std::unique_ptr<api::Subscriber> subscriber_;
};

}  // namespace

void bind_endpoints(nb::module_& m) {
  using nb::arg;
  nb::class_<Handle>(m, "PublishHandle")
      .def_prop_ro("version", [](const Handle& h) { return h.handle.version(); })
      .def(
          "wait_for_reads",
          [](const Handle& h, std::optional<double> timeout_s) {
            wait_interruptibly(deadline_from(timeout_s),
                               [&](api::Deadline d) { return h.handle.wait_for_reads(d); });
          },
          arg("timeout") = nb::none())
      .def(
          "wait_published",
          [](const Handle& h, std::optional<double> timeout_s) {
            api::PublishReport report;
            wait_interruptibly(deadline_from(timeout_s), [&](api::Deadline d) {
              auto r = h.handle.wait_published(d);
              if (r.ok()) report = *r;
              return r.status();
            });
            return report_dict(report);
          },
          arg("timeout") = nb::none())
      .def(
          "wait_committed",
          [](const Handle& h, std::optional<double> timeout_s) {
            wait_interruptibly(deadline_from(timeout_s),
                               [&](api::Deadline d) { return h.handle.wait_committed(d); });
          },
          arg("timeout") = nb::none());

  nb::class_<PyStep>(m, "Step")
      .def_prop_ro("version", [](PyStep& s) { return s.step ? s.step->version() : 0; })
      .def_prop_ro("open", [](PyStep& s) { return s.step.has_value(); })
      .def(
          "write",
          [](PyStep& s, const AnyArray& live, std::optional<std::string> live_dtype,
             const AnyArray& values, std::optional<std::string> values_dtype,
             const std::string& name) {
            const api::TensorRef live_ref = tensor_ref(name, live, live_dtype);
            const api::TensorRef new_ref = tensor_ref(name + " (new values)", values, values_dtype);
            api::Step& step = s.get();
            nb::gil_scoped_release release;
            check(step.write(live_ref, new_ref));
          },
          arg("live").noconvert(), arg("live_dtype").none(), arg("values").noconvert(),
          arg("values_dtype").none(), arg("name"))
      .def("progress", [](PyStep& s) {
        const api::StepProgress p = s.step ? s.step->progress() : api::StepProgress{};
        nb::dict d;
        d["elements_written"] = p.elements_written;
        d["elements_total"] = p.elements_total;
        d["changed_elements"] = p.changed_elements;
        d["pending_chunks"] = p.pending_chunks;
        return d;
      });

  nb::class_<PyPublisher>(m, "Publisher")
      .def(nb::init<const std::string&, uint32_t, size_t, std::optional<double>, nb::object>(),
           arg("config"), arg("rank"), arg("threads") = 0,
           arg("credit_timeout").none() = nb::none(), arg("log").none() = nb::none())
      .def("register_tensor", &PyPublisher::register_tensor, arg("name"), arg("array").noconvert(),
           arg("dtype").none() = nb::none(), arg("hooked") = false)
      .def("publish", &PyPublisher::publish, arg("version"), arg("force_anchor") = false,
           nb::keep_alive<0, 1>())
      .def("begin_step", &PyPublisher::begin_step, arg("version"), arg("force_anchor") = false,
           nb::keep_alive<0, 1>())
      .def("publish_step", &PyPublisher::publish_step, arg("step"), nb::keep_alive<0, 1>())
      .def_prop_ro("head", [](PyPublisher& p) { return p.get().head(); })
      .def_prop_ro("committed", [](PyPublisher& p) { return p.get().committed(); })
      .def("wait_committed", &PyPublisher::wait_committed, arg("version"),
           arg("timeout") = nb::none())
      .def_prop_ro("journal_root",
                   [](PyPublisher& p) { return std::string(p.get().journal_root()); })
      .def("serves", [](PyPublisher& p, const std::string& path) { return p.get().serves(path); })
      .def("close", &PyPublisher::close, arg("reason") = "publisher closed");

  nb::class_<PySubscriber>(m, "Subscriber")
      .def(nb::init<const std::string&, uint32_t, size_t, std::optional<uint64_t>, nb::object,
                    nb::object>(),
           arg("config"), arg("rank"), arg("threads") = 0,
           arg("claimed_version").none() = nb::none(), arg("events").none() = nb::none(),
           arg("log").none() = nb::none())
      .def("register_tensor", &PySubscriber::register_tensor, arg("name"), arg("array").noconvert(),
           arg("dtype").none() = nb::none())
      .def("register_slice", &PySubscriber::register_slice, arg("name"), arg("array").noconvert(),
           arg("global_shape"), arg("dtype").none() = nb::none())
      .def("slice_of", &PySubscriber::slice_of, arg("name"), arg("shape"))
      .def("register_from_journal", &PySubscriber::register_from_journal,
           arg("timeout") = nb::none())
      .def("connect", &PySubscriber::connect)
      .def_prop_ro("current_version", [](PySubscriber& s) { return s.get().current_version(); })
      .def("wait_for_version", &PySubscriber::wait_for_version, arg("version"),
           arg("timeout") = nb::none())
      .def_prop_ro("committed_version", [](PySubscriber& s) { return s.get().committed_version(); })
      .def("wait_committed", &PySubscriber::wait_committed, arg("version"),
           arg("timeout") = nb::none())
      .def("stats", &PySubscriber::stats)
      .def_prop_ro("fatal_error", [](PySubscriber& s) { return s.get().fatal_error(); })
      .def("checksum", [](PySubscriber& s, size_t i) { return s.get().checksum(i); })
      .def("tensors", &PySubscriber::tensors)
      .def_prop_ro("journal_root",
                   [](PySubscriber& s) { return std::string(s.get().journal_root()); })
      .def("close", &PySubscriber::close, arg("reason") = "subscriber closed");
}

}  // namespace weightcast::python
