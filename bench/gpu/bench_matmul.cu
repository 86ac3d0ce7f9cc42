// SPDX-License-Identifier: Apache-2.0
// loom's matrix products against cuBLASLt called directly, on the shapes that
// matter: 4096^3 and an LLM MLP projection (8192x4096 by 4096x14336), in bf16,
// half and float with TF32. Also the fused linear + bias + GELU(tanh) (one
// call) against the same work in two steps (bare GEMM, then one elementwise
// kernel), which is what eager PyTorch does. CUDA events after warm-up,
// median of many runs. Without a GPU it says so and exits 0.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include <loom/loom.hpp>

using namespace loom;

namespace {
constexpr int warmup = 10;
constexpr int runs = 50;

template <class F>
double median_ms(F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<float> t;
  event start, stop;
  for (int i = 0; i < runs; ++i) {
    start.record();
    f();
    stop.record();
    stop.synchronize();
    t.push_back(elapsed_ms(start, stop));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The reference: one cublasLtMatmul written out by hand (row-major D = A B as
// column-major D^T = B^T A^T), heuristic asked once, workspace allocated once.
template <class T>
struct direct_gemm {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
  void* ws = nullptr;
  const T *a, *b;
  T* d;
  int m, n, k;

  direct_gemm(const T* a_, const T* b_, T* d_, int m_, int n_, int k_, bool tf32) : a(a_), b(b_), d(d_), m(m_), n(n_), k(k_) {
    const cudaDataType_t type = detail::cuda_type<T>();
    LOOM_CUBLAS_CHECK(cublasLtCreate(&h));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, type, n, k, n));  // B^T, column-major
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, type, k, m, k));  // A^T
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, type, n, m, n));  // D^T
    cublasLtMatmulPreference_t pref = nullptr;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t max_ws = detail::lt_max_workspace;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                           sizeof(max_ws)));
    int found = 0;
    LOOM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &algo, &found));
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw error("bench: no cuBLASLt algorithm");
    if (algo.workspaceSize) LOOM_CUDA_CHECK(cudaMalloc(&ws, algo.workspaceSize));
  }
  ~direct_gemm() {
    (void)cudaFree(ws);
    (void)cublasLtMatrixLayoutDestroy(la);
    (void)cublasLtMatrixLayoutDestroy(lb);
    (void)cublasLtMatrixLayoutDestroy(ld);
    (void)cublasLtMatmulDescDestroy(op);
    (void)cublasLtDestroy(h);
  }
  void operator()() const {
    const float one = 1, zero = 0;
    LOOM_CUBLAS_CHECK(cublasLtMatmul(h, op, &one, b, la, a, lb, &zero, d, ld, d, ld, &algo.algo, ws,
                                     algo.workspaceSize, current_stream().get()));
  }
};

template <class T>
void bench(const char* name, index_t m, index_t k, index_t n) {
  const bool tf32 = std::is_same_v<T, float>;
  auto a = zeros<T, 2>({m, k});
  auto b = zeros<T, 2>({k, n});
  auto bias = zeros<T, 1>({n});
  tensor<T, 2> y({m, n});
  fill(a, T(0.01f));
  fill(b, T(0.02f));
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const matmul_options opt{.allow_tf32 = tf32};

  const direct_gemm<T> direct(a.data(), b.data(), y.data(), static_cast<int>(m), static_cast<int>(n),
                              static_cast<int>(k), tf32);
  const double t_direct = median_ms([&] { direct(); });
  const double t_loom = median_ms([&] { y = matmul(a, b, opt); });
  const double t_fused = median_ms([&] { y = gelu(matmul(a, b, opt) + bias, approximate::tanh); });
  const double t_two = median_ms([&] {
    y = matmul(a, b, opt);
    y = gelu(y + bias, approximate::tanh);
  });
  std::printf("%-6s %5lldx%5lldx%5lld  cuBLASLt %8.3f ms (%6.1f TFLOP/s)  loom %8.3f ms (%+5.1f%%)  "
              "linear+bias+gelu: fused %8.3f ms, two steps %8.3f ms\n",
              name, static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), t_direct,
              flops / t_direct * 1e-9, t_loom, (t_loom / t_direct - 1) * 100, t_fused, t_two);
}
}  // namespace

int main() {
  if (!gpu::is_available()) {
    std::printf("bench_matmul: no GPU (%s); nothing to measure\n", gpu::unavailable_reason().c_str());
    return 0;
  }
  std::printf("bench_matmul on %s; median of %d runs after %d warm-up runs\n", gpu::properties().name.c_str(), runs,
              warmup);
  for (auto [m, k, n] : {std::array<index_t, 3>{4096, 4096, 4096}, std::array<index_t, 3>{8192, 4096, 14336}}) {
    bench<bf16>("bf16", m, k, n);
    bench<half>("half", m, k, n);
    bench<float>("tf32", m, k, n);
  }
  return 0;
}
