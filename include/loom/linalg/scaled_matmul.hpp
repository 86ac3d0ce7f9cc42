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
#include "loom/core/float8.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/bound.hpp"
#include "loom/linalg/cublas.hpp"
#include "loom/ops/math.hpp"
#include "loom/reduce/api.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! The element type of scaled_matmul's C operand for output type D: float
//! for a float D, bf16 for a bf16 or fp8 D. cuBLASLt's FP8 type table
//! (cuBLAS documentation, cublasLtMatmul, "When A, B, C, and D Use Layouts
//! for FP8") pairs a bf16 C with bf16, e4m3 and e5m2 outputs and a float C
//! with a float output.
template <class D>
using scaled_matmul_c_t = std::conditional_t<std::is_same_v<D, float>, float, bf16>;

//! The optional parts of a scaled_matmul with output type D in space S.
template <class D, class S>
struct scaled_matmul_extras {
  view<const bf16, 1, S> bias{};  //!< [N] added to every row (in cuBLASLt's epilogue; bf16, the bias type of
                                  //!< cuBLASLt's FP8 table for every loom output type), or empty: none
  bool gelu = false;              //!< GELU, tanh approximation (cuBLASLt's epilogue), after the bias
  float alpha = 1;                //!< multiplies the product (with the scales)
  view<float, 1, S> amax{};       //!< one element that receives max |D| (fp8 D: before d_scale), or empty
  view<const scaled_matmul_c_t<D>, 2, S> c{};  //!< [M, N] added as beta * c_scale * C before the bias, or empty
  float beta = 1;                              //!< multiplies C (with c_scale)
  view<const float, 1, S> c_scale{};           //!< one element multiplying C, or empty: 1
  view<const float, 1, S> d_scale{};           //!< fp8 D only: one element multiplying D before the conversion
};

namespace detail::fp8mm {
template <class T>
constexpr cudaDataType_t fp8_type() {
  return std::is_same_v<T, e4m3> ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}
template <class T>
inline constexpr bool is_fp8_output = std::is_same_v<T, e4m3> || std::is_same_v<T, e5m2>;
LOOM_HD float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + math::tanh(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}
template <class S, class V>
void require_one(const V& v, const char* what) {
  if (v.size() != 1)
    throw shape_error(std::string("loom: scaled_matmul needs ") + what + " of one element, got shape " +
                      shape_string(v.extents()));
}

// cuBLASLt's order (cuBLAS documentation, "Tensorwide Scaling For FP8 Data
// Types"): t = epilogue(alpha sa sb A B + beta sc C + bias), amax = max |t|,
// D = d_scale t, over the decoded fp8 values with float accumulation in k
// order: the reference the device path is checked against. An fp8 D takes
// the saturating conversion (round to nearest even, out-of-range values to
// the largest finite one); its amax is of t, NaN-propagating.
template <class A, class B, class D>
void host_scaled_gemm(const view<const A, 2, host>& a, float sa, const view<const B, 2, host>& b, float sb,
                      const view<D, 2, host>& d, const scaled_matmul_extras<D, host>& x) {
  const index_t m = d.extent(0), n = d.extent(1), k = a.extent(1);
  const float scale = x.alpha * sa * sb;
  const float c_factor = x.beta * (x.c_scale.data() ? x.c_scale.data()[0] : 1.0f);
  const float d_scale = x.d_scale.data() ? x.d_scale.data()[0] : 1.0f;
  float amax = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      float acc = 0;
      for (index_t l = 0; l < k; ++l)
        acc += static_cast<float>(a.data()[i * a.stride(0) + l * a.stride(1)]) *
               static_cast<float>(b.data()[l * b.stride(0) + j * b.stride(1)]);
      float v = scale * acc;
      if (x.c.data()) v += c_factor * static_cast<float>(x.c.data()[i * x.c.stride(0) + j * x.c.stride(1)]);
      if (x.bias.data()) v += static_cast<float>(x.bias.data()[j * x.bias.stride(0)]);
      if (x.gelu) v = gelu_tanh(v);
      D& out = d.data()[i * d.stride(0) + j * d.stride(1)];
      if constexpr (is_fp8_output<D>) {
        if (!std::isnan(amax) && !(std::fabs(v) <= amax)) amax = std::fabs(v);
        out = detail::to_float8<D>(d_scale * v, true);
      } else {
        out = convert<D>(v);
      }
    }
  if constexpr (is_fp8_output<D>)
    if (x.amax.data()) x.amax.data()[0] = amax;
  count_host_launch();
}

