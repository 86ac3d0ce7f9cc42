// SPDX-License-Identifier: Apache-2.0
// loom's device code in bf16 and half compiled the way PyTorch compiles its
// CUDA extensions: with __CUDA_NO_HALF_OPERATORS__,
// __CUDA_NO_HALF_CONVERSIONS__, __CUDA_NO_BFLOAT16_CONVERSIONS__ and
// __CUDA_NO_HALF2_OPERATORS__ defined (tests/interop/CMakeLists.txt sets
// them), which take the implicit conversions and operators of __half and
// __nv_bfloat16 away. Compiled only: a build error is the failure.
#include <loom/loom.hpp>

#if !defined(__CUDA_NO_HALF_CONVERSIONS__) || !defined(__CUDA_NO_BFLOAT16_CONVERSIONS__) || \
    !defined(__CUDA_NO_HALF_OPERATORS__) || !defined(__CUDA_NO_HALF2_OPERATORS__)
#error "compile this file with PyTorch's four __CUDA_NO_HALF*/BFLOAT16 definitions"
#endif

namespace torch_flags {
constexpr auto rms_swiglu = loom::layer([](auto x, auto w, auto gate) {
  return silu(gate) * (x * rsqrt(row_mean(x * x) + 1e-6) * w);
});

template <class T>
void every_path(loom::device_tensor<T, 2>& y, const loom::device_tensor<T, 2>& x, const loom::device_tensor<T, 1>& w,
                const loom::device_tensor<std::int64_t, 1>& target, loom::device_tensor<T, 1>& dw) {
  // Elementwise: casts, comparisons, where, scalars, random numbers.
  y = loom::gelu(x * w + 1.0f) + loom::cast<T>(x > 0.0f);
  y = loom::where(x > w, x, loom::cast<T>(loom::cast<float>(x) * 0.5f));
  y = loom::dropout(x + w, 0.1f, 7, 0);
  // Row layers and their backward passes.
  y = loom::softmax(x);
  y = loom::layer_norm(x, w, w, 1e-5);
  y = loom::rms_norm_backward_input(x, w, y, 1e-6);
  y = loom::cross_entropy_backward(x, target);
  // Reductions, scans, sort.
  loom::device_tensor<T, 1> s({x.extent(0)});
  s = loom::sum(x, 1);
  [[maybe_unused]] const auto total = loom::max(x);
  [[maybe_unused]] const auto where_max = loom::argmax(x, -1);
  y = loom::cumsum(x, 1);
  [[maybe_unused]] const auto running = loom::cummax(x, 0);
  [[maybe_unused]] const auto sorted = loom::sort(x, loom::sort_order::descending);
  // Matmul with an epilogue, and a derived gradient.
  y = loom::gelu(loom::matmul(x, y.t()) + w);
  loom::grad<0, 1>(rms_swiglu)(x, w, x, y).into(y, dw);
}

// half takes the same paths; its conversions on the ones that convert most.
void half_paths(loom::device_tensor<loom::half, 2>& y, const loom::device_tensor<loom::half, 2>& x,
                const loom::device_tensor<loom::half, 1>& w) {
  y = loom::gelu(x * w + 1.0f) + loom::cast<loom::half>(x > 0.0f);
  y = loom::rms_norm(x, w, 1e-6);
  [[maybe_unused]] const auto total = loom::sum(x);
}

template void every_path<loom::bf16>(loom::device_tensor<loom::bf16, 2>&, const loom::device_tensor<loom::bf16, 2>&,
                                     const loom::device_tensor<loom::bf16, 1>&,
                                     const loom::device_tensor<std::int64_t, 1>&, loom::device_tensor<loom::bf16, 1>&);
}  // namespace torch_flags
