// SPDX-License-Identifier: Apache-2.0
// The extension's Python module. The ops themselves are torch ops
// (torch.ops.loom.*, registered in rms_swiglu_ops.cpp); this module adds what
// the tests inspect: what the last forward and backward saw (data pointers,
// kernels), and DLPack round trips between loom and torch through PyCapsules,
// with a counter of loom's exports whose deleter has not run.
#include <torch/extension.h>

#include <memory>
#include <optional>
#include <utility>

#include "rms_swiglu.hpp"

namespace {
namespace py = pybind11;
namespace dl = loom::dlpack;

constexpr const char* versioned_name = "dltensor_versioned";
constexpr const char* legacy_name = "dltensor";

int live_exports = 0;

// Kept alive with each export: the count goes down when its deleter runs.
std::shared_ptr<void> live_token() {
  ++live_exports;
  return {nullptr, [](std::nullptr_t) { --live_exports; }};
}

std::optional<loom::dlpack_tensor<float, 2, loom::host>> held;

// A capsule that no consumer renamed still owns its tensor: call the deleter.
void delete_unconsumed(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, versioned_name)) {
    auto* m = static_cast<dl::managed_tensor_versioned*>(PyCapsule_GetPointer(capsule, versioned_name));
    if (m->deleter) m->deleter(m);
  } else if (PyCapsule_IsValid(capsule, legacy_name)) {
    auto* m = static_cast<dl::managed_tensor*>(PyCapsule_GetPointer(capsule, legacy_name));
    if (m->deleter) m->deleter(m);
  }
}

py::dict as_dict(const loom_torch::call_record& r) {
  py::dict d;
  d["data_pointers"] = r.data_pointers;
  d["kernels"] = r.kernels;
  return d;
}

// A new rows x cols float32 loom tensor, element (i, j) = 1000 i + j, lent as a
// DLPack capsule (transposed: its transpose; versioned: DLPack 1.x, else the
// legacy struct).
py::object export_tensor(std::int64_t rows, std::int64_t cols, bool transposed, bool versioned) {
  loom::host_tensor<float, 2> t({rows, cols});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) t(i, j) = static_cast<float>(1000 * i + j);
  const auto v = transposed ? t.t() : t.view();
  auto keep = std::pair(std::move(t), live_token());
  void* managed = versioned ? static_cast<void*>(loom::to_dlpack(v, std::move(keep)))
                            : static_cast<void*>(loom::to_dlpack_legacy(v, std::move(keep)));
  return py::reinterpret_steal<py::object>(
      PyCapsule_New(managed, versioned ? versioned_name : legacy_name, delete_unconsumed));
}

// Takes a float32 rank-2 CPU tensor from a DLPack capsule (versioned or
// legacy), renamed "used_..." first as the protocol says, doubles it in place
// through loom's assignment and holds it until release_import(). Returns the
// data pointer, shape and strides loom sees. loom's refusals raise
// RuntimeError with loom's message (the tensor's deleter has run by then).
py::dict import_tensor(const py::capsule& capsule) {
  const std::string name = capsule.name() ? capsule.name() : "";
  if (name != versioned_name && name != legacy_name)
    throw py::value_error("expected an unused DLPack capsule, got one named '" + name + "'");
  void* managed = capsule.get_pointer();
  PyCapsule_SetName(capsule.ptr(), name == versioned_name ? "used_dltensor_versioned" : "used_dltensor");
  held.reset();
  if (name == versioned_name)
    held = loom::from_dlpack<float, 2, loom::host>(static_cast<dl::managed_tensor_versioned*>(managed));
  else
    held = loom::from_dlpack<float, 2, loom::host>(static_cast<dl::managed_tensor*>(managed));
  auto v = held->view();
  v = v * 2.0f;
  py::dict d;
  d["data"] = reinterpret_cast<std::int64_t>(held->data());
  d["shape"] = py::make_tuple(v.extents()[0], v.extents()[1]);
  d["strides"] = py::make_tuple(v.strides()[0], v.strides()[1]);
  return d;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "loom's RMSNorm + SwiGLU as torch ops (torch.ops.loom.*), and test helpers";
  m.def("last_forward", [] { return as_dict(loom_torch::forward_record()); },
        "data pointers (x, weight, gate, y) and kernels of the last forward");
  m.def("last_backward", [] { return as_dict(loom_torch::backward_record()); },
        "data pointers (x, weight, gate, dy, dx, dweight, dgate) and kernels of the last backward");
  m.def("export_tensor", &export_tensor, py::arg("rows"), py::arg("cols"), py::arg("transposed") = false,
        py::arg("versioned") = true);
  m.def("live_exports", [] { return live_exports; });
  m.def("import_tensor", &import_tensor);
  m.def("release_import", [] { held.reset(); });
}
