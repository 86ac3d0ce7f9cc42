// SPDX-License-Identifier: Apache-2.0
// float32 matrix products on the host executor, with both backends of the
// host GEMM: the BLAS loom::loom linked (when there is one) and loom's own
// kernel. Cases: square 4096 and 1024 products, the 4096 product with a fused
// bias + GELU(tanh) epilogue, and the two products of an MLP 784 -> 512 -> 10
// at batch 256 (bias + GELU, bias). Wall time, median of several runs after a
// warm-up, as ms and GFLOP/s; each result is checked against a double
// reference at sampled elements (FAIL and exit 1 when off).
// Usage: bench_matmul_cpu [--quick] [--json FILE] [--case NAME] [--backend blas|loom] [--runs N]
//   --case/--backend: time one case with one backend and print "ms <median> <fastest>"
//   (bench/cpu/matmul_vs_torch.py runs it so, interleaved with PyTorch and NumPy).
#include <loom/loom.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../bench_util.hpp"

#ifndef LOOM_BENCH_CXX_FLAGS
#define LOOM_BENCH_CXX_FLAGS "unknown"
#endif

namespace {
struct product_case {
  const char* name;
  loom::index_t m, k, n;
  bool bias_gelu;  // y = gelu(x w + b, tanh) instead of y = x w (+ b when `bias`)
  bool bias;
};

// The cases at full size; --quick divides every extent by 16 (at least 1).
const product_case cases[] = {
    {"square_4096", 4096, 4096, 4096, false, false},
    {"square_4096_bias_gelu", 4096, 4096, 4096, true, true},
    {"square_1024", 1024, 1024, 1024, false, false},
    {"mlp_784_512_bias_gelu", 256, 784, 512, true, true},
    {"mlp_512_10_bias", 256, 512, 10, false, true},
};

struct operands {
  loom::host_tensor<float, 2> x, w, y;
  loom::host_tensor<float, 1> b;
};

operands make(const product_case& c) {
  operands o{loom::host_tensor<float, 2>({c.m, c.k}), loom::host_tensor<float, 2>({c.k, c.n}),
             loom::host_tensor<float, 2>({c.m, c.n}), loom::host_tensor<float, 1>({c.n})};
  std::mt19937_64 g(42);
  for (loom::index_t i = 0; i < o.x.size(); ++i) o.x.data()[i] = loom_bench::nonzero_value(g);
  for (loom::index_t i = 0; i < o.w.size(); ++i) o.w.data()[i] = loom_bench::nonzero_value(g) / 32;
  for (loom::index_t i = 0; i < o.b.size(); ++i) o.b.data()[i] = loom_bench::nonzero_value(g);
  return o;
}

void run(const product_case& c, operands& o) {
  if (c.bias_gelu)
    o.y = loom::gelu(loom::matmul(o.x, o.w) + o.b, loom::approximate::tanh);
  else if (c.bias)
    o.y = loom::matmul(o.x, o.w) + o.b;
  else
    o.y = loom::matmul(o.x, o.w);
}

// Compares 256 sampled elements with a double reference (error relative to sum |x w|).
bool check(const product_case& c, const operands& o) {
  std::mt19937_64 g(7);
  for (int s = 0; s < 256; ++s) {
    const loom::index_t i = static_cast<loom::index_t>(g() % static_cast<std::uint64_t>(c.m));
    const loom::index_t j = static_cast<loom::index_t>(g() % static_cast<std::uint64_t>(c.n));
    double v = 0, mag = 0;
    for (loom::index_t k = 0; k < c.k; ++k) {
      const double p = static_cast<double>(o.x(i, k)) * o.w(k, j);
      v += p;
      mag += std::fabs(p);
    }
    if (c.bias) v += o.b(j);
    if (c.bias_gelu) v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    const double got = o.y(i, j);
    if (!(std::fabs(got - v) <= 1e-5 * (mag + std::fabs(v)) + 1e-5)) {
      std::printf("FAIL %s at (%lld, %lld): %g, want %g\n", c.name, static_cast<long long>(i),
                  static_cast<long long>(j), got, v);
      return false;
    }
  }
  return true;
}

product_case scaled(product_case c, bool quick) {
  if (quick) {
    c.m = std::max<loom::index_t>(1, c.m / 16);
    c.k = std::max<loom::index_t>(1, c.k / 16);
    c.n = std::max<loom::index_t>(1, c.n / 16);
  }
  return c;
}

loom::host_gemm_backend parse_backend(const std::string& s) {
  if (s == "blas") return loom::host_gemm_backend::blas;
  if (s == "loom") return loom::host_gemm_backend::loom;
  std::fprintf(stderr, "--backend takes blas or loom, not %s\n", s.c_str());
  std::exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json, only, backend;
  int runs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--case" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--backend" && i + 1 < argc) {
      backend = argv[++i];
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--json FILE] [--case NAME] [--backend blas|loom] [--runs N]\n", argv[0]);
      return 2;
    }
  }
  if (!only.empty()) {
    for (const auto& full : cases) {
      if (only != full.name) continue;
      const product_case c = scaled(full, quick);
      if (!backend.empty()) loom::set_host_gemm_backend(parse_backend(backend));
      operands o = make(c);
      run(c, o);
      std::vector<double> ms;
      for (int r = 0; r < (runs > 0 ? runs : 3); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        run(c, o);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      if (!check(c, o)) return 1;
      std::printf("ms %.6g %.6g\n", loom_bench::median(ms), *std::min_element(ms.begin(), ms.end()));
      return 0;
    }
    std::fprintf(stderr, "no case %s\n", only.c_str());
    return 2;
  }

  loom_bench::emit_machine(json, loom_bench::describe_machine(LOOM_BENCH_CXX_FLAGS), loom::host_threads());
  std::printf("host matmul: %s\n", loom::host_gemm_backend_name().c_str());
  std::vector<loom::host_gemm_backend> backends;
  if (LOOM_HAS_BLAS) backends.push_back(loom::host_gemm_backend::blas);
  backends.push_back(loom::host_gemm_backend::loom);
  bool ok = true;
  std::printf("%-24s %-18s %-6s %10s %10s\n", "case", "m x k x n", "impl", "ms", "GFLOP/s");
  for (const auto& full : cases) {
    const product_case c = scaled(full, quick);
    operands o = make(c);
    const double flop = 2.0 * static_cast<double>(c.m) * static_cast<double>(c.k) * static_cast<double>(c.n);
    for (const auto be : backends) {
      loom::set_host_gemm_backend(be);
      const bool big = flop > 1e10;
      const double ms = quick ? loom_bench::median_ms(0, 1, [&] { run(c, o); })
                              : loom_bench::median_ms(1, big ? 3 : 15, [&] { run(c, o); });
      const bool good = check(c, o);
      ok = ok && good;
      const char* impl = be == loom::host_gemm_backend::blas ? "blas" : "loom";
      const std::string shape =
          std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n);
      std::printf("%-24s %-18s %-6s %10.3f %10.1f%s\n", c.name, shape.c_str(), impl, ms, flop / (ms * 1e6),
                  good ? "" : "  FAIL");
      loom_bench::record r;
      r.bench = "matmul_cpu";
      r.op = c.name;
      r.shape = shape;
      r.dtype = "float32";
      r.impl = std::string("loom_") + impl;
      r.ms = ms;
      r.bytes = 4.0 * static_cast<double>(c.m * c.k + c.k * c.n + c.m * c.n);
      r.check = good ? "ok" : "FAIL";
      r.threads = loom::host_threads();
      loom_bench::emit_json(json, r);
    }
  }
  return ok ? 0 : 1;
}
