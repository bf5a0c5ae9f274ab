// weightcast._core's journal reader and adapter functions (include/weightcast/journal.h,
// adapter.h). The Python modules weightcast.journal and weightcast.adapter wrap them with
// torch state dicts. Every call runs with the GIL released: they read and write files.
#include <utility>

#include "python/src/binding.h"

namespace weightcast::python {
namespace {

using NamedArrays = std::vector<std::tuple<std::string, AnyArray, std::optional<std::string>>>;

std::vector<api::TensorRef> refs_of(const NamedArrays& arrays) {
  std::vector<api::TensorRef> refs;
  for (const auto& [name, array, dtype] : arrays) refs.push_back(tensor_ref(name, array, dtype));
  return refs;
}

template <typename T>
T value_or_throw(api::Result<T> result) {
  check(result.status());
  return std::move(result).value();
}

class PyJournal {
 public:
  explicit PyJournal(const std::string& root) {
    api::Result<std::unique_ptr<api::Journal>> opened = api::Status();
    {
      nb::gil_scoped_release release;
      opened = api::Journal::open(root);
    }
    journal_ = value_or_throw(std::move(opened));
  }

  const std::string& root() const { return journal_->root(); }

  std::optional<uint64_t> head() const {
    api::Result<std::optional<uint64_t>> h = api::Status();
    {
      nb::gil_scoped_release release;
      h = journal_->head();
    }
    return value_or_throw(std::move(h));
  }

  nb::list versions() const {
    api::Result<std::vector<api::JournalVersion>> vs = api::Status();
    {
      nb::gil_scoped_release release;
      vs = journal_->versions();
    }
    nb::list out;
    for (const auto& v : value_or_throw(std::move(vs))) {
      nb::dict d;
      d["version"] = v.version;
      d["anchor"] = v.anchor;
      d["anchor_version"] = v.anchor_version;
      d["stored_bytes"] = v.stored_bytes;
      d["changed_tensors"] = v.changed_tensors;
      out.append(d);
    }
    return out;
  }

  nb::list tensors(std::optional<uint64_t> version) const {
    api::Result<std::vector<api::JournalTensor>> ts = api::Status();
    {
      nb::gil_scoped_release release;
      ts = journal_->tensors(version);
    }
    nb::list out;
    for (const auto& t : value_or_throw(std::move(ts))) {
      nb::dict d;
      d["name"] = t.name;
      d["dtype"] = dtype_name(t.dtype);
      d["shape"] = nb::tuple(nb::cast(t.shape));
      d["checksum"] = t.checksum;
      out.append(d);
    }
    return out;
  }

  nb::dict catch_up(const NamedArrays& destinations, std::optional<uint64_t> version,
                    std::optional<uint64_t> held, size_t threads) const {
    const std::vector<api::TensorRef> refs = refs_of(destinations);
    api::Result<api::CatchUpResult> r = api::Status();
    {
      nb::gil_scoped_release release;
      r = journal_->catch_up(refs, version, held, threads);
    }
    const api::CatchUpResult done = value_or_throw(std::move(r));
    nb::dict d;
    d["version"] = done.version;
    d["anchors_loaded"] = done.anchors_loaded;
    d["deltas_applied"] = done.deltas_applied;
    d["bytes_written"] = done.bytes_written;
    d["fallbacks"] = done.fallbacks;
    d["seconds"] = done.seconds;
    return d;
  }

 private:
  std::unique_ptr<api::Journal> journal_;
};

nb::dict publish_adapter(const std::string& dir, const NamedArrays& tensors,
                         const std::string& config_json, size_t threads) {
  const std::vector<api::TensorRef> refs = refs_of(tensors);
  api::Result<api::AdapterReport> r = api::Status();
  {
    nb::gil_scoped_release release;
    r = api::publish_adapter(dir, refs, config_json, threads);
  }
  const api::AdapterReport report = value_or_throw(std::move(r));
  nb::dict d;
  d["format"] = report.format;
  d["model_path"] = report.model_path;
  d["keys"] = report.keys;
  d["logical_bytes"] = report.logical_bytes;
  d["unique_storages"] = report.unique_storages;
  d["unique_bytes"] = report.unique_bytes;
  d["file_bytes"] = report.file_bytes;
  return d;
}

// The loaded tensors as (name, dtype, shape, bytes): one copy into Python-owned bytes.
nb::dict load_adapter(const std::string& path, bool to_bf16) {
  api::Result<api::LoadedAdapter> r = api::Status();
  {
    nb::gil_scoped_release release;
    r = api::load_adapter(path, to_bf16);
  }
  const api::LoadedAdapter loaded = value_or_throw(std::move(r));
  nb::list tensors;
  for (const auto& t : loaded.tensors) {
    tensors.append(
        nb::make_tuple(t.name, dtype_name(t.dtype), nb::tuple(nb::cast(t.shape)),
                       nb::bytes(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size())));
  }
  nb::dict d;
  d["format"] = loaded.format;
  d["model_path"] = loaded.model_path;
  d["config_json"] = loaded.config_json;
  d["file_bytes"] = loaded.file_bytes;
  d["tensors"] = tensors;
  return d;
}

}  // namespace

void bind_artifacts(nb::module_& m) {
  using nb::arg;
  nb::class_<PyJournal>(m, "Journal")
      .def(nb::init<const std::string&>(), arg("root"))
      .def_prop_ro("root", &PyJournal::root)
      .def_prop_ro("head", &PyJournal::head)
      .def("versions", &PyJournal::versions)
      .def("tensors", &PyJournal::tensors, arg("version").none() = nb::none())
      .def("catch_up", &PyJournal::catch_up, arg("destinations"),
           arg("version").none() = nb::none(), arg("held").none() = nb::none(), arg("threads") = 0);
  m.def("publish_adapter", &publish_adapter, arg("dir"), arg("tensors"), arg("config_json"),
        arg("threads") = 0);
  m.def("load_adapter", &load_adapter, arg("path"), arg("to_bf16") = false);
}

}  // namespace weightcast::python
