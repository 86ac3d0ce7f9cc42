// SPDX-License-Identifier: Apache-2.0
// Per-row fp8 quantization of bf16 on the host executor,
//     quantize_rows(q, s, x):  s = row_max(abs(x)) / 448,  q = e4m3(saturate(x / s))
// (4096 x 4096 bf16; q e4m3, s one float per row) as one loom call (one row
// kernel), against a hand-written OpenMP loop over the rows (the amax, then
// the quantized row) using the same scalar conversion. Target (issue 34):
// loom >= 0.9x the hand loop. Both results are compared bit for bit with a
// plain serial loop before they are timed. Wall time, median of several runs
// after a warm-up run; GB/s = bytes that must move (x read, q and s written)
// / time.
// Usage: bench_quantize_cpu [--quick] [--json FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include <loom/loom.hpp>

#include "../bench_util.hpp"

namespace {
using loom::index_t;

// One row: its amax, then each value divided by the scale, clamped and rounded.
void quantize_row(const loom::bf16* x, loom::e4m3* q, float* s, index_t cols) {
  float amax = 0;
  for (index_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(static_cast<float>(x[c])));
  const float scale = amax == 0.0f ? 1.0f : amax / 448.0f;
  *s = scale;
  for (index_t c = 0; c < cols; ++c) {
    const float v = std::clamp(static_cast<float>(x[c]) / scale, -448.0f, 448.0f);
    q[c] = loom::detail::to_float8<loom::e4m3>(v, false);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const auto opt = loom_bench::options::parse(argc, argv);
  const index_t rows = opt.quick ? 257 : 4096, cols = opt.quick ? 1023 : 4096, n = rows * cols;
  const int warmup = 1, runs = opt.quick ? 1 : 7;
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  std::mt19937_64 g(34);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  loom::host_tensor<loom::bf16, 2> x({rows, cols});
  for (index_t i = 0; i < n; ++i) x.data()[i] = loom::bf16(dist(g) * (1 + i / cols % 7));
  loom::host_tensor<loom::e4m3, 2> q({rows, cols}), q_ref({rows, cols});
  loom::host_tensor<float, 2> s({rows, 1}), s_ref({rows, 1});
  for (index_t r = 0; r < rows; ++r) quantize_row(x.data() + r * cols, q_ref.data() + r * cols, s_ref.data() + r, cols);
  const double bytes = static_cast<double>(n) * (2 + 1) + static_cast<double>(rows) * 4;

  bool failed = false;
  auto check = [&]() -> std::string {
    const bool same = std::memcmp(q.data(), q_ref.data(), static_cast<std::size_t>(n)) == 0 &&
                      std::memcmp(s.data(), s_ref.data(), static_cast<std::size_t>(rows) * sizeof(float)) == 0;
    return same ? "ok" : "codes or scales differ from the serial loop";
  };
  auto measure = [&](const char* impl, auto&& f) {
    std::memset(static_cast<void*>(q.data()), 0x5a, static_cast<std::size_t>(n));
    std::fill(s.data(), s.data() + rows, std::nanf(""));
    f();
    loom_bench::record rec{"bench_quantize_cpu", "quantize_rows<e4m3>(bf16)", shape, "bf16", impl};
    rec.check = check();
    rec.bytes = bytes;
    rec.threads = loom::host_threads();
    return loom_bench::report_timed(rec, warmup, runs, f, opt.json_path, failed);
  };

  std::printf("bench_quantize_cpu: host executor, %d threads; median of %d runs after %d warm-up\n",
              loom::host_threads(), runs, warmup);
  loom_bench::print_header();
  const double fused = measure("loom", [&] { loom::quantize_rows(q, s, x); });
  const double hand = measure("hand loop (OpenMP)", [&] {
    const loom::bf16* px = x.data();
    loom::e4m3* pq = q.data();
    float* ps = s.data();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (index_t r = 0; r < rows; ++r) quantize_row(px + r * cols, pq + r * cols, ps + r, cols);
  });
  std::printf("  loom / hand loop speed: %.2fx (target >= 0.9x)\n", hand / fused);
  if (failed) std::printf("FAIL: a result differs from the serial loop\n");
  return failed ? 1 : 0;
}
