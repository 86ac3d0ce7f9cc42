// SPDX-License-Identifier: Apache-2.0
// loom tensors to and from Python through DLPack's Python protocol, with
// pybind11 alone (no torch): a loom tensor that torch.from_dlpack,
// numpy.from_dlpack, CuPy and JAX take without a copy (a Python object with
// __dlpack__ and __dlpack_device__), the PyCapsules that carry loom's managed
// tensors and their destructor, and the consumer's side for a capsule made by
// another framework. docs/11_pytorch.md shows how a module uses it.
#pragma once

#include <pybind11/pybind11.h>

#include <loom/interop/dlpack.hpp>
#include <loom/tensor/tensor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace loom_python {
namespace py = pybind11;
namespace dl = loom::dlpack;

// The capsule names of the protocol: a consumer that takes the tensor renames
// the capsule to "used_" + the name, and owns the managed tensor from then on.
inline constexpr const char* versioned_capsule = "dltensor_versioned";
inline constexpr const char* legacy_capsule = "dltensor";

// The capsule's destructor: a capsule that still has its first name was never
// consumed, so it still owns its managed tensor and calls the deleter; a used
// one belongs to its consumer and is left alone.
inline void delete_unconsumed(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, versioned_capsule)) {
    auto* m = static_cast<dl::managed_tensor_versioned*>(PyCapsule_GetPointer(capsule, versioned_capsule));
    if (m->deleter) m->deleter(m);
  } else if (PyCapsule_IsValid(capsule, legacy_capsule)) {
    auto* m = static_cast<dl::managed_tensor*>(PyCapsule_GetPointer(capsule, legacy_capsule));
    if (m->deleter) m->deleter(m);
  }
}

