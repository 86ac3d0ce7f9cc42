// SPDX-License-Identifier: Apache-2.0
// A reduction over a fused expression on the host executor, sum(x * y + 1),
// against a hand-written loop and against op by op (a temporary for x * y + 1,
// then its sum): wall time, median of many runs after warm-up, and the
// bandwidth of the bytes that must move (two float inputs; the op-by-op form
// also writes and rereads the temporary). Usage: bench_reduce_cpu [elements]
#include <loom/loom.hpp>
#include <loom/reduce/reduce.hpp>

#include <algorithm>
#include <chrono>
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

  std::printf("sum(x * y + 1) over %lld floats (%.0f MB of inputs)\n", static_cast<long long>(n), mb);
  std::printf("  %-34s %9.3f ms  %7.2f GB/s  value %.6g\n", "loom sum(x * y + 1), fused", fused, mb / fused,
              loom_value);
  std::printf("  %-34s %9.3f ms  %7.2f GB/s  value %.6g\n", "hand loop, 1 thread, float acc", hand, mb / hand,
              hand_value);
  std::printf("  %-34s %9.3f ms  %7.2f GB/s  value %.6g\n", "hand loop, OpenMP, double acc", hand_omp,
              mb / hand_omp, omp_value);
  std::printf("  %-34s %9.3f ms  %7.2f GB/s\n", "op by op (temporary, then sum)", op_by_op, mb / op_by_op);
  return 0;
}
