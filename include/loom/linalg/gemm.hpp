// SPDX-License-Identifier: Apache-2.0
#pragma once

// Running the GEMM of a plan: cuBLASLt on the device (layouts, batch
// strides, the epilogue), the blocked host GEMM on the host.

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/linalg/cublas.hpp"
#include "loom/linalg/host_gemm.hpp"
#include "loom/linalg/info.hpp"
#include "loom/linalg/plan.hpp"
#include "loom/memory/memory.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::linalg {
// One batch stride for axes [0, n) of a strided operand, when there is one.
inline bool uniform_batch_stride(const index_t* ext, const index_t* st, std::size_t n, index_t& stride) {
  stride = 0;
  bool have = false;
  index_t expect = 0;
  for (std::size_t d = n; d-- > 0;) {
    if (ext[d] == 1) continue;
    if (have && st[d] != expect) return false;
    if (!have) stride = st[d];
    have = true;
    expect = st[d] * ext[d];
  }
  return true;
}

template <class T>
constexpr cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>)
    return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>)
    return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, half>)
    return CUDA_R_16F;
  else
    return CUDA_R_16BF;
}

// The column-major cuBLASLt form of X^T for a row-major-indexed matrix X
// (r x c, strides sr, sc): X's memory read column-major is X^T when X is
// row-major (op N) and X when X is column-major (op T, giving X^T).
inline lt_matrix lt_transposed(const void* p, index_t r, index_t c, index_t sr, index_t sc, const char* name,
                               const std::string& shape_s, const std::string& strides_s) {
  lt_matrix m;
  m.p = p;
  if ((c == 1 || sc == 1) && (r == 1 || sr >= std::max<index_t>(c, 1))) {
    m.op = CUBLAS_OP_N;
    m.rows = static_cast<std::uint64_t>(c);
    m.cols = static_cast<std::uint64_t>(r);
    m.ld = r == 1 ? std::max<index_t>(c, 1) : sr;
  } else if ((r == 1 || sr == 1) && (c == 1 || sc >= std::max<index_t>(r, 1))) {
    m.op = CUBLAS_OP_T;
    m.rows = static_cast<std::uint64_t>(r);
    m.cols = static_cast<std::uint64_t>(c);
    m.ld = c == 1 ? std::max<index_t>(r, 1) : sc;
  } else {
    throw value_error(std::string("loom: matmul operand ") + name + " (shape " + shape_s + ", strides " + strides_s +
                      ") is not a layout cuBLASLt takes: one of its two matrix axes must have stride 1 and the other "
                      "a stride of at least the first's extent; copy it first with loom::contiguous(x)");
  }
  return m;
}