// The checks both executors share: shapes, one-element scales, which
// options the output type allows, and C's overlap with D.
template <class D, class A, class B, class S>
void check_args(const view<D, 2, S>& d, const view<const A, 2, S>& a, const view<const float, 1, S>& a_scale,
                const view<const B, 2, S>& b, const view<const float, 1, S>& b_scale,
                const scaled_matmul_extras<D, S>& extras) {
  const index_t m = a.extent(0), k = a.extent(1), n = b.extent(1);
  if (b.extent(0) != k || d.extent(0) != m || d.extent(1) != n)
    throw shape_error("loom: scaled_matmul of shapes " + shape_string(a.extents()) + " and " +
                      shape_string(b.extents()) + " into " + shape_string(d.extents()) +
                      ": the inner extents or the output's shape differ");
  if (extras.bias.data() && extras.bias.extent(0) != n)
    throw shape_error("loom: scaled_matmul's bias has shape " + shape_string(extras.bias.extents()) + ", expected [" +
                      std::to_string(n) + "]");
  if (extras.c.data() && extras.c.extents() != d.extents())
    throw shape_error("loom: scaled_matmul's c has shape " + shape_string(extras.c.extents()) + ", expected " +
                      shape_string(d.extents()) + " (the output's)");
  require_one<S>(a_scale, "a_scale");
  require_one<S>(b_scale, "b_scale");
  if (extras.amax.data()) require_one<S>(extras.amax, "amax");
  if (extras.c_scale.data()) {
    if (!extras.c.data()) throw value_error("loom: scaled_matmul got c_scale without c");
    require_one<S>(extras.c_scale, "c_scale");
  }
  if (extras.d_scale.data()) {
    if constexpr (!is_fp8_output<D>)
      throw value_error(
          "loom: scaled_matmul's d_scale applies to fp8 outputs only (cuBLASLt rejects a D scale for a bf16 or "
          "float D); fold it into alpha");
    require_one<S>(extras.d_scale, "d_scale");
  }
  if (extras.c.data() && may_overlap(extras.c, d)) {
    // cuBLASLt computes in place only with C == D and the same layout
    // (cuBLAS documentation, cublasLtMatmul), which needs C's type to be D's.
    const bool in_place = std::is_same_v<scaled_matmul_c_t<D>, D> &&
                    static_cast<const void*>(extras.c.data()) == static_cast<const void*>(d.data()) &&
                    extras.c.strides() == d.strides();
    if (!in_place)
      throw aliasing_error("loom: scaled_matmul's c overlaps the output d; c may only be d itself (same elements and "
                           "strides, in place)");
  }
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
  static_assert(std::is_same_v<D, bf16> || std::is_same_v<D, float> || is_fp8_output<D>,
                "loom: scaled_matmul writes bf16, float, e4m3 or e5m2");
  static_assert(!std::is_same_v<D, e5m2> || !std::is_same_v<A, B>,
                "loom: scaled_matmul writes e5m2 only from one e4m3 and one e5m2 operand (cuBLASLt's FP8 table has "
                "no e4m3 x e4m3 -> e5m2 kernel); write e4m3, bf16 or float");
  check_args(d, a, a_scale, b, b_scale, extras);
  if constexpr (std::is_same_v<S, host>) {
    detail::fp8mm::host_scaled_gemm(a, a_scale.data()[0], b, b_scale.data()[0], d, extras);
  } else {
#if LOOM_CUDA_COMPILER
    const index_t m = a.extent(0), k = a.extent(1), n = b.extent(1);
    const auto bad = [&](const std::string& why) {
      throw value_error("loom: scaled_matmul on the GPU (a " + shape_string(a.extents()) + " strides " +
                        shape_string(a.strides()) + ", b " + shape_string(b.extents()) + " strides " +
                        shape_string(b.strides()) + ", d strides " + shape_string(d.strides()) + "): " + why);
    };
    using C = scaled_matmul_c_t<D>;
    const bool has_c = extras.c.data() != nullptr;
    if (a.stride(1) != 1 || b.stride(0) != 1 || d.stride(1) != 1 || (has_c && extras.c.stride(1) != 1))
      bad("cuBLASLt's fp8 kernels need rows of a and columns of b contiguous along K (b = w.t() of a [N, K] "
          "tensor) and d and c row-major");
    if (k % 16 != 0 || a.stride(0) % 16 != 0 || b.stride(1) % 16 != 0 ||
        (d.stride(0) * static_cast<index_t>(sizeof(D))) % 16 != 0 ||
        (has_c && (extras.c.stride(0) * static_cast<index_t>(sizeof(C))) % 16 != 0))
      bad("cuBLASLt's fp8 kernels need K and the leading dimensions to be multiples of 16 bytes");
    const stream_ref s = current_stream();
    detail::lt_call call;
    call.device = s.device();
    call.stream = s.get();
    call.compute = CUBLAS_COMPUTE_32F;
    call.scale_type = CUDA_R_32F;
    // Row-major D is column-major D^T = B^T A^T: cuBLASLt's A is b's memory
    // (K x N column-major, transposed: the "TN" form fp8 requires), its B is
    // a's memory (K x M column-major). C is row-major like D.
    call.ab_type = detail::fp8mm::fp8_type<B>();
    call.b_type = detail::fp8mm::fp8_type<A>();
    call.b_type_differs = true;
    if constexpr (is_fp8_output<D>) {
      call.cd_type = detail::fp8mm::fp8_type<D>();
      call.c_type = CUDA_R_16BF;
      call.d_scale = extras.d_scale.data();
      call.amax_d = extras.amax.data();
    } else {
      call.cd_type = std::is_same_v<D, bf16> ? CUDA_R_16BF : CUDA_R_32F;
    }
    call.a = {b.data(), CUBLAS_OP_T, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n), b.stride(1), 0};
    call.b = {a.data(), CUBLAS_OP_N, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(m), a.stride(0), 0};
    call.a_scale = b_scale.data();
    call.b_scale = a_scale.data();
    call.m = static_cast<std::uint64_t>(n);
    call.n = static_cast<std::uint64_t>(m);
    call.k = static_cast<std::uint64_t>(k);
    call.ldd = d.stride(0);
    call.d = d.data();
    if (has_c) {
      call.c = extras.c.data();
      call.ldc = extras.c.stride(0);
      call.beta = extras.beta;
      call.c_scale = extras.c_scale.data();
    }
    call.alpha = extras.alpha;
    call.bias = extras.bias.data();
    if (call.bias && !std::is_same_v<D, bf16>) call.bias_type = CUDA_R_16BF;
    if (extras.bias.data() && extras.bias.stride(0) != 1) bad("the bias must be contiguous");
    call.epilogue = extras.gelu ? (call.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                : (call.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    if (m > 0 && n > 0) {
      detail::lt_matmul(call);
    } else if constexpr (is_fp8_output<D>) {
      // No product to run: the amax of an empty D is 0, as on the host.
      if (extras.amax.data()) LOOM_CUDA_CHECK(cudaMemsetAsync(extras.amax.data(), 0, sizeof(float), s.get()));
    }
#else
    detail::require_cuda_compiler_for<S>();
#endif
  }
  // cuBLASLt's AMAX_D is defined for fp8 outputs (the FP8 scaling section);
  // a bf16 or float D gets loom's reduction over the stored D.
  if constexpr (!is_fp8_output<D>)
    if (extras.amax.data()) loom::assign(extras.amax, loom::max(loom::abs(d)));
}
}  // namespace detail::fp8mm

