// SPDX-License-Identifier: Apache-2.0
// A shared library with C functions around loom::to_dlpack and
// loom::from_dlpack, loaded by test_numpy_dlpack.py through ctypes: what a
// Python binding of loom does, without a binding library. It exports float32
// tensors (element (i, j) = 1000 i + j) and imports float64 rank-2 tensors,
// holding them until shim_release().
#include <cstdint>
#include <cstdio>
#include <optional>
#include <utility>

#include <loom/exec/assign.hpp>
#include <loom/interop/dlpack.hpp>
#include <loom/ops/arithmetic.hpp>

namespace {
int live_exports = 0;

// Kept alive with each export: counts the exports whose deleter has not run.
struct live_token {
  live_token() { ++live_exports; }
  live_token(live_token&&) noexcept { ++live_exports; }
  live_token& operator=(live_token&&) = delete;
  ~live_token() { --live_exports; }
};

std::optional<loom::dlpack_tensor<const double, 2, loom::host>> held_const;
std::optional<loom::dlpack_tensor<double, 2, loom::host>> held_mutable;

loom::view<const double, 2, loom::host> held_view() {
  return held_mutable ? loom::view<const double, 2, loom::host>(held_mutable->view()) : held_const->view();
}

// Runs `f`; returns 0, or 1 with loom's message in `error`.
template <class F>
int catching(char* error, std::size_t error_size, F f) {
  try {
    f();
    return 0;
  } catch (const loom::error& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}
}  // namespace

extern "C" {
//! A new rows x cols float32 host tensor, exported (transposed: as its
//! transpose; read_only: as a view of const elements; legacy: as the
//! unversioned struct). Returns the managed tensor.
void* shim_export(std::int64_t rows, std::int64_t cols, int transposed, int read_only, int legacy) {
  loom::host_tensor<float, 2> t({rows, cols});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) t(i, j) = static_cast<float>(1000 * i + j);
  const auto v = transposed ? t.t() : t.view();
  auto keep = std::pair(std::move(t), live_token());
  if (legacy) return loom::to_dlpack_legacy(v, std::move(keep));
  if (read_only) return loom::to_dlpack(loom::view<const float, 2, loom::host>(v), std::move(keep));
  return loom::to_dlpack(v, std::move(keep));
}

//! Exports whose deleter has not run yet.
int shim_live_exports() { return live_exports; }

//! Imports a float64 rank-2 managed tensor (writable: with mutable elements)
//! and holds it. Returns 0, or 1 with loom's message in `error`; either way
//! the managed tensor is loom's from the call on.
int shim_import(void* managed, int legacy, int writable, char* error, std::size_t error_size) {
  return catching(error, error_size, [&] {
    if (writable && legacy)
      held_mutable = loom::from_dlpack<double, 2, loom::host>(static_cast<loom::dlpack::managed_tensor*>(managed));
    else if (writable)
      held_mutable =
          loom::from_dlpack<double, 2, loom::host>(static_cast<loom::dlpack::managed_tensor_versioned*>(managed));
    else if (legacy)
      held_const = loom::from_dlpack<const double, 2, loom::host>(static_cast<loom::dlpack::managed_tensor*>(managed));
    else
      held_const =
          loom::from_dlpack<const double, 2, loom::host>(static_cast<loom::dlpack::managed_tensor_versioned*>(managed));
  });
}

//! Imports a managed tensor as float32 rank 2 (to check loom's error).
int shim_import_float32(void* managed, char* error, std::size_t error_size) {
  return catching(error, error_size, [&] {
    (void)loom::from_dlpack<float, 2, loom::host>(static_cast<loom::dlpack::managed_tensor_versioned*>(managed));
  });
}

//! The held tensor's first element and extents.
const void* shim_held_data() { return held_view().data(); }
std::int64_t shim_held_extent(int axis) { return held_view().extent(static_cast<std::size_t>(axis)); }

//! Copies the held tensor's elements, read through its strides, row-major into `out`.
void shim_held_copy(double* out) {
  const auto v = held_view();
  for (loom::index_t i = 0; i < v.size(); ++i) out[i] = v.data()[v.offset_of(i)];
}

//! Doubles the held writable tensor's elements in place: one loom assignment on the host.
void shim_held_double() {
  auto v = held_mutable->view();
  v = v * 2.0;
}

//! Drops the held tensor: loom calls the producer's deleter.
void shim_release() {
  held_const.reset();
  held_mutable.reset();
}
}
