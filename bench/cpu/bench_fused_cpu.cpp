// SPDX-License-Identifier: Apache-2.0
// loom's host executor against the ways people write the same work by hand:
//  - two fused elementwise expressions over three inputs (64 Mi floats):
//      y = a * b + c                               (memory-bound)
//      y = (a * b + c) * 0.5 - sigmoid(a) * c      (exp-bound)
//    each as one loom assignment, op by op (each op materialized into a
//    temporary, as an eager library runs it), and as hand-written loops with
//    the same threads: `omp parallel for` and `omp parallel for simd` (the
//    best way to write it by hand). Targets: fused >= 0.9x the faster hand
//    loop and >= 2x op by op.
//  - row layers: softmax, log_softmax, rms_norm and layer_norm over 4096 x
//    4096 floats, and the backward passes of all four (gradient of the
//    input), loom against hand-written loops parallel over rows (each row
//    statistic once per row, exp once per element where the layer allows).
// A parallel copy gives the ceiling (% of copy). Every result is checked
// against a double reference before it is timed. The machine (CPU model,
// cores, ISA extensions) and the compiler flags are printed and recorded.
// Wall time, median of several runs after a warm-up run; GB/s = bytes that
// must move (inputs read once, output written once) / time.
// Usage: bench_fused_cpu [--quick] [--json FILE]
#include <loom/loom.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../bench_util.hpp"

// The compiler flags, recorded with the machine (bench/CMakeLists.txt defines them).
#ifndef LOOM_BENCH_CXX_FLAGS
#define LOOM_BENCH_CXX_FLAGS "not recorded by the build"
#endif

