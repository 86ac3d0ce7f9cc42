// SPDX-License-Identifier: Apache-2.0
// loom's matrix products against cuBLASLt called directly, on the shapes that
// matter: 4096^3 and an LLM MLP projection (8192x4096 by 4096x14336), in bf16,
// half and float with TF32. Also the fused linear + bias + GELU(tanh) (one
// call) against the same work in two steps (bare GEMM, then one elementwise
// kernel), which is what eager PyTorch does. CUDA events after warm-up,
// median of many runs. Inputs are random, never zero (the hash of
// gpu_bench.cuh: a constant or zero matrix runs faster than real data), and
// every result (cuBLASLt's, loom's, fused and in two steps) is checked on 64
// sampled elements against a double dot product computed on the host; a
// mismatch prints FAIL and the exit status is 1. Without a GPU it says so
// and exits 0. `bench_matmul --self-test` checks the checks on the host
// executor (a ctest entry).
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <loom/loom.hpp>

#include "direct_gemm.cuh"
#include "gpu_bench.cuh"

using namespace loom;

namespace {
bool any_failed = false;
constexpr int warmup = 10;
constexpr int runs = 50;

// Warm-up: at least `warmup` calls and 100 ms of them (an idle GPU's clocks
// ramp up under load), then the median of `runs` timed calls.
template <class F>
double median_ms(F&& f) {
  loom_bench::warm_up_for(100.0, warmup, f);
  event start, stop;
  std::vector<float> t;
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

double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))); }

// Checks 64 elements of y (m x n) against a double reference of a b (+ bias,
// then GELU(tanh) when `act`), with the inputs as the device stored them.
// Bound: the output's rounding (twice: the two-step form rounds the product
// first) plus 8 standard deviations of independent rounding errors: TF32's
// inputs rounded to 10 bits (2^-10 sqrt(sum p_k^2)) and the fp32
// accumulation (2^-24 sqrt(k) sum |p_k|). A statistical bound, not a worst
// case: the worst case, 2^-10 sum |p_k|, is about 5 at k = 4096, and a result
// without its bias (+-[0.25, 2)) would pass it; this one is about 0.9 for
// TF32 and 0.2 for bf16/half (plus the output's rounding). With TF32 a
// result without its bias fails on 15 of the 64 samples at 4096^3 (half of
// them are negative, where GELU is about 0; a Python replay of the hash),
// and one failure fails the run.
template <class T>
std::string check_gemm(const host_tensor<T, 2>& h, index_t m, index_t k, index_t n, bool act) {
  const double u_out = std::is_same_v<T, float> ? 0x1p-24 : std::is_same_v<T, half> ? 0x1p-11 : 0x1p-8;
  const double u_in = std::is_same_v<T, float> ? 0x1p-10 : 0.0;
  for (int s = 0; s < 64; ++s) {
    const auto i = static_cast<index_t>((static_cast<std::uint64_t>(s) * 0x9E3779B97F4A7C15ull >> 20) % m);
    const auto j = static_cast<index_t>((static_cast<std::uint64_t>(s) * 0xBF58476D1CE4E5B9ull >> 20) % n);
    double want = 0, mag = 0, sq = 0;
    for (index_t q = 0; q < k; ++q) {
      const double p = static_cast<double>(loom_bench::hashed<T>(31, static_cast<std::uint64_t>(i * k + q))) *
                       loom_bench::hashed<T>(32, static_cast<std::uint64_t>(q * n + j));
      want += p;
      mag += std::fabs(p);
      sq += p * p;
    }
    double tol = 8 * (u_in * std::sqrt(sq) + 0x1p-24 * std::sqrt(static_cast<double>(k)) * mag) +
                 2 * u_out * std::fabs(want);
    if (act) {
      want = gelu_tanh(want + loom_bench::hashed<T>(33, static_cast<std::uint64_t>(j)));
      tol = 1.2 * tol + 2 * u_out * std::fabs(want);  // GELU's slope is at most about 1.13
    }
    const double got = static_cast<double>(static_cast<float>(h.data()[i * n + j]));
    if (!(std::fabs(got - want) <= tol)) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "FAIL (y[%lld, %lld] = %.6g, want %.6g)", static_cast<long long>(i),
                    static_cast<long long>(j), got, want);
      any_failed = true;
      return buf;
    }
  }
  return "ok";
}

