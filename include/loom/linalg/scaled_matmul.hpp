// SPDX-License-Identifier: Apache-2.0
#pragma once

// fp8 matrix products with per-tensor scales: cuBLASLt's fp8 tensor-core
// GEMM on the device, a reference loop over the same quantized values on the
// host.

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/bound.hpp"
#include "loom/linalg/cublas.hpp"
#include "loom/ops/math.hpp"
#include "loom/reduce/reduce.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! The optional parts of a scaled_matmul with output type D in space S.
template <class D, class S>
struct scaled_matmul_extras {
  view<const bf16, 1, S> bias{};  //!< [N] added to every row (in cuBLASLt's epilogue; bf16, as cuBLASLt's fp8
                                  //!< kernels take it for bf16 and float outputs), or empty: none
  bool gelu = false;              //!< GELU, tanh approximation (cuBLASLt's epilogue), after the bias
  float alpha = 1;                //!< multiplies the product (with the scales)
  view<float, 1, S> amax{};       //!< one element that receives max |D|, or empty: not computed
};

namespace detail::fp8mm {
template <class T>
constexpr cudaDataType_t fp8_type() {
  return std::is_same_v<T, e4m3> ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}
LOOM_HD float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + math::tanh(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}
template <class S, class V>
void require_one(const V& v, const char* what) {
  if (v.size() != 1)
    throw shape_error(std::string("loom: scaled_matmul needs ") + what + " of one element, got shape " +
                      shape_string(v.extents()));
}

// D = epilogue(alpha sa sb A B + bias) over the decoded fp8 values, float
// accumulation in k order: the reference the device path is checked against.
template <class A, class B, class D>
void host_scaled_gemm(const view<const A, 2, host>& a, float sa, const view<const B, 2, host>& b, float sb,
                      const view<D, 2, host>& d, const scaled_matmul_extras<D, host>& x) {
  const index_t m = d.extent(0), n = d.extent(1), k = a.extent(1);
  const float scale = x.alpha * sa * sb;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      float acc = 0;
      for (index_t l = 0; l < k; ++l)
        acc += static_cast<float>(a.data()[i * a.stride(0) + l * a.stride(1)]) *
               static_cast<float>(b.data()[l * b.stride(0) + j * b.stride(1)]);
      float v = scale * acc;
      if (x.bias.data()) v += static_cast<float>(x.bias.data()[j * x.bias.stride(0)]);
      if (x.gelu) v = gelu_tanh(v);
      d.data()[i * d.stride(0) + j * d.stride(1)] = convert<D>(v);
    }
  count_host_launch();
}