//! D = d_scale * epilogue(alpha * a_scale * b_scale * (A @ B) + beta * c_scale * C
//! + bias) for fp8 operands: A [M, K] and B [K, N] of e4m3 or e5m2 (not both
//! e5m2), per-tensor scales `a_scale` and `b_scale` (float tensors of one
//! element, in the operands' space: read by the GPU, no sync), D [M, N] of
//! bf16, float, e4m3 or e5m2 (e5m2 only from one e4m3 and one e5m2 operand:
//! cuBLASLt's FP8 type table). With `extras`: C [M, N]
//! (scaled_matmul_c_t<D>: float for a float D, bf16 otherwise) with beta and
//! c_scale, a bf16 bias [N] and GELU (tanh) in the epilogue, alpha, d_scale
//! (fp8 D only; the result is multiplied by it, then converted with
//! saturation), and `amax` receiving max |D| (for an fp8 D, of the values
//! before d_scale and the conversion). C may be D itself (in place), no
//! other overlap.
//! Device: one cublasLtMatmul on the fp8 tensor cores (Hopper and newer),
//! which also writes the amax of an fp8 D; a bf16 or float D's amax is
//! loom's max(abs(D)) reduction and a one-element copy. cuBLASLt's fp8
//! kernels take A with rows of K contiguous and B with columns of K
//! contiguous (B = w.t() of a row-major weight w [N, K], nn.Linear's layout),
//! C and D row-major, and K and the leading dimensions multiples of 16
//! bytes; anything else throws value_error saying so. Host: a reference loop
//! over the decoded values (float accumulation), any strides.
//! Operands are tensors or views (of const elements or not).
//! Example: `scaled_matmul(y8, x8, sx, w8.t(), sw, {.bias = b, .amax = amax, .d_scale = sy});`
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