// A managed tensor in a new capsule ("dltensor_versioned" or "dltensor"),
// which owns it until a consumer renames it.
template <class Managed>
py::capsule to_capsule(Managed* m) {
  constexpr bool versioned = std::is_same_v<Managed, dl::managed_tensor_versioned>;
  PyObject* capsule = PyCapsule_New(m, versioned ? versioned_capsule : legacy_capsule, delete_unconsumed);
  if (!capsule) {
    m->deleter(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

// Takes the tensor in another framework's unused DLPack capsule (versioned or
// legacy) as a loom view of its memory: renames the capsule "used_..." first,
// as the protocol says, then loom::from_dlpack owns the managed tensor and
// checks it (dtype, rank, device, with loom's messages; on a refusal the
// producer's deleter has run before the exception leaves). A used capsule or
// another object is a ValueError.
template <class T, std::size_t Rank, class Space>
loom::dlpack_tensor<T, Rank, Space> from_capsule(const py::capsule& capsule) {
  const std::string name = capsule.name() ? capsule.name() : "";
  if (name != versioned_capsule && name != legacy_capsule)
    throw py::value_error(
        "expected an unused DLPack capsule (\"dltensor_versioned\" or \"dltensor\"), got one named '" + name + "'");
  void* managed = capsule.get_pointer();
  if (PyCapsule_SetName(capsule.ptr(), name == versioned_capsule ? "used_dltensor_versioned" : "used_dltensor") != 0)
    throw py::error_already_set();
  if (name == versioned_capsule)
    return loom::from_dlpack<T, Rank, Space>(static_cast<dl::managed_tensor_versioned*>(managed));
  return loom::from_dlpack<T, Rank, Space>(static_cast<dl::managed_tensor*>(managed));
}

// A loom tensor (or a view with what keeps its memory alive) as a Python
// object of DLPack's protocol: torch.from_dlpack(t) and numpy.from_dlpack(t)
// view its memory without a copy. Each __dlpack__ call lends a new managed
// tensor that shares the memory; the memory lives until this object and every
// consumer have let go.
class dlpack_object {
 public:
  // Owns the tensor.
  template <class T, std::size_t Rank, class Space>
  explicit dlpack_object(loom::tensor<T, Rank, Space>&& t)
      : dlpack_object(std::make_shared<loom::tensor<T, Rank, Space>>(std::move(t))) {}

  // Shares the tensor.
  template <class T, std::size_t Rank, class Space>
  explicit dlpack_object(const std::shared_ptr<loom::tensor<T, Rank, Space>>& t) : dlpack_object(t->view(), t) {}

  // Lends `v`, whose memory `keep_alive` keeps; a view of const elements is
  // lent READ_ONLY (versioned capsules only: the legacy struct has no flags).
  template <class T, std::size_t Rank, class Space>
  dlpack_object(loom::view<T, Rank, Space> v, std::shared_ptr<const void> keep_alive)
      : shape_(v.extents().begin(), v.extents().end()),
        dtype_(loom::dtype_name(loom::dtype_of<std::remove_const_t<T>>)) {
    dl::managed_tensor_versioned* probe = loom::to_dlpack(v, nullptr);  // where an export says the data is
    device_ = probe->dl_tensor.device;
    probe->deleter(probe);
    lend_ = [v, keep = std::move(keep_alive)](bool versioned, bool copy) { return lend(v, keep, versioned, copy); };
  }

  // __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None),
  // as the Python array API specifies it: a versioned capsule when the
  // consumer's max_version has major version 1 or more, else a legacy one;
  // copy=True lends a new contiguous copy (flagged IS_COPIED), copy=False or
  // None the memory itself. Host data takes stream=None only; for device data
  // the consumer's stream (None: the legacy default stream) waits for loom's
  // current stream, with no host synchronization. A dl_device other than the
  // data's, or a stream for host data, is a BufferError.
  py::capsule dlpack(const py::object& stream, const py::object& max_version, const py::object& dl_device,
                     const py::object& copy) const {
    if (!dl_device.is_none()) {
      const auto want = dl_device.cast<std::pair<std::int32_t, std::int32_t>>();
      if (want.first != device_.device_type || want.second != device_.device_id)
        throw py::buffer_error("loom: __dlpack__: the tensor is on DLPack device (" +
                               std::to_string(device_.device_type) + ", " + std::to_string(device_.device_id) +
                               "); loom does not copy it to device (" + std::to_string(want.first) + ", " +
                               std::to_string(want.second) + ")");
    }
    if (device_.device_type == dl::cpu) {
      if (!stream.is_none()) throw py::buffer_error("loom: __dlpack__: host data takes stream=None");
    } else {
      loom::dlpack::make_ready_for(stream.is_none() ? 1 : stream.cast<std::intptr_t>());
    }
    const bool versioned = !max_version.is_none() && max_version.cast<py::tuple>()[0].cast<int>() >= 1;
    return lend_(versioned, !copy.is_none() && copy.cast<bool>());
  }

  // __dlpack_device__(): (device type, device id) of the data, as DLPack codes
  // (1 for the host, 2 or 13 for CUDA device or managed memory).
  [[nodiscard]] py::tuple dlpack_device() const { return py::make_tuple(device_.device_type, device_.device_id); }
  [[nodiscard]] const std::vector<std::int64_t>& shape() const { return shape_; }
  [[nodiscard]] const std::string& dtype() const { return dtype_; }

 private:
  template <class T, std::size_t Rank, class Space>
  static py::capsule lend(const loom::view<T, Rank, Space>& v, const std::shared_ptr<const void>& keep, bool versioned,
                          bool copy) {
    if (copy) {
      auto c = loom::contiguous(v);  // enqueued on the current stream
      if (!versioned) return to_capsule(loom::to_dlpack_legacy(std::move(c)));
      dl::managed_tensor_versioned* m = loom::to_dlpack(std::move(c));
      m->flags |= dl::flag_is_copied;
      return to_capsule(m);
    }
    if (versioned) return to_capsule(loom::to_dlpack(v, keep));
    if constexpr (std::is_const_v<T>)
      throw py::buffer_error(
          "loom: __dlpack__: read-only data is lent as versioned DLPack only (max_version (1, 0) or later)");
    else
      return to_capsule(loom::to_dlpack_legacy(v, keep));
  }

  std::vector<std::int64_t> shape_;
  std::string dtype_;
  dl::dl_device device_{};
  std::function<py::capsule(bool versioned, bool copy)> lend_;
};

// Adds the class of dlpack_object to module `m`, as `name`.
inline void bind_dlpack_object(py::module_& m, const char* name) {
  py::class_<dlpack_object>(m, name, "a loom tensor that torch.from_dlpack and numpy.from_dlpack take without a copy")
      .def("__dlpack__", &dlpack_object::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &dlpack_object::dlpack_device)
      .def_property_readonly("shape", [](const dlpack_object& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", &dlpack_object::dtype);
}
}  // namespace loom_python