// scaled_matmul on views (see below).
template <class D, class A, class B, class S>
void run(const view<D, 2, S>& d, const view<const A, 2, S>& a, const view<const float, 1, S>& a_scale,
         const view<const B, 2, S>& b, const view<const float, 1, S>& b_scale,
         const scaled_matmul_extras<D, S>& extras = {}) {
  static_assert(
      (std::is_same_v<A, e4m3> || std::is_same_v<A, e5m2>)&&(std::is_same_v<B, e4m3> || std::is_same_v<B, e5m2>)&&!(
          std::is_same_v<A, e5m2> && std::is_same_v<B, e5m2>),
      "loom: scaled_matmul multiplies e4m3 or e5m2 operands (not both e5m2: cuBLASLt has no such kernel)");
  static_assert(std::is_same_v<D, bf16> || std::is_same_v<D, float>, "loom: scaled_matmul writes bf16 or float");
  const index_t m = a.extent(0), k = a.extent(1), n = b.extent(1);
  if (b.extent(0) != k || d.extent(0) != m || d.extent(1) != n)
    throw shape_error("loom: scaled_matmul of shapes " + shape_string(a.extents()) + " and " +
                      shape_string(b.extents()) + " into " + shape_string(d.extents()) +
                      ": the inner extents or the output's shape differ");
  if (extras.bias.data() && extras.bias.extent(0) != n)
    throw shape_error("loom: scaled_matmul's bias has shape " + shape_string(extras.bias.extents()) + ", expected [" +
                      std::to_string(n) + "]");
  detail::fp8mm::require_one<S>(a_scale, "a_scale");
  detail::fp8mm::require_one<S>(b_scale, "b_scale");
  if (extras.amax.data()) detail::fp8mm::require_one<S>(extras.amax, "amax");
  if constexpr (std::is_same_v<S, host>) {
    detail::fp8mm::host_scaled_gemm(a, a_scale.data()[0], b, b_scale.data()[0], d, extras);
  } else {
#if LOOM_CUDA_COMPILER
    const auto bad = [&](const std::string& why) {
      throw value_error("loom: scaled_matmul on the GPU (a " + shape_string(a.extents()) + " strides " +
                        shape_string(a.strides()) + ", b " + shape_string(b.extents()) + " strides " +
                        shape_string(b.strides()) + ", d strides " + shape_string(d.strides()) + "): " + why);
    };
    if (a.stride(1) != 1 || b.stride(0) != 1 || d.stride(1) != 1)
      bad("cuBLASLt's fp8 kernels need rows of a and columns of b contiguous along K (b = w.t() of a [N, K] "
          "tensor) and d row-major");
    if (k % 16 != 0 || a.stride(0) % 16 != 0 || b.stride(1) % 16 != 0)
      bad("cuBLASLt's fp8 kernels need K and the leading dimensions to be multiples of 16");
    const stream_ref s = current_stream();
    detail::lt_call call;
    call.device = s.device();
    call.stream = s.get();
    call.compute = CUBLAS_COMPUTE_32F;
    call.scale_type = CUDA_R_32F;
    // Row-major D is column-major D^T = B^T A^T: cuBLASLt's A is b's memory
    // (K x N column-major, transposed: the "TN" form fp8 requires), its B is
    // a's memory (K x M column-major).
    call.ab_type = detail::fp8mm::fp8_type<B>();
    call.b_type = detail::fp8mm::fp8_type<A>();
    call.b_type_differs = true;
    call.cd_type = std::is_same_v<D, bf16> ? CUDA_R_16BF : CUDA_R_32F;
    call.a = {b.data(), CUBLAS_OP_T, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n), b.stride(1), 0};
    call.b = {a.data(), CUBLAS_OP_N, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(m), a.stride(0), 0};
    call.a_scale = b_scale.data();
    call.b_scale = a_scale.data();
    call.m = static_cast<std::uint64_t>(n);
    call.n = static_cast<std::uint64_t>(m);
    call.k = static_cast<std::uint64_t>(k);
    call.ldd = d.stride(0);
    call.d = d.data();
    call.alpha = extras.alpha;
    call.bias = extras.bias.data();
    if (call.bias && std::is_same_v<D, float>) call.bias_type = CUDA_R_16BF;
    if (extras.bias.data() && extras.bias.stride(0) != 1) bad("the bias must be contiguous");
    call.epilogue = extras.gelu ? (call.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                : (call.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    if (m > 0 && n > 0) detail::lt_matmul(call);
#else
    detail::require_cuda_compiler_for<S>();
#endif
  }
  if (extras.amax.data()) loom::assign(extras.amax, loom::max(loom::abs(d)));
}
}  // namespace detail::fp8mm

//! D = epilogue(alpha * a_scale * b_scale * (A @ B) + bias) for fp8 operands:
//! A [M, K] and B [K, N] of e4m3 or e5m2 (not both e5m2), per-tensor scales
//! `a_scale` and `b_scale` (float tensors of one element, in the operands'
//! space: read by the GPU, no sync), D [M, N] of bf16 or float. With
//! `extras`: a bf16 bias [N] and GELU (tanh) in the epilogue, alpha,
//! and `amax` receiving max |D|.
//! Device: one cublasLtMatmul on the fp8 tensor cores (Hopper and newer),
//! plus loom's max(abs(D)) reduction and a one-element copy when `amax` is
//! asked for. cuBLASLt's fp8 kernels take A with rows of K contiguous and B
//! with columns of K contiguous (B = w.t() of a row-major weight w [N, K],
//! nn.Linear's layout), D row-major, and K and the leading dimensions
//! multiples of 16; anything else throws value_error saying so. Host: a
//! reference loop over the decoded values (float accumulation), any strides.
//! Operands are tensors or views (of const elements or not).
//! Example: `scaled_matmul(y, x8, sx, w8.t(), sw, {.bias = b, .gelu = true});`
template <class DV, class AV, class SA, class BV, class SB,
          class D = typename decltype(detail::as_view(std::declval<DV&>()))::value_type,
          class S = typename decltype(detail::as_view(std::declval<DV&>()))::space>
void scaled_matmul(DV&& d, const AV& a, const SA& a_scale, const BV& b, const SB& b_scale,
                   const scaled_matmul_extras<D, S>& extras = {}) {
  const auto av = detail::as_view(a);
  const auto bv = detail::as_view(b);
  using A = typename decltype(av)::value_type;
  using B = typename decltype(bv)::value_type;
  detail::fp8mm::run(detail::as_view(d), view<const A, 2, S>(av), view<const float, 1, S>(detail::as_view(a_scale)),
                     view<const B, 2, S>(bv), view<const float, 1, S>(detail::as_view(b_scale)), extras);
}
}  // namespace loom