namespace {
using loom::index_t;
using loom_bench::record;

struct timing {
  int warmup, runs;
};

template <class F>
double median_ms(const timing& t, F&& f) {
  for (int i = 0; i < t.warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < t.runs; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    const auto b = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  return loom_bench::median(ms);
}

template <class Tensor>
void randomize(Tensor& t, std::mt19937_64& g) {
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = loom_bench::nonzero_value(g);
}

template <class Tensor>
void poison(Tensor& t) {
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = std::nanf("");
}

class runner {
 public:
  runner(const loom_bench::options& o) : opt_(o), time_(o.quick ? timing{1, 1} : timing{1, 7}) {}

  // Times f, checks the output with `check` (run once before timing, on a
  // poisoned output), prints and records the result.
  template <class F, class C>
  double measure(const std::string& op, const std::string& shape, const std::string& impl, double bytes, F&& f,
                 C&& check) {
    record r{"cpu", op, shape, "f32", impl};
    r.bytes = bytes;
    r.copy_gbps = copy_gbps_;
    r.threads = loom::host_threads();
    f();
    r.check = check();
    r.ms = median_ms(time_, f);
    loom_bench::print_row(r);
    loom_bench::emit_json(opt_.json_path, r);
    if (r.check != "ok") failed_ = true;
    return r.ms;
  }
  bool failed() const { return failed_; }
  //! The hand copy's bandwidth: the ceiling every later row is compared with.
  void set_copy_gbps(double g) { copy_gbps_ = g; }
  bool quick() const { return opt_.quick; }

 private:
  loom_bench::options opt_;
  timing time_;
  bool failed_ = false;
  double copy_gbps_ = 0;
};

// The largest of p[0..n), as a hand loop computes a row's maximum.
float max_of(const float* p, index_t n) {
  float mx = -INFINITY;
  for (index_t j = 0; j < n; ++j) mx = std::fmax(mx, p[j]);
  return mx;
}

// A hand loop over rows: row(i) for each of the nr rows, rows in parallel.
template <class F>
void each_row(index_t nr, const F& row) {
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (index_t i = 0; i < nr; ++i) row(i);
}

// The ceiling: a parallel copy of 64 Mi floats (read + write), by hand and as
// the loom assignment y = x.
void copy(runner& run) {
  const index_t n = run.quick() ? 65537 : (index_t{64} << 20);
  std::mt19937_64 g(4);
  loom::host_tensor<float, 1> x({n}), y({n});
  randomize(x, g);
  const double bytes = 2.0 * n * sizeof(float);
  auto check = [&] {
    loom_bench::error_meter m{0, 0};
    for (index_t i = 0; i < n; ++i) m.add(y.data()[i], x.data()[i]);
    return m.verdict();
  };
  poison(y);
  const double hand = run.measure("copy", std::to_string(n), "hand copy (OpenMP)", bytes,
                                  [&] {
                                    const float* px = x.data();
                                    float* py = y.data();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static)
#endif
                                    for (index_t i = 0; i < n; ++i) py[i] = px[i];
                                  },
                                  check);
  run.set_copy_gbps(bytes / (hand * 1e6));
  poison(y);
  run.measure("copy", std::to_string(n), "loom y = x", bytes, [&] { loom::assign(y, x); }, check);
}

double six_op_ref(double a, double b, double c) { return (a * b + c) * 0.5 - c / (1 + std::exp(-a)); }

// One fused expression: loom fused (and one launch), op by op, and the two
// hand loops. `fused` assigns the expression to y, `eager` runs it op by op,
// `hand(i)` computes element i, `ref(i)` its double reference.
template <class Fused, class Eager, class Hand, class Ref>
void elementwise_case(runner& run, const char* op, index_t n, double bytes, loom::host_tensor<float, 1>& y, Fused fused,
                      Eager eager, Hand hand, Ref ref, double atol, double rtol) {
  const std::string shape = std::to_string(n);
  auto check_y = [&] {
    loom_bench::error_meter m{atol, rtol};
    for (index_t i = 0; i < n; ++i) m.add(y.data()[i], ref(i));
    return m.verdict();
  };
  poison(y);
  const double t_fused = run.measure(op, shape, "loom fused", bytes, fused, check_y);
  const auto before = loom::launches().host;
  fused();
  if (loom::launches().host != before + 1) {
    std::printf("FAIL: the fused assignment took %llu host launches\n",
                static_cast<unsigned long long>(loom::launches().host - before));
    std::exit(1);
  }
  poison(y);
  const double t_eager = run.measure(op, shape, "loom op by op", bytes, eager, check_y);
  float* const py = y.data();
  poison(y);
  const double t_hand = run.measure(
      op, shape, "hand loop (OpenMP)", bytes,
      [&] {
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (index_t i = 0; i < n; ++i) py[i] = hand(i);
      },
      check_y);
  poison(y);
  const double t_simd = run.measure(
      op, shape, "hand loop (OpenMP simd)", bytes,
      [&] {
#if LOOM_HAS_OPENMP
#pragma omp parallel for simd schedule(static)
#endif
        for (index_t i = 0; i < n; ++i) py[i] = hand(i);
      },
      check_y);
  const double best = t_hand < t_simd ? t_hand : t_simd;
  std::printf("  %s: fused / best hand loop speed: %.2fx (target >= 0.9x); fused / op by op: %.2fx (target >= 2x)\n",
              op, best / t_fused, t_eager / t_fused);
}

void elementwise(runner& run) {
  const index_t n = run.quick() ? 65537 : (index_t{64} << 20);
  std::mt19937_64 g(6);
  loom::host_tensor<float, 1> a({n}), b({n}), c({n}), y({n});
  randomize(a, g), randomize(b, g), randomize(c, g);
  const double bytes = 4.0 * n * sizeof(float);  // a, b, c read; y written
  const float *pa = a.data(), *pb = b.data(), *pc = c.data();

  elementwise_case(
      run, "a*b+c", n, bytes, y, [&] { y = a * b + c; },
      [&] {
        auto t1 = loom::materialize(a * b);
        y = t1 + c;
      },
      [=](index_t i) { return pa[i] * pb[i] + pc[i]; }, [=](index_t i) { return double(pa[i]) * pb[i] + pc[i]; }, 1e-6,
      1e-6);

  elementwise_case(
      run, "(a*b+c)*0.5-sigmoid(a)*c", n, bytes, y, [&] { y = (a * b + c) * 0.5f - loom::sigmoid(a) * c; },
      [&] {
        auto t1 = loom::materialize(a * b);
        auto t2 = loom::materialize(t1 + c);
        auto t3 = loom::materialize(t2 * 0.5f);
        auto t4 = loom::materialize(loom::sigmoid(a));
        auto t5 = loom::materialize(t4 * c);
        y = t3 - t5;
      },
      [=](index_t i) { return (pa[i] * pb[i] + pc[i]) * 0.5f - pc[i] / (1.0f + std::exp(-pa[i])); },
      [=](index_t i) { return six_op_ref(pa[i], pb[i], pc[i]); }, 1e-6, 1e-5);
}

// Double references of one row, for the checks.
void softmax_ref(const float* x, index_t cols, std::vector<double>& out) {
  double mx = -INFINITY, s = 0;
  for (index_t j = 0; j < cols; ++j) mx = std::fmax(mx, x[j]);
  for (index_t j = 0; j < cols; ++j) s += std::exp(x[j] - mx);
  out.resize(cols);
  for (index_t j = 0; j < cols; ++j) out[j] = std::exp(x[j] - mx) / s;
}
void layer_norm_ref(const float* x, const float* w, const float* b, index_t cols, double eps,
                    std::vector<double>& out) {
  double mean = 0, var = 0;
  for (index_t j = 0; j < cols; ++j) mean += x[j];
  mean /= static_cast<double>(cols);
  for (index_t j = 0; j < cols; ++j) var += (x[j] - mean) * (x[j] - mean);
  var /= static_cast<double>(cols);
  out.resize(cols);
  for (index_t j = 0; j < cols; ++j) out[j] = (x[j] - mean) / std::sqrt(var + eps) * w[j] + b[j];
}

void log_softmax_ref(const float* x, index_t cols, std::vector<double>& out) {
  double mx = -INFINITY, s = 0;
  for (index_t j = 0; j < cols; ++j) mx = std::fmax(mx, x[j]);
  for (index_t j = 0; j < cols; ++j) s += std::exp(x[j] - mx);
  out.resize(cols);
  for (index_t j = 0; j < cols; ++j) out[j] = x[j] - mx - std::log(s);
}

void rms_norm_ref(const float* x, const float* w, index_t cols, double eps, std::vector<double>& out) {
  double ss = 0;
  for (index_t j = 0; j < cols; ++j) ss += static_cast<double>(x[j]) * x[j];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
  out.resize(cols);
  for (index_t j = 0; j < cols; ++j) out[j] = x[j] * r * w[j];
}

void rows(runner& run) {
  const index_t nr = run.quick() ? 257 : 4096, nc = run.quick() ? 1023 : 4096;
  const std::string shape = std::to_string(nr) + "x" + std::to_string(nc);
  std::mt19937_64 g(5);
  loom::host_tensor<float, 2> x({nr, nc}), y({nr, nc});
  loom::host_tensor<float, 1> w({nc}), b({nc});
  randomize(x, g), randomize(w, g), randomize(b, g);
  const double bytes = 2.0 * nr * nc * sizeof(float);  // x read, y written
  constexpr double eps = 1e-5;
  // The whole output is compared on quick runs; every 61st row otherwise.
  const index_t row_step = run.quick() ? 1 : 61;

  auto check = [&](auto ref) {
    return [&, ref] {
      loom_bench::error_meter m{2e-5, 1e-4};
      std::vector<double> r;
      for (index_t i = 0; i < nr; i += row_step) {
        ref(x.data() + i * nc, r);
        for (index_t j = 0; j < nc; ++j) m.add(y.data()[i * nc + j], r[j]);
      }
      return m.verdict();
    };
  };
  auto sm_check = check([&](const float* row, std::vector<double>& r) { softmax_ref(row, nc, r); });
  auto rn_check =
      check([&](const float* row, std::vector<double>& r) { rms_norm_ref(row, w.data(), nc, eps, r); });
  auto ln_check = check(
      [&](const float* row, std::vector<double>& r) { layer_norm_ref(row, w.data(), b.data(), nc, eps, r); });

  poison(y);
  const double sm_loom = run.measure("softmax", shape, "loom", bytes, [&] { y = loom::softmax(x); }, sm_check);
  poison(y);
  const double sm_hand = run.measure("softmax", shape, "hand loop (OpenMP)", bytes,
                                     [&] {
                                       each_row(nr, [&](index_t i) {
                                         const float* px = x.data() + i * nc;
                                         float* py = y.data() + i * nc;
                                         const float mx = max_of(px, nc);
                                         float s = 0;
                                         for (index_t j = 0; j < nc; ++j) s += std::exp(px[j] - mx);
                                         const float inv = 1.0f / s;
                                         for (index_t j = 0; j < nc; ++j) py[j] = std::exp(px[j] - mx) * inv;
                                       });
                                     },
                                     sm_check);
  poison(y);
  // The best way to write it by hand: exp once (stored in y), 1 / sum once
  // per row.
  const double sm_hand1 = run.measure("softmax", shape, "hand loop, exp once (OpenMP)", bytes,
                                      [&] {
                                        each_row(nr, [&](index_t i) {
                                          const float* px = x.data() + i * nc;
                                          float* py = y.data() + i * nc;
                                          const float mx = max_of(px, nc);
                                          float s = 0;
                                          for (index_t j = 0; j < nc; ++j) s += (py[j] = std::exp(px[j] - mx));
                                          const float inv = 1.0f / s;
                                          for (index_t j = 0; j < nc; ++j) py[j] *= inv;
                                        });
                                      },
                                      sm_check);
  poison(y);
  const double rn_loom =
      run.measure("rms_norm", shape, "loom", bytes, [&] { y = loom::rms_norm(x, w, eps); }, rn_check);
  poison(y);
  const double rn_hand = run.measure("rms_norm", shape, "hand loop (OpenMP)", bytes,
                                     [&] {
                                       each_row(nr, [&](index_t i) {
                                         const float* px = x.data() + i * nc;
                                         float* py = y.data() + i * nc;
                                         float ss = 0;
                                         for (index_t j = 0; j < nc; ++j) ss += px[j] * px[j];
                                         const float r = 1.0f / std::sqrt(ss / static_cast<float>(nc) + float(eps));
                                         for (index_t j = 0; j < nc; ++j) py[j] = px[j] * r * w.data()[j];
                                       });
                                     },
                                     rn_check);
  poison(y);
  const double ln_loom = run.measure("layer_norm", shape, "loom", bytes,
                                     [&] { y = loom::layer_norm(x, w, b, eps); }, ln_check);
  poison(y);
  const double ln_hand = run.measure("layer_norm", shape, "hand loop (OpenMP)", bytes,
                                     [&] {
                                       each_row(nr, [&](index_t i) {
                                         const float* px = x.data() + i * nc;
                                         float* py = y.data() + i * nc;
                                         float mean = 0, var = 0;
                                         for (index_t j = 0; j < nc; ++j) mean += px[j];
                                         mean /= static_cast<float>(nc);
                                         for (index_t j = 0; j < nc; ++j) var += (px[j] - mean) * (px[j] - mean);
                                         const float rstd = 1.0f / std::sqrt(var / static_cast<float>(nc) + float(eps));
                                         for (index_t j = 0; j < nc; ++j)
                                           py[j] = (px[j] - mean) * rstd * w.data()[j] + b.data()[j];
                                       });
                                     },
                                     ln_check);
  poison(y);
  const double ls_loom = run.measure("log_softmax", shape, "loom", bytes, [&] { y = loom::log_softmax(x); },
                                     check([&](const float* row, std::vector<double>& r) {
                                       log_softmax_ref(row, nc, r);
                                     }));
  poison(y);
  // exp once per element, log once per row.
  const double ls_hand = run.measure("log_softmax", shape, "hand loop (OpenMP)", bytes,
                                     [&] {
                                       each_row(nr, [&](index_t i) {
                                         const float* px = x.data() + i * nc;
                                         float* py = y.data() + i * nc;
                                         const float mx = max_of(px, nc);
                                         float s = 0;
                                         for (index_t j = 0; j < nc; ++j) s += std::exp(px[j] - mx);
                                         const float shift = mx + std::log(s);
                                         for (index_t j = 0; j < nc; ++j) py[j] = px[j] - shift;
                                       });
                                     },
                                     check([&](const float* row, std::vector<double>& r) {
                                       log_softmax_ref(row, nc, r);
                                     }));
  std::printf("  loom / hand loop speed: softmax %.2fx (exp twice), %.2fx (exp once), log_softmax %.2fx, "
              "rms_norm %.2fx, layer_norm %.2fx\n",
              sm_hand / sm_loom, sm_hand1 / sm_loom, ls_hand / ls_loom, rn_hand / rn_loom, ln_hand / ln_loom);
}

// The row layers' backward passes (gradient of the input) against hand
// loops written the best way: each row statistic computed once per row,
// sums that share a pass computed together, exp once per element.
// softmax's and log_softmax's take the forward output y (made by loom's
// forward pass from random x); the norms' recompute their statistics from x.
void row_backward(runner& run) {
  const index_t nr = run.quick() ? 257 : 4096, nc = run.quick() ? 1023 : 4096;
  const std::string shape = std::to_string(nr) + "x" + std::to_string(nc);
  std::mt19937_64 g(6);
  loom::host_tensor<float, 2> x({nr, nc}), dy({nr, nc}), sm({nr, nc}), ls({nr, nc}), dx({nr, nc});
  loom::host_tensor<float, 1> w({nc});
  randomize(x, g), randomize(dy, g), randomize(w, g);
  sm = loom::softmax(x);
  ls = loom::log_softmax(x);
  const double bytes = 3.0 * nr * nc * sizeof(float);  // y or x and dy read, dx written
  constexpr double eps = 1e-5;
  const index_t row_step = run.quick() ? 1 : 61;
  const float *px = x.data(), *pd = dy.data(), *pw = w.data(), *psm = sm.data(), *pls = ls.data();
  float* po = dx.data();
  // Checks dx against ref(row i, out) on every row_step-th row.
  auto check = [&](auto ref) {
    return [&, ref] {
      loom_bench::error_meter m{2e-5, 1e-4};
      std::vector<double> r(static_cast<std::size_t>(nc));
      for (index_t i = 0; i < nr; i += row_step) {
        ref(i, r);
        for (index_t j = 0; j < nc; ++j) m.add(po[i * nc + j], r[j]);
      }
      return m.verdict();
    };
  };
  // Measures loom's and the hand loop's way of one backward pass; returns hand / loom time.
  auto pair = [&](const char* op, auto&& loom_way, auto&& hand_row, auto ref) {
    poison(dx);
    const double t_loom = run.measure(op, shape, "loom", bytes, loom_way, check(ref));
    poison(dx);
    const double t_hand = run.measure(op, shape, "hand loop (OpenMP)", bytes,
                                      [&] { each_row(nr, [&](index_t i) { hand_row(i * nc); }); },
                                      check(ref));
    return t_hand / t_loom;
  };
  const double n = static_cast<double>(nc);

  const double smb = pair(
      "softmax_backward", [&] { dx = loom::softmax_backward(sm, dy); },
      [&](index_t o) {
        float dot = 0;
        for (index_t j = 0; j < nc; ++j) dot += pd[o + j] * psm[o + j];
        for (index_t j = 0; j < nc; ++j) po[o + j] = psm[o + j] * (pd[o + j] - dot);
      },
      [&](index_t i, std::vector<double>& r) {
        const float *y = psm + i * nc, *d = pd + i * nc;
        double dot = 0;
        for (index_t j = 0; j < nc; ++j) dot += static_cast<double>(d[j]) * y[j];
        for (index_t j = 0; j < nc; ++j) r[j] = y[j] * (d[j] - dot);
      });
  const double lsb = pair(
      "log_softmax_backward", [&] { dx = loom::log_softmax_backward(ls, dy); },
      [&](index_t o) {
        float sum = 0;
        for (index_t j = 0; j < nc; ++j) sum += pd[o + j];
        for (index_t j = 0; j < nc; ++j) po[o + j] = pd[o + j] - std::exp(pls[o + j]) * sum;
      },
      [&](index_t i, std::vector<double>& r) {
        const float *y = pls + i * nc, *d = pd + i * nc;
        double sum = 0;
        for (index_t j = 0; j < nc; ++j) sum += d[j];
        for (index_t j = 0; j < nc; ++j) r[j] = d[j] - std::exp(static_cast<double>(y[j])) * sum;
      });
  const double lnb = pair(
      "layer_norm_backward_input", [&] { dx = loom::layer_norm_backward_input(x, w, dy, eps); },
      [&](index_t o) {
        float mean = 0, var = 0, sg = 0, sgx = 0;
        for (index_t j = 0; j < nc; ++j) mean += px[o + j];
        mean /= static_cast<float>(nc);
        for (index_t j = 0; j < nc; ++j) var += (px[o + j] - mean) * (px[o + j] - mean);
        const float rstd = 1.0f / std::sqrt(var / static_cast<float>(nc) + float(eps));
        for (index_t j = 0; j < nc; ++j) {
          const float gj = pd[o + j] * pw[j];
          sg += gj;
          sgx += gj * (px[o + j] - mean) * rstd;
        }
        const float mg = sg / static_cast<float>(nc), mgx = sgx / static_cast<float>(nc);
        for (index_t j = 0; j < nc; ++j) {
          const float xhat = (px[o + j] - mean) * rstd;
          po[o + j] = rstd * (pd[o + j] * pw[j] - mg - xhat * mgx);
        }
      },
      [&](index_t i, std::vector<double>& r) {
        const float *xr = px + i * nc, *d = pd + i * nc;
        double mean = 0, var = 0, sg = 0, sgx = 0;
        for (index_t j = 0; j < nc; ++j) mean += xr[j];
        mean /= n;
        for (index_t j = 0; j < nc; ++j) var += (xr[j] - mean) * (xr[j] - mean);
        const double rstd = 1.0 / std::sqrt(var / n + eps);
        for (index_t j = 0; j < nc; ++j) {
          sg += static_cast<double>(d[j]) * pw[j];
          sgx += static_cast<double>(d[j]) * pw[j] * (xr[j] - mean) * rstd;
        }
        for (index_t j = 0; j < nc; ++j)
          r[j] = rstd * (static_cast<double>(d[j]) * pw[j] - sg / n - (xr[j] - mean) * rstd * sgx / n);
      });
  const double rnb = pair(
      "rms_norm_backward_input", [&] { dx = loom::rms_norm_backward_input(x, w, dy, eps); },
      [&](index_t o) {
        float ss = 0, sgx = 0;
        for (index_t j = 0; j < nc; ++j) {
          ss += px[o + j] * px[o + j];
          sgx += pd[o + j] * pw[j] * px[o + j];
        }
        const float rr = 1.0f / std::sqrt(ss / static_cast<float>(nc) + float(eps));
        const float k = rr * rr * (sgx / static_cast<float>(nc));
        for (index_t j = 0; j < nc; ++j) po[o + j] = rr * (pd[o + j] * pw[j] - px[o + j] * k);
      },
      [&](index_t i, std::vector<double>& r) {
        const float *xr = px + i * nc, *d = pd + i * nc;
        double ss = 0, sgx = 0;
        for (index_t j = 0; j < nc; ++j) {
          ss += static_cast<double>(xr[j]) * xr[j];
          sgx += static_cast<double>(d[j]) * pw[j] * xr[j];
        }
        const double rr = 1.0 / std::sqrt(ss / n + eps);
        for (index_t j = 0; j < nc; ++j) r[j] = rr * (static_cast<double>(d[j]) * pw[j] - xr[j] * rr * rr * sgx / n);
      });
  std::printf("  loom / hand loop speed: softmax_backward %.2fx, log_softmax_backward %.2fx, "
              "layer_norm_backward_input %.2fx, rms_norm_backward_input %.2fx\n",
              smb, lsb, lnb, rnb);
}
}  // namespace

int main(int argc, char** argv) {
  const auto opt = loom_bench::options::parse(argc, argv);
  try {
    runner run(opt);
    std::printf("bench_fused_cpu: host executor, %d threads%s; median of %s\n", loom::host_threads(),
                LOOM_HAS_OPENMP ? " (OpenMP)" : " (no OpenMP)",
                opt.quick ? "1 run after 1 warm-up (--quick)" : "7 runs after 1 warm-up");
    loom_bench::emit_machine(opt.json_path, loom_bench::describe_machine(LOOM_BENCH_CXX_FLAGS), loom::host_threads());
    loom_bench::print_header();
    copy(run);
    elementwise(run);
    rows(run);
    row_backward(run);
    if (run.failed()) {
      std::printf("FAIL: a result differs from its double reference\n");
      return 1;
    }
    return 0;
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
