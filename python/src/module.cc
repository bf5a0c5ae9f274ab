// weightcast._core: module init, Status -> Python exceptions, tensors from DLPack, waits.
// The Python package (python/weightcast/) wraps these; users import `weightcast`.
#include <algorithm>
#include <array>
#include <string_view>

#include "python/src/binding.h"

namespace weightcast::python {
namespace {

struct DTypeInfo {
  api::DType dtype;
  const char* name;
};

// weightcast's names, which are torch's and NumPy's (without "torch." / "numpy.").
constexpr std::array<DTypeInfo, 12> kDTypes{{
    {api::DType::kBool, "bool"},
    {api::DType::kU8, "uint8"},
    {api::DType::kI8, "int8"},
    {api::DType::kI16, "int16"},
    {api::DType::kI32, "int32"},
    {api::DType::kI64, "int64"},
    {api::DType::kF16, "float16"},
    {api::DType::kBF16, "bfloat16"},
    {api::DType::kF32, "float32"},
    {api::DType::kF64, "float64"},
    {api::DType::kF8E4M3FN, "float8_e4m3fn"},
    {api::DType::kF8E5M2, "float8_e5m2"},
}};

api::Status invalid(const std::string& name, const std::string& what) {
  return api::Status(api::StatusCode::kInvalidArgument, "tensor '" + name + "': " + what);
}

// The DType of a DLPack (code, bits); nullopt for one weightcast does not carry.
std::optional<api::DType> dtype_from_dlpack(nb::dlpack::dtype dt) {
  using C = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return std::nullopt;
  const auto code = static_cast<C>(dt.code);
  switch (code) {
    case C::Bool:
      return dt.bits == 8 ? std::optional(api::DType::kBool) : std::nullopt;
    case C::UInt:
      return dt.bits == 8 ? std::optional(api::DType::kU8) : std::nullopt;
    case C::Int:
      switch (dt.bits) {
        case 8:
          return api::DType::kI8;
        case 16:
          return api::DType::kI16;
        case 32:
          return api::DType::kI32;
        case 64:
          return api::DType::kI64;
        default:
          return std::nullopt;
      }
    case C::Float:
      switch (dt.bits) {
        case 16:
          return api::DType::kF16;
        case 32:
          return api::DType::kF32;
        case 64:
          return api::DType::kF64;
        default:
          return std::nullopt;
      }
    case C::Bfloat:
      return dt.bits == 16 ? std::optional(api::DType::kBF16) : std::nullopt;
    case C::Float8_E4M3FN:
      return api::DType::kF8E4M3FN;
    case C::Float8_E5M2:
      return api::DType::kF8E5M2;
    default:
      return std::nullopt;
  }
}

}  // namespace

std::optional<api::DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return d.dtype;
  }
  return std::nullopt;
}

void check(const api::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

void register_status_translator() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const std::string code(api::status_code_name(e.status().code()));
      // The classes live in Python (weightcast/errors.py) so that users can subclass and
      // pickle them; a failure to import them still raises, as RuntimeError.
      try {
        nb::object cls = nb::module_::import_("weightcast.errors").attr("class_for_code")(code);
        PyErr_SetString(cls.ptr(), e.status().message().c_str());
      } catch (nb::python_error&) {
        PyErr_SetString(PyExc_RuntimeError, e.status().to_string().c_str());
      }
    }
  });
}

api::Deadline deadline_from(std::optional<double> timeout_s) {
  if (!timeout_s || *timeout_s < 0) return api::no_deadline();
  // Bounded so that a huge timeout cannot overflow the clock's representation.
  const double s = std::min(*timeout_s, 100.0 * 365 * 24 * 3600);
  return api::deadline_after(std::chrono::duration<double>(s));
}

const char* dtype_name(api::DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "unknown";
}

api::TensorRef tensor_ref(const std::string& name, const AnyArray& array,
                          const std::optional<std::string>& dtype) {
  api::TensorRef ref;
  ref.name = name;
  const std::optional<api::DType> from_array = dtype_from_dlpack(array.dtype());
  if (dtype) {
    const std::optional<api::DType> named = dtype_from_name(*dtype);
    if (!named) check(invalid(name, "unsupported dtype '" + *dtype + "'"));
    if (api::dtype_size(*named) != array.itemsize()) {
      check(invalid(name, "dtype '" + *dtype + "' has " + std::to_string(api::dtype_size(*named)) +
                              "-byte elements, the array " + std::to_string(array.itemsize())));
    }
    ref.dtype = *named;
  } else if (from_array) {
    ref.dtype = *from_array;
  } else {
    check(invalid(name, "unsupported element type (DLPack code " +
                            std::to_string(array.dtype().code) + ", " +
                            std::to_string(array.dtype().bits) + " bits)"));
  }
  switch (array.device_type()) {
    case nb::device::cpu::value:
      ref.memory = api::MemoryKind::kHost;
      break;
    case nb::device::cuda_host::value:
      ref.memory = api::MemoryKind::kHostPinned;
      break;
    case nb::device::cuda::value:
      ref.memory = api::MemoryKind::kCuda;
      ref.device = array.device_id();
      break;
    default:
      check(invalid(name, "memory of DLPack device type " + std::to_string(array.device_type()) +
                              " (host, pinned host or CUDA only)"));
  }
  for (size_t i = 0; i < array.ndim(); ++i) {
    ref.shape.push_back(array.shape(i));
    ref.strides.push_back(array.stride(i));
  }
  // nanobind's data() already includes DLPack's byte_offset.
  ref.data = const_cast<void*>(array.data());
  return ref;
}

}  // namespace weightcast::python

NB_MODULE(_core, m) {
  namespace wp = weightcast::python;
  namespace nb = nanobind;
  m.doc() = "weightcast's C++ endpoints; use the `weightcast` package, not this module";
  wp::register_status_translator();
  m.def("version", [] { return std::string(weightcast::api::version_string()); });
  m.def(
      "ucx_built", [] { return weightcast::api::ucx_built(); },
      "Whether this build can carry versions over UCX (a group's `ucx` transport).");
  m.def(
      "describe",
      [](const std::string& name, const wp::AnyArray& array, std::optional<std::string> dtype) {
        const auto ref = wp::tensor_ref(name, array, dtype);
        nb::dict d;
        d["name"] = ref.name;
        d["dtype"] = wp::dtype_name(ref.dtype);
        d["shape"] = nb::tuple(nb::cast(ref.shape));
        d["strides"] = nb::tuple(nb::cast(ref.strides));
        d["data"] = reinterpret_cast<uintptr_t>(ref.data);
        d["memory"] = ref.memory == weightcast::api::MemoryKind::kCuda         ? "cuda"
                      : ref.memory == weightcast::api::MemoryKind::kHostPinned ? "pinned"
                                                                               : "host";
        return d;
      },
      nb::arg("name"), nb::arg("array").noconvert(), nb::arg("dtype") = nb::none(),
      "How weightcast sees `array` (dtype, shape, strides in elements, address, memory)");
  wp::bind_endpoints(m);
  wp::bind_artifacts(m);
  wp::bind_shard_publisher(m);
}
