// SPDX-License-Identifier: Apache-2.0
// A reduction over a fused expression on the host executor, sum(x * y + 1),
// against a hand-written loop and against op by op (a temporary for x * y + 1,
// then its sum): wall time, median of many runs after warm-up, and the
// bandwidth of the bytes that must move (two float inputs; the op-by-op form
// also writes and rereads the temporary). Each result is compared with a
// double reference: loom's (fused and op by op) must be within 32 u sum |t|
// of it (u = 2^-24: each term's rounding and a pairwise sum's), or the
// program prints FAIL and exits 1; the hand loops' errors are printed (a
// float accumulator stalls near 2^24). Usage: bench_reduce_cpu [elements]
#include <loom/loom.hpp>
#include <loom/reduce/reduce.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {
constexpr int warmup = 3;
constexpr int runs = 21;

template <class F>
double median_ms(F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

volatile float sink;  // keeps the optimizer from dropping a result
}  // namespace

int main(int argc, char** argv) {
  const loom::index_t n = argc > 1 ? std::atoll(argv[1]) : (loom::index_t{1} << 24);
  loom::host_tensor<float, 1> x({n}), y({n});
  std::mt19937 g(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (loom::index_t i = 0; i < n; ++i) x.data()[i] = d(g), y.data()[i] = d(g);
  const double mb = 2.0 * static_cast<double>(n) * sizeof(float) / 1e6;  // bytes that must move
  double want = 0, mag = 0;
  for (loom::index_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(x.data()[i]) * y.data()[i] + 1.0;
    want += t;
    mag += std::fabs(t);
  }
  const double tol = 32 * 0x1p-24 * mag;

  const double fused = median_ms([&] { sink = loom::item(loom::sum(x * y + 1.0f)); });
  const float loom_value = sink;
  // The hand loop: one thread, a plain float accumulator (what most code writes).
  const double hand = median_ms([&] {
    float s = 0;
    const float *a = x.data(), *b = y.data();
    for (loom::index_t i = 0; i < n; ++i) s += a[i] * b[i] + 1.0f;
    sink = s;
  });
  const float hand_value = sink;
  // The hand loop as a tuned one would be: OpenMP, double accumulator.
  const double hand_omp = median_ms([&] {
    double s = 0;
    const float *a = x.data(), *b = y.data();
#if LOOM_HAS_OPENMP
#pragma omp parallel for reduction(+ : s) schedule(static)
#endif
    for (loom::index_t i = 0; i < n; ++i) s += static_cast<double>(a[i] * b[i] + 1.0f);
    sink = static_cast<float>(s);
  });
  const float omp_value = sink;
  // Op by op: materialize x * y + 1 (one pass, a temporary), then sum it.
  const double op_by_op = median_ms([&] {
    auto t = loom::materialize(x * y + 1.0f);
    sink = loom::item(loom::sum(t));
  });
  const float op_value = sink;

  std::printf("sum(x * y + 1) over %lld floats (%.0f MB of inputs); double reference %.9g, loom's bound %.3g\n",
              static_cast<long long>(n), mb, want, tol);
  bool failed = false;
  auto row = [&](const char* what, double ms, float value, bool loom_result) {
    const double err = std::fabs(static_cast<double>(value) - want);
    const bool bad = loom_result && !(err <= tol);
    failed = failed || bad;
    std::printf("  %-34s %9.3f ms  %7.2f GB/s  value %.9g  error %.3g%s\n", what, ms, mb / ms, value, err,
                bad ? "  FAIL" : "");
  };
  row("loom sum(x * y + 1), fused", fused, loom_value, true);
  row("hand loop, 1 thread, float acc", hand, hand_value, false);
  row("hand loop, OpenMP, double acc", hand_omp, omp_value, false);
  row("op by op (temporary, then sum)", op_by_op, op_value, true);
  if (failed) std::printf("FAIL: a loom result is beyond its bound from the double reference\n");
  return failed ? 1 : 0;
}