#if LOOM_CUDA_COMPILER
// D (rank R, batch axes [0, R-2)) = epilogue(A B) with one cublasLtMatmul.
// Row-major D is column-major D^T, and D^T = B^T A^T: so cuBLASLt's "A" is
// B's memory and its "B" is A's; the m x n column-major result is N x M.
// The bias epilogue adds bias[i] to row i of that column-major result, i.e.
// to column i of the row-major D: exactly a row bias of length N.
template <class T, class O, std::size_t R>
void device_gemm(view<const T, R, device> a, view<const T, R, device> b, view<O, R, device> d, const O* c,
                 const O* bias, double alpha, double beta, matmul_activation act, bool allow_tf32, stream_ref s) {
  if (!row_major_matrix(d)) {
    // A column-major output: compute D^T = B^T A^T instead, whose output is row-major.
    const auto at = a.transpose(-1, -2);
    a = b.transpose(-1, -2);
    b = at;
    d = d.transpose(-1, -2);
  }
  const index_t m = d.extent(R - 2), n = d.extent(R - 1), k = a.extent(R - 1);
  if (!row_major_matrix(d))
    throw value_error("loom: the output of a matmul (shape " + shape_string(d.extents()) + ", strides " +
                      shape_string(d.strides()) +
                      ") is not a layout cuBLASLt takes: one matrix axis must have stride 1; assign into a tensor");
  index_t batch = 1;
  for (std::size_t i = 0; i + 2 < R; ++i) batch *= d.extent(i);
  constexpr index_t int_max = std::numeric_limits<std::int32_t>::max();
  if (m > int_max || n > int_max || k > int_max || batch > int_max)
    throw value_error("loom: matmul extents (batch " + std::to_string(batch) + ", m " + std::to_string(m) + ", n " +
                      std::to_string(n) + ", k " + std::to_string(k) + ") exceed cuBLASLt's 32-bit limits; split it");
  lt_call call;
  call.device = s.device();
  call.stream = s.get();
  call.ab_type = cuda_type<T>();
  call.cd_type = cuda_type<O>();
  if constexpr (std::is_same_v<T, double>) {
    call.compute = CUBLAS_COMPUTE_64F;
    call.scale_type = CUDA_R_64F;
  } else {
    call.compute = std::is_same_v<T, float> && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    call.scale_type = CUDA_R_32F;
  }
  call.a = lt_transposed(b.data(), k, n, b.stride(R - 2), b.stride(R - 1), "b", shape_string(b.extents()),
                         shape_string(b.strides()));
  call.b = lt_transposed(a.data(), m, k, a.stride(R - 2), a.stride(R - 1), "a", shape_string(a.extents()),
                         shape_string(a.strides()));
  call.m = static_cast<std::uint64_t>(n);
  call.n = static_cast<std::uint64_t>(m);
  call.k = static_cast<std::uint64_t>(k);
  call.ldd = m == 1 ? std::max<index_t>(n, 1) : d.stride(R - 2);
  call.batch = static_cast<std::int32_t>(batch);
  const auto batch_stride = [&](const auto& v, const char* name) {
    index_t st = 0;
    if (!uniform_batch_stride(d.extents().data(), v.strides().data(), R - 2, st))
      throw value_error(std::string("loom: the batch axes of matmul operand ") + name + " (shape " +
                        shape_string(v.extents()) + ", strides " + shape_string(v.strides()) +
                        " after broadcasting) have no single batch stride, which cuBLASLt needs; copy it first "
                        "with loom::contiguous(x) (a broadcast operand: loom::contiguous(x.broadcast_to(shape)))");
    return st;
  };
  call.b.batch_stride = batch_stride(a, "a");
  call.a.batch_stride = batch_stride(b, "b");
  call.d_batch_stride = batch_stride(d, "out");
  call.d = d.data();
  call.c = c;
  call.alpha = alpha;
  call.beta = c ? beta : 0.0;
  call.bias = bias;
  if (act == matmul_activation::relu)
    call.epilogue = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (act == matmul_activation::gelu_tanh)
    call.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  else
    call.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  lt_matmul(call);
}
#endif

// The GEMM of the plan: A and B broadcast to the output's batch shape, D the output at the product's rank.
template <class M, class O, std::size_t R, class S>
void run_gemm(const M& mm, const view<O, R, S>& d, const view<const O, R, S>& c, const view<const O, R, S>& bias,
              double alpha, double beta, matmul_activation act) {
  using T = typename M::value_type;
  shape<R> ea = d.extents(), eb = d.extents();
  ea[R - 1] = mm.a.extent(std::remove_cvref_t<decltype(mm.a)>::rank - 1);
  eb[R - 2] = ea[R - 1];
  const view<const T, R, S> a = mm.a.broadcast_to(ea);
  const view<const T, R, S> b = mm.b.broadcast_to(eb);
  if constexpr (std::is_same_v<S, host>) {
    host_gemm<T, O, R>(a, b, d, gemm_epilogue<O, R>{alpha, beta, c, bias, act});
  } else {
#if LOOM_CUDA_COMPILER
    device_gemm<T, O, R>(a, b, d, c.data(), bias.data(), alpha, beta, act, mm.options.allow_tf32, current_stream());
#endif
  }
}

}  // namespace loom::detail::linalg
