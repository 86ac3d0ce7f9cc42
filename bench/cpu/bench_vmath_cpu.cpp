// SPDX-License-Identifier: Apache-2.0
// Host transcendentals: y = op(x) over a 4096 x 4096 float tensor on the host
// executor, for tanh, exp, gelu (tanh form), gelu (erf form), silu, sigmoid,
// log1p, sin and pow; the median of `reps` runs after a warm-up, one line per
// case: "<case> <ms>". bench/cpu/vmath_vs_torch.py compiles it with default
// flags (no -march: the host loops pick the CPU's width at run time) and sets
// it beside PyTorch eager in one interleaved run. Not part of the library.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include <loom/loom.hpp>

#include "../bench_util.hpp"

int main(int argc, char** argv) {
  // bench_vmath_cpu CASE REPS [N]
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s tanh|exp|gelu_tanh|gelu|silu|sigmoid|log1p|sin|pow|all REPS [N]\n", argv[0]);
    return 2;
  }
  const std::string which = argv[1];
  const int reps = std::atoi(argv[2]);
  const loom::index_t n = argc > 3 ? std::atoll(argv[3]) : 4096;
  auto x = loom::host_tensor<float, 2>({n, n});
  auto y = loom::host_tensor<float, 2>({n, n});
  std::mt19937_64 g(42);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (loom::index_t i = 0; i < x.size(); ++i) x.data()[i] = d(g);
  auto run = [&](const char* name, auto&& assign) {
    if (which != "all" && which != name) return;
    std::printf("%s %.3f\n", name, loom_bench::median_ms(1, reps, assign));
  };
  run("tanh", [&] { y = loom::tanh(x); });
  run("exp", [&] { y = loom::exp(x); });
  run("gelu_tanh", [&] { y = loom::gelu(x, loom::approximate::tanh); });
  run("gelu", [&] { y = loom::gelu(x); });
  run("silu", [&] { y = loom::silu(x); });
  run("sigmoid", [&] { y = loom::sigmoid(x); });
  run("log1p", [&] { y = loom::log1p(loom::abs(x)); });
  run("sin", [&] { y = loom::sin(x); });
  run("pow", [&] { y = loom::pow(loom::abs(x), 1.7f); });
#if __has_include(<loom/core/simd/dispatch.hpp>)  // also builds against a loom without it, to compare
  std::fprintf(stderr, "host SIMD: %s, %d threads\n", loom::simd::name(loom::simd::host_isa()), loom::host_threads());
#endif
  return 0;
}
