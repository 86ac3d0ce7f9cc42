// SPDX-License-Identifier: Apache-2.0
// RMSNorm + SwiGLU as a PyTorch op: the loom layer, its gradient by
// loom::grad, and the wrapping of torch tensors as loom views. Shared by the
// CPU kernels (rms_swiglu_ops.cpp, any C++ compiler) and the CUDA kernels
// (rms_swiglu_cuda.cu, nvcc), which differ only in the memory space.
#pragma once

#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <loom/exec/assign.hpp>
#include <loom/grad/grad.hpp>
#include <loom/interop/dlpack.hpp>
#include <loom/nn/layer.hpp>
#include <loom/ops/activations.hpp>
#include <loom/ops/arithmetic.hpp>
#include <loom/ops/math.hpp>

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace loom_torch {

// y = silu(gate) * x * rsqrt(mean(x^2) + eps) * weight, along the last axis of
// x [rows, width]; weight [width]; gate [rows, width]; eps a scalar. One row
// kernel forward; dx, dweight and dgate in 2 kernels backward (one row kernel
// writes dx, dgate and dweight's partial column sums, a second adds those).
constexpr auto rms_swiglu = loom::layer([](auto x, auto weight, auto gate, auto eps) {
  return loom::silu(gate) * (x * loom::rsqrt(loom::row_mean(x * x) + eps) * weight);
});

// A torch tensor as a loom view of its memory, through DLPack: torch exports
// the tensor (a new reference to it, no copy), and loom checks the dtype,
// rank, device and alignment with its own `loom:` messages and views the
// memory with the tensor's strides (in elements: any layout). The returned
// dlpack_tensor holds torch's reference until it goes. Inputs are exported
// read-only (torch then reads them without materializing a copy-on-write
// tensor) and so are viewed with const elements; outputs writable. `name`
// ("input weight") is in every message of the import's checks.
template <class T, std::size_t Rank, class Space>
loom::dlpack_tensor<const T, Rank, Space> borrow_input(const at::Tensor& t, const char* name) {
  return loom::from_dlpack<const T, Rank, Space>(
      reinterpret_cast<loom::dlpack::managed_tensor_versioned*>(at::toDLPackVersionedReadOnly(t)), name);
}
template <class T, std::size_t Rank, class Space>
loom::dlpack_tensor<T, Rank, Space> borrow_output(const at::Tensor& t, const char* name) {
  return loom::from_dlpack<T, Rank, Space>(
      reinterpret_cast<loom::dlpack::managed_tensor_versioned*>(at::toDLPackVersioned(t)), name);
}

// A new row-major tensor of t's shape, dtype and device, from torch's allocator.
inline at::Tensor empty_contiguous(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}

// The scalar type eps takes in the layer: double for double tensors, float otherwise.
template <class T>
using eps_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// What the tests inspect: the data pointers of the loom views that the last
// call of `op` ("forward", "backward") ran on, inputs then outputs.
void record_views(const std::string& op, std::vector<std::int64_t> data_pointers);
std::vector<std::int64_t> recorded_views(const std::string& op);
inline std::int64_t pointer_of(const auto& borrowed) { return reinterpret_cast<std::int64_t>(borrowed.data()); }

template <class T, class Space>
at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& gate, double eps) {
  auto y = empty_contiguous(x);
  const auto xv = borrow_input<T, 2, Space>(x, "input x");
  const auto wv = borrow_input<T, 1, Space>(weight, "input weight");
  const auto gv = borrow_input<T, 2, Space>(gate, "input gate");
  const auto yv = borrow_output<T, 2, Space>(y, "output y");
  auto out = yv.view();
  out = rms_swiglu(xv.view(), wv.view(), gv.view(), static_cast<eps_t<T>>(eps));
  record_views("forward", {pointer_of(xv), pointer_of(wv), pointer_of(gv), pointer_of(yv)});
  return y;
}

template <class T, class Space>
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& x, const at::Tensor& weight,
                                                        const at::Tensor& gate, const at::Tensor& dy, double eps) {
  auto dx = empty_contiguous(x), dweight = empty_contiguous(weight), dgate = empty_contiguous(gate);
  const auto xv = borrow_input<T, 2, Space>(x, "input x");
  const auto wv = borrow_input<T, 1, Space>(weight, "input weight");
  const auto gv = borrow_input<T, 2, Space>(gate, "input gate");
  const auto dyv = borrow_input<T, 2, Space>(dy, "input dy");
  const auto dxv = borrow_output<T, 2, Space>(dx, "output dx");
  const auto dwv = borrow_output<T, 1, Space>(dweight, "output dweight");
  const auto dgv = borrow_output<T, 2, Space>(dgate, "output dgate");
  auto dx_out = dxv.view();
  auto dw_out = dwv.view();
  auto dg_out = dgv.view();
  loom::grad<0, 1, 2>(rms_swiglu)(xv.view(), wv.view(), gv.view(), static_cast<eps_t<T>>(eps), dyv.view())
      .into(dx_out, dw_out, dg_out);
  record_views("backward", {pointer_of(xv), pointer_of(wv), pointer_of(gv), pointer_of(dyv), pointer_of(dxv),
                            pointer_of(dwv), pointer_of(dgv)});
  return {dx, dweight, dgate};
}

// Calls f.template operator()<T>() for the element type of x (float32,
// float64, bfloat16 or float16: loom computes the last two in float); any
// other is a loom::dtype_error naming it.
template <class F>
decltype(auto) dispatch(const at::Tensor& x, F&& f) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return f.template operator()<float>();
    case at::kDouble:
      return f.template operator()<double>();
    case at::kBFloat16:
      return f.template operator()<loom::bf16>();
    case at::kHalf:
      return f.template operator()<loom::half>();
    default: {
      const auto dl = at::getDLDataType(x);
      const auto d = loom::dlpack::dtype_from(reinterpret_cast<const loom::dlpack::dl_data_type&>(dl));
      throw loom::dtype_error(std::string("loom: rms_swiglu: x holds ") +
                              (d ? std::string(loom::dtype_name(*d)) : std::string(c10::toString(x.scalar_type()))) +
                              "; this op takes float32, float64, bfloat16 or float16 tensors");
    }
  }
}

// Runs f, turning loom's exceptions into torch's, so that Python sees loom's
// message as TypeError (dtype), ValueError (shape, value) or RuntimeError.
template <class F>
decltype(auto) with_torch_errors(F&& f) {
  try {
    return f();
  } catch (const loom::dtype_error& e) {
    TORCH_CHECK_TYPE(false, e.what());
  } catch (const loom::shape_error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  } catch (const loom::value_error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  } catch (const loom::error& e) {
    TORCH_CHECK(false, e.what());
  }
}

// The op's kernels for one memory space (loom::host or loom::device).
template <class Space>
at::Tensor forward_op(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& gate, double eps) {
  return with_torch_errors(
      [&] { return dispatch(x, [&]<class T>() { return forward<T, Space>(x, weight, gate, eps); }); });
}

template <class Space>
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(const at::Tensor& x, const at::Tensor& weight,
                                                           const at::Tensor& gate, const at::Tensor& dy, double eps) {
  return with_torch_errors(
      [&] { return dispatch(x, [&]<class T>() { return backward<T, Space>(x, weight, gate, dy, eps); }); });
}

}  // namespace loom_torch