template <class T>
void bench(const char* name, index_t m, index_t k, index_t n) {
  const bool tf32 = std::is_same_v<T, float>;
  tensor<T, 2> a({m, k}), b({k, n}), y({m, n});
  tensor<T, 1> bias({n});
  loom_bench::hash_fill(a, 31);
  loom_bench::hash_fill(b, 32);
  loom_bench::hash_fill(bias, 33);
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const matmul_options opt{.allow_tf32 = tf32};

  const loom_bench::direct_gemm<T> direct(a.data(), b.data(), y.data(), static_cast<int>(m), static_cast<int>(n),
                              static_cast<int>(k), tf32);
  // Each result is checked once before its timing: y poisoned first, and
  // every allocation loom makes during that first call filled with 0xFF (NaN).
  auto first = [&](auto&& f) {
    loom_bench::poison(y);
    set_fill_uninitialized(true);
    try {
      f();
    } catch (...) {
      set_fill_uninitialized(false);
      throw;
    }
    set_fill_uninitialized(false);
  };
  first([&] { direct(); });
  const std::string c_direct = check_gemm(to_host(y), m, k, n, false);
  const double t_direct = median_ms([&] { direct(); });
  auto plain = [&] { y = matmul(a, b, opt); };
  auto fused = [&] { y = gelu(matmul(a, b, opt) + bias, approximate::tanh); };
  auto two = [&] {
    y = matmul(a, b, opt);
    y = gelu(y + bias, approximate::tanh);
  };
  first(plain);
  const std::string c_loom = check_gemm(to_host(y), m, k, n, false);
  const double t_loom = median_ms(plain);
  first(fused);
  const std::string c_fused = check_gemm(to_host(y), m, k, n, true);
  const double t_fused = median_ms(fused);
  first(two);
  const std::string c_two = check_gemm(to_host(y), m, k, n, true);
  const double t_two = median_ms(two);
  std::printf("%-6s %5lldx%5lldx%5lld  cuBLASLt %8.3f ms (%6.1f TFLOP/s)  loom %8.3f ms (%+5.1f%%)  "
              "linear+bias+gelu: fused %8.3f ms, two steps %8.3f ms  check: cuBLASLt %s, loom %s, fused %s, "
              "two steps %s\n",
              name, static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), t_direct,
              flops / t_direct * 1e-9, t_loom, (t_loom / t_direct - 1) * 100, t_fused, t_two, c_direct.c_str(),
              c_loom.c_str(), c_fused.c_str(), c_two.c_str());
  std::fflush(stdout);
}
// --self-test: the references and tolerances against the host executor (no
// GPU): loom's host matmul, plain and fused, must pass check_gemm; the same
// result with one sampled element off by 1 (one product term's worth), and
// the fused form without its bias, must fail it.
template <class T>
bool self_test(const char* name) {
  const index_t m = 67, k = 257, n = 129;
  host_tensor<T, 2> a({m, k}), b({k, n});
  host_tensor<T, 1> bias({n});
  loom_bench::hash_fill(a, 31);
  loom_bench::hash_fill(b, 32);
  loom_bench::hash_fill(bias, 33);
  host_tensor<T, 2> y({m, n});
  y = matmul(a, b);
  const std::string plain = check_gemm(y, m, k, n, false);
  y(0, 0) = T(static_cast<float>(y(0, 0)) + 1.0f);  // sample 0 is element (0, 0)
  const bool before = any_failed;
  const std::string off = check_gemm(y, m, k, n, false);  // meant to fail: not a failure of the run
  any_failed = before;
  y = gelu(matmul(a, b), approximate::tanh);
  const std::string no_bias = check_gemm(y, m, k, n, true);  // meant to fail too
  any_failed = before;
  y = gelu(matmul(a, b) + bias, approximate::tanh);
  const std::string fused = check_gemm(y, m, k, n, true);
  const bool ok = plain == "ok" && fused == "ok" && off != "ok" && no_bias != "ok";
  std::printf("bench_matmul --self-test %-5s %lldx%lldx%lld: plain %s, fused %s; one element off by 1: %s; "
              "fused without the bias: %s -> %s\n",
              name, static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), plain.c_str(),
              fused.c_str(), off.c_str(), no_bias.c_str(), ok ? "ok" : "FAIL");
  any_failed = any_failed || !ok;
  return ok;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--self-test") {
    try {
      self_test<bf16>("bf16");
      self_test<half>("half");
      self_test<float>("float");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_matmul --self-test: %s\n", e.what());
      return 1;
    }
    return any_failed ? 1 : 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s [--self-test]\n", argv[0]);
    return 2;
  }
  if (!gpu::is_available()) {
    std::printf("bench_matmul: no GPU (%s); nothing to measure\n", gpu::unavailable_reason().c_str());
    return 0;
  }
  std::printf("bench_matmul on %s; median of %d runs after %d warm-up runs\n", gpu::properties().name.c_str(), runs,
              warmup);
  try {
    for (auto [m, k, n] : {std::array<index_t, 3>{4096, 4096, 4096}, std::array<index_t, 3>{8192, 4096, 14336}}) {
      bench<bf16>("bf16", m, k, n);
      bench<half>("half", m, k, n);
      bench<float>("tf32", m, k, n);
    }
  } catch (const std::exception& e) {  // loom::error, and thrust's and the standard library's
    std::fprintf(stderr, "bench_matmul: %s\n", e.what());
    return 1;
  }
  if (any_failed) {
    std::printf("FAIL: a result differs from its double reference\n");
    return 1;
  }
  return 0;
}
