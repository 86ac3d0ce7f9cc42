// SPDX-License-Identifier: Apache-2.0
// Fused bias + dropout + residual on the host executor,
//     y = dropout(x + b, 0.1, seed, step) + r      (4096 x 4096 floats, b a row)
// as one loom assignment, against a hand-written OpenMP loop that draws the
// same mask from loom::philox4x32_10 (one block per four elements), and op
// by op (x + b, then dropout, then + r: three passes and two temporaries, as
// an eager library runs it). Targets (issue 33): fused >= 0.9x the hand loop;
// op by op for scale. Every result is checked against a double reference
// that draws the mask element by element before it is timed. Wall time,
// median of several runs after a warm-up run; GB/s = bytes that must move
// (x and r read, y written) / time.
// Usage: bench_dropout_cpu [--quick] [--json FILE]
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <loom/loom.hpp>

#include "../bench_util.hpp"

namespace {
using loom::index_t;


// The 32 random bits of element i of stream (seed, step), as docs/09_random.md defines them.
std::uint32_t bits_of(std::uint64_t seed, std::uint64_t step, std::uint64_t i) {
  const std::uint64_t blk = i / 4;
  const loom::philox_words w =
      loom::philox4x32_10({{static_cast<std::uint32_t>(blk), static_cast<std::uint32_t>(blk >> 32),
                            static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32)}},
                          static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return w.w[i % 4];
}
}  // namespace

int main(int argc, char** argv) {
  const auto opt = loom_bench::options::parse(argc, argv);
  const index_t rows = opt.quick ? 257 : 4096, cols = opt.quick ? 1023 : 4096, n = rows * cols;
  const int warmup = 1, runs = opt.quick ? 1 : 7;
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  const float p = 0.1f, scale = 1.0f / (1.0f - p);
  const std::uint64_t seed = 2026, step = 33;
  std::mt19937_64 g(33);
  loom::host_tensor<float, 2> x({rows, cols}), r({rows, cols}), y({rows, cols});
  loom::host_tensor<float, 1> b({cols});
  for (index_t i = 0; i < n; ++i)
    x.data()[i] = loom_bench::nonzero_value(g), r.data()[i] = loom_bench::nonzero_value(g);
  for (index_t j = 0; j < cols; ++j) b.data()[j] = loom_bench::nonzero_value(g);
  const double bytes = 3.0 * static_cast<double>(n) * sizeof(float);

  bool failed = false;
  auto check = [&] {
    loom_bench::error_meter m{1e-6, 1e-6};
    for (index_t i = 0; i < n; ++i) {
      const bool drop = (bits_of(seed, step, static_cast<std::uint64_t>(i)) >> 8) * 0x1p-24 < p;
      const double pre = static_cast<double>(x.data()[i]) + b.data()[i % cols];
      m.add(y.data()[i], (drop ? 0.0 : pre * scale) + r.data()[i]);
    }
    return m.verdict();
  };
  auto measure = [&](const char* impl, auto&& f) {
    for (index_t i = 0; i < n; ++i) y.data()[i] = std::nanf("");
    f();
    loom_bench::record rec{"bench_dropout_cpu", "dropout(x+b,0.1)+r", shape, "f32", impl};
    rec.check = check();
    rec.bytes = bytes;
    rec.threads = loom::host_threads();
    return loom_bench::report_timed(rec, warmup, runs, f, opt.json_path, failed);
  };

  std::printf("bench_dropout_cpu: host executor, %d threads; median of %d runs after %d warm-up\n",
              loom::host_threads(), runs, warmup);
  loom_bench::print_header();
  const double fused = measure("loom fused", [&] { y = loom::dropout(x + b, p, seed, step) + r; });
  const auto before = loom::launches().host;
  y = loom::dropout(x + b, p, seed, step) + r;
  if (loom::launches().host != before + 1) {
    std::printf("FAIL: the fused assignment took %llu host launches\n",
                static_cast<unsigned long long>(loom::launches().host - before));
    return 1;
  }
  const double eager = measure("loom op by op", [&] {
    auto biased = loom::materialize(x + b);
    auto dropped = loom::materialize(loom::dropout(biased, p, seed, step));
    y = dropped + r;
  });
  const double hand = measure("hand loop (OpenMP)", [&] {
    const float *px = x.data(), *pr = r.data(), *pb = b.data();
    float* py = y.data();
    const index_t blocks = (n + 3) / 4;
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (index_t k = 0; k < blocks; ++k) {
      const auto blk = static_cast<std::uint64_t>(k);
      const loom::philox_words w =
          loom::philox4x32_10({{static_cast<std::uint32_t>(blk), static_cast<std::uint32_t>(blk >> 32),
                                static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32)}},
                              static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
      for (index_t lane = 0; lane < 4 && 4 * k + lane < n; ++lane) {
        const index_t i = 4 * k + lane;
        const bool drop = loom::uniform_from_bits(w.w[lane]) < p;
        py[i] = (px[i] + pb[i % cols]) * (drop ? 0.0f : scale) + pr[i];
      }
    }
  });
  std::printf("  fused / hand loop speed: %.2fx (target >= 0.9x); fused / op by op: %.2fx\n", hand / fused,
              eager / fused);
  if (failed) std::printf("FAIL: a result differs from its double reference\n");
  return failed ? 1 : 0;
}
