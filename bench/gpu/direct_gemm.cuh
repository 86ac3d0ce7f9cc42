// SPDX-License-Identifier: Apache-2.0
// The reference the GPU benchmarks time loom's products against: one
// cublasLtMatmul written out by hand, the heuristic asked once, the
// workspace allocated once. Row-major D [M, N] = A [M, K] B is computed as
// column-major D^T = B^T A^T. B is row-major [K, N], or with b_rows_are_n
// row-major [N, K] read transposed (the "TN" form cuBLASLt's fp8 kernels
// take, with per-tensor scale pointers for A and B; an fp8 D takes D's scale
// and cuBLASLt's amax of D, with a bf16 C layout as cuBLASLt's FP8 table asks).
#pragma once

#include <cublasLt.h>

#include <utility>

#include <loom/loom.hpp>

namespace loom_bench {
template <class T>
constexpr cudaDataType_t lt_type() {
  if constexpr (std::is_same_v<T, loom::e4m3>)
    return CUDA_R_8F_E4M3;
  else if constexpr (std::is_same_v<T, loom::e5m2>)
    return CUDA_R_8F_E5M2;
  else
    return loom::detail::linalg::cuda_type<T>();
}

template <class TA, class TB = TA, class TD = TA>
struct direct_gemm {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
  void* ws = nullptr;
  const TA* a;
  const TB* b;
  TD* d;
  int m, n, k;
  static constexpr bool fp8_d = std::is_same_v<TD, loom::e4m3> || std::is_same_v<TD, loom::e5m2>;

  direct_gemm(const TA* a_, const TB* b_, TD* d_, int m_, int n_, int k_, bool tf32, bool b_rows_are_n = false,
              const float* a_scale = nullptr, const float* b_scale = nullptr, const float* d_scale = nullptr,
              float* amax_d = nullptr)
      : a(a_), b(b_), d(d_), m(m_), n(n_), k(k_) {
    LOOM_CUBLAS_CHECK(cublasLtCreate(&h));
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescCreate(&op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (b_rows_are_n) {
      const std::int32_t t = CUBLAS_OP_T;
      LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
      LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, lt_type<TB>(), k, n, k));  // B [N, K]: K x N, transposed
    } else {
      LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, lt_type<TB>(), n, k, n));  // B^T, column-major
    }
    // cuBLASLt's A is B's memory, its B is A's: the scales swap places too.
    const std::pair<cublasLtMatmulDescAttributes_t, const void*> pointers[] = {
        {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b_scale},
        {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale},
        {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale},
        {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_d}};
    for (const auto& [attribute, pointer] : pointers)
      if (pointer) LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &pointer, sizeof(pointer)));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, lt_type<TA>(), k, m, k));  // A^T
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, lt_type<TD>(), n, m, n));  // D^T
    if (fp8_d) LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n));  // C^T, unread
    cublasLtMatmulPreference_t pref = nullptr;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t max_ws = loom::detail::lt_max_workspace;
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
    int found = 0;
    LOOM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, fp8_d ? lc : ld, ld, pref, 1, &algo, &found));
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw loom::error("bench: no cuBLASLt algorithm");
    if (algo.workspaceSize) LOOM_CUDA_CHECK(cudaMalloc(&ws, algo.workspaceSize));
  }
  direct_gemm(const direct_gemm&) = delete;
  direct_gemm& operator=(const direct_gemm&) = delete;
  ~direct_gemm() {
    (void)cudaFree(ws);
    (void)cublasLtMatrixLayoutDestroy(la);
    (void)cublasLtMatrixLayoutDestroy(lb);
    if (lc) (void)cublasLtMatrixLayoutDestroy(lc);
    (void)cublasLtMatrixLayoutDestroy(ld);
    (void)cublasLtMatmulDescDestroy(op);
    (void)cublasLtDestroy(h);
  }
  void operator()() const {
    const float one = 1, zero = 0;
    // beta is 0: C is not read (an fp8 D has a bf16 C layout and a null C).
    LOOM_CUBLAS_CHECK(cublasLtMatmul(h, op, &one, b, la, a, lb, &zero, fp8_d ? nullptr : d, fp8_d ? lc : ld, d, ld,
                                     &algo.algo, ws, algo.workspaceSize, loom::current_stream().get()));
  }
};
}  // namespace loom_bench
