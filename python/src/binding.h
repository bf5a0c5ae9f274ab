// What the translation units of weightcast._core (python/src/) share: the exception that
// carries a Status to Python, tensors taken from DLPack / buffer-protocol objects, and waits
// that release the GIL and stay interruptible (docs/DECISIONS.md "The Python package").
//
// Contracts of the binding as a whole:
// - Every call into an endpoint runs with the GIL released: the endpoints' threads take the
//   GIL to run Python callbacks, so a call that held it while waiting on those threads could
//   deadlock.
// - A wait is cut into slices of at most kWaitSlice; between slices the GIL is taken and
//   PyErr_CheckSignals runs, so Ctrl-C (KeyboardInterrupt) ends any wait within a slice.
// - A non-ok Status is thrown as StatusError and becomes an instance of the Python class
//   weightcast.errors names for its code (weightcast.Error and one subclass per code).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <weightcast/weightcast.h>

namespace weightcast::python {

namespace nb = nanobind;
namespace api = weightcast::api;

// A non-ok api::Status on its way to Python.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(api::Status status)
      : std::runtime_error(status.message()), status_(std::move(status)) {}
  const api::Status& status() const { return status_; }

 private:
  api::Status status_;
};

// Throws StatusError unless `status` is ok.
void check(const api::Status& status);

// Maps weightcast's StatusError to the Python exception classes (module init, once).
void register_status_translator();

// The deadline `timeout_s` seconds from now; nullopt or a negative value waits forever.
api::Deadline deadline_from(std::optional<double> timeout_s);

inline constexpr std::chrono::milliseconds kWaitSlice{50};

// Runs `wait(slice_deadline)` with the GIL released, slice after slice, until it returns
// anything but kDeadlineExceeded or `deadline` passes; checks for signals between slices
// (a KeyboardInterrupt propagates as nb::python_error). Throws StatusError on failure.
template <typename Wait>
void wait_interruptibly(api::Deadline deadline, Wait&& wait) {
  for (;;) {
    const api::Deadline slice = std::min(deadline, api::Clock::now() + kWaitSlice);
    api::Status s;
    {
      nb::gil_scoped_release release;
      s = wait(slice);
    }
    if (s.ok()) return;
    if (s.code() != api::StatusCode::kDeadlineExceeded || api::Clock::now() >= deadline) {
      throw StatusError(std::move(s));
    }
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

// Stops and destroys an endpoint with the GIL released (its threads may be blocked on the GIL
// in a callback and must be able to finish); nothing when it is already closed.
template <typename Endpoint>
void close_endpoint(std::unique_ptr<Endpoint>& endpoint, const std::string& reason) {
  if (!endpoint) return;
  nb::gil_scoped_release release;
  endpoint->stop(reason);
  endpoint.reset();
}

// Any array the caller's memory can be described by: DLPack (torch, NumPy, CuPy, JAX) or the
// buffer protocol; never copied or converted.
using AnyArray = nb::ndarray<>;

// A TensorRef over `array`'s memory named `name`. `dtype`, when given, is weightcast's name of
// the element type ("bfloat16", "float8_e4m3fn", "bool", ...; torch's and NumPy's names
// without their module prefix) and must have the array's element size: it tells apart types
// that DLPack producers label alike (torch 1.13 exports bool as uint8). Host (CPU), pinned
// host (cuda_host) or CUDA memory; anything else is kInvalidArgument naming the tensor.
api::TensorRef tensor_ref(const std::string& name, const AnyArray& array,
                          const std::optional<std::string>& dtype);

// weightcast's name of `dtype` ("bfloat16", ...), and the dtype of such a name (nullopt for
// another name).
const char* dtype_name(api::DType dtype);
std::optional<api::DType> dtype_from_name(std::string_view name);

// Python callables an endpoint's threads call. Each call takes the GIL; an exception the
// callable raises is reported through sys.unraisablehook (the Python wrappers catch and
// record their own before it gets here). Nothing is called once the interpreter finalizes.
struct Callbacks {
  nb::object log;
  nb::object events;  // events(kind: str, version: int), kind "before_apply" / "after_apply"

  template <typename... Args>
  static void call(const nb::object& fn, const char* what, Args&&... args) {
    if (!fn.is_valid() || fn.is_none() || !nb::is_alive()) return;
    nb::gil_scoped_acquire gil;
    try {
      fn(std::forward<Args>(args)...);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable(what);
    }
  }
};

// The endpoint's log callback calling cb->log (none when it is None).
inline api::LogCallback log_callback(Callbacks* cb) {
  if (cb->log.is_none()) return {};
  return
      [cb](const std::string& line) { Callbacks::call(cb->log, "weightcast log callback", line); };
}

// Module sections, each defined in its own translation unit.
void bind_endpoints(nb::module_& m);        // endpoints.cc
void bind_artifacts(nb::module_& m);        // artifacts.cc: Journal, adapters
void bind_shard_publisher(nb::module_& m);  // shard_endpoint.cc

}  // namespace weightcast::python
