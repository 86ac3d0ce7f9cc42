// SPDX-License-Identifier: Apache-2.0
// Derived backward passes (loom::grad of the forward layer) against loom's
// built-in ones on the host executor, 4096 x 4096 floats:
//   softmax     dx = grad<0>(softmax)(x, dy)            vs softmax_backward(y, dy)
//   layer_norm  dx, dw, db = grad(layer_norm)(x, w, b, dy) vs layer_norm_backward(x, w, dy)
//   rms_norm    dx, dw = grad(rms_norm)(x, w, dy)       vs rms_norm_backward(x, w, dy)
// Target (issue 30): the derived pass within 10% of the built-in one's time,
// with the same kernel count (checked: the program fails otherwise). Every
// result is checked against a double reference of the gradient first. The
// built-in softmax backward reads the saved forward output y; the derived
// one recomputes it from x, with nothing saved, or (a second row of each
// pair) reads the row statistics that the layer names loom::saved, or (the
// softmax's third row) the saved exponentials and sum, full-size like y. Wall
// time, median of several runs after a warm-up run; GB/s = bytes that must
// move / time.
// Usage: bench_grad_cpu [--quick] [--json FILE]
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <loom/loom.hpp>

#include "../bench_util.hpp"

namespace {
using loom::index_t;


constexpr double ln_eps = 1e-5, rms_eps = 1e-6;

// Double references of the three backward passes, row by row.
struct reference {
  index_t rows, cols;
  std::vector<double> dx, dw, db;
  reference(index_t r, index_t c) : rows(r), cols(c), dx(static_cast<std::size_t>(r * c)), dw(c), db(c) {}

  void softmax(const float* x, const float* dy) {
    for (index_t i = 0; i < rows; ++i) {
      const float* xr = x + i * cols;
      const float* gr = dy + i * cols;
      double m = -INFINITY, s = 0, dot = 0;
      for (index_t j = 0; j < cols; ++j) m = std::max(m, static_cast<double>(xr[j]));
      for (index_t j = 0; j < cols; ++j) s += std::exp(xr[j] - m);
      for (index_t j = 0; j < cols; ++j) dot += gr[j] * std::exp(xr[j] - m) / s;
      for (index_t j = 0; j < cols; ++j) dx[static_cast<std::size_t>(i * cols + j)] = std::exp(xr[j] - m) / s * (gr[j] - dot);
    }
  }
  void layer_norm(const float* x, const float* w, const float* dy) {
    std::fill(dw.begin(), dw.end(), 0.0);
    std::fill(db.begin(), db.end(), 0.0);
    std::vector<double> xhat(static_cast<std::size_t>(cols));
    for (index_t i = 0; i < rows; ++i) {
      const float* xr = x + i * cols;
      const float* gr = dy + i * cols;
      double mean = 0, var = 0, mg = 0, mgx = 0;
      for (index_t j = 0; j < cols; ++j) mean += xr[j];
      mean /= static_cast<double>(cols);
      for (index_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
      const double rstd = 1 / std::sqrt(var / static_cast<double>(cols) + ln_eps);
      for (index_t j = 0; j < cols; ++j) {
        xhat[static_cast<std::size_t>(j)] = (xr[j] - mean) * rstd;
        mg += gr[j] * w[j];
        mgx += gr[j] * w[j] * xhat[static_cast<std::size_t>(j)];
        dw[static_cast<std::size_t>(j)] += gr[j] * xhat[static_cast<std::size_t>(j)];
        db[static_cast<std::size_t>(j)] += gr[j];
      }
      mg /= static_cast<double>(cols);
      mgx /= static_cast<double>(cols);
      for (index_t j = 0; j < cols; ++j)
        dx[static_cast<std::size_t>(i * cols + j)] =
            rstd * (gr[j] * w[j] - mg - xhat[static_cast<std::size_t>(j)] * mgx);
    }
  }
  void rms_norm(const float* x, const float* w, const float* dy) {
    std::fill(dw.begin(), dw.end(), 0.0);
    for (index_t i = 0; i < rows; ++i) {
      const float* xr = x + i * cols;
      const float* gr = dy + i * cols;
      double ms = 0, mgx = 0;
      for (index_t j = 0; j < cols; ++j) ms += static_cast<double>(xr[j]) * xr[j];
      const double r = 1 / std::sqrt(ms / static_cast<double>(cols) + rms_eps);
      for (index_t j = 0; j < cols; ++j) {
        mgx += gr[j] * w[j] * static_cast<double>(xr[j]);
        dw[static_cast<std::size_t>(j)] += gr[j] * xr[j] * r;
      }
      mgx /= static_cast<double>(cols);
      for (index_t j = 0; j < cols; ++j)
        dx[static_cast<std::size_t>(i * cols + j)] = r * gr[j] * w[j] - xr[j] * r * r * r * mgx;
    }
  }
};

// Worst error of got against ref relative to the tolerance (atol + rtol |ref|).
std::string compare(const float* got, const std::vector<double>& ref, double atol, double rtol) {
  loom_bench::error_meter m{atol, rtol};
  for (std::size_t i = 0; i < ref.size(); ++i) m.add(got[i], ref[i]);
  return m.verdict();
}
}  // namespace

int main(int argc, char** argv) {
  const auto opt = loom_bench::options::parse(argc, argv);
  const index_t rows = opt.quick ? 257 : 4096, cols = opt.quick ? 1023 : 4096, n = rows * cols;
  const int warmup = 1, runs = opt.quick ? 1 : 7;
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  std::mt19937_64 g(30);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  loom::host_tensor<float, 2> x({rows, cols}), dy({rows, cols}), y({rows, cols}), dx({rows, cols});
  loom::host_tensor<float, 1> w({cols}), b({cols}), dw({cols}), db({cols});
  for (index_t i = 0; i < n; ++i) x.data()[i] = 2 * u(g) + 0.25f, dy.data()[i] = u(g);
  for (index_t j = 0; j < cols; ++j) w.data()[j] = 1 + 0.5f * u(g), b.data()[j] = u(g);
  const double row_bytes = static_cast<double>(n) * sizeof(float);
  reference ref(rows, cols);

  bool failed = false;
  // Poisons the outputs, runs f once, checks it with `check`, then times it;
  // returns {median ms, host launches of one run}.
  auto measure = [&](const char* op, const char* impl, double bytes, auto&& f, auto&& check) {
    for (index_t i = 0; i < n; ++i) dx.data()[i] = std::nanf("");
    for (index_t j = 0; j < cols; ++j) dw.data()[j] = db.data()[j] = std::nanf("");
    const auto before = loom::launches().host;
    f();
    const auto kernels = loom::launches().host - before;
    loom_bench::record rec{"bench_grad_cpu", op, shape, "f32", impl};
    rec.check = check();
    rec.bytes = bytes;
    rec.threads = loom::host_threads();
    loom_bench::report_timed(rec, warmup, runs, f, opt.json_path, failed);
    return std::pair<double, unsigned long long>{rec.ms, kernels};
  };
  // The dx tolerance covers float rounding over rows of 4096; the column
  // sums add 4096 float terms per column.
  auto check_dx = [&](const float* p = nullptr) { return compare(p ? p : dx.data(), ref.dx, 1e-5, 1e-3); };
  auto check_dw = [&](const float* p = nullptr) { return compare(p ? p : dw.data(), ref.dw, 1e-3, 1e-3); };
  auto check_db = [&](const float* p = nullptr) { return compare(p ? p : db.data(), ref.db, 1e-3, 1e-3); };
  auto both = [](const std::string& a, const std::string& b) { return a != "ok" ? a : b; };
  auto verdict = [&](const char* op, std::pair<double, unsigned long long> derived,
                     std::pair<double, unsigned long long> builtin) {
    std::printf("  %s: derived / built-in time %.2fx (target <= 1.10x); kernels %llu vs %llu\n", op,
                derived.first / builtin.first, derived.second, builtin.second);
    if (derived.second != builtin.second) {
      std::printf("FAIL: %s: the derived backward takes %llu kernels, the built-in one %llu\n", op, derived.second,
                  builtin.second);
      failed = true;
    }
  };

  std::printf("bench_grad_cpu: host executor, %d threads; median of %d runs after %d warm-up\n",
              loom::host_threads(), runs, warmup);
  loom_bench::print_header();

  constexpr auto softmax = loom::layer([](auto v) { return loom::softmax(v); });
  ref.softmax(x.data(), dy.data());
  y = loom::softmax(x);
  const auto sd = measure("softmax backward", "loom::grad (from x)", 3 * row_bytes,
                          [&] { dx = loom::grad<0>(softmax)(x, dy); }, [&] { return check_dx(); });
  const auto sb = measure("softmax backward", "softmax_backward (from y)", 3 * row_bytes,
                          [&] { dx = loom::softmax_backward(y, dy); }, [&] { return check_dx(); });
  verdict("softmax", sd, sb);
  // The same layer naming its row max and sum (loom::saved): the backward
  // reads them, saved by the forward ([rows, 1] each, assigned untimed).
  constexpr auto softmax_saving = loom::layer([](auto v) {
    auto e = exp(v - stop_gradient(loom::saved<0>(row_max(v))));
    return e / loom::saved<1>(row_sum(e));
  });
  loom::host_tensor<float, 2> row_a({rows, 1}), row_b({rows, 1});
  row_a = loom::saved_value<0>(softmax_saving)(x);
  row_b = loom::saved_value<1>(softmax_saving)(x);
  const auto ss = measure("softmax backward", "loom::grad (from x, saved max and sum)", 3 * row_bytes,
                          [&] { dx = loom::grad<0>(softmax_saving).with_saved(row_a, row_b)(x, dy); },
                          [&] { return check_dx(); });
  verdict("softmax, saved max and sum", ss, sb);
  // Saving the exponentials (full-size, the memory softmax_backward's
  // saved output y takes) and the sum: the backward reads e, s and dy and
  // computes no exponential, as softmax_backward reads y and dy.
  constexpr auto softmax_saving_exp = loom::layer([](auto v) {
    auto e = loom::saved<0>(exp(v - stop_gradient(row_max(v))));
    return e / loom::saved<1>(row_sum(e));
  });
  loom::host_tensor<float, 2> saved_exp({rows, cols});
  saved_exp = loom::saved_value<0>(softmax_saving_exp)(x);
  row_b = loom::saved_value<1>(softmax_saving_exp)(x);
  const auto se = measure("softmax backward", "loom::grad (saved exp and sum)", 3 * row_bytes,
                          [&] { dx = loom::grad<0>(softmax_saving_exp).with_saved(saved_exp, row_b)(x, dy); },
                          [&] { return check_dx(); });
  verdict("softmax, saved exp and sum", se, sb);

  constexpr auto layer_norm = loom::layer([](auto v, auto wt, auto bs) { return loom::layer_norm(v, wt, bs, ln_eps); });
  ref.layer_norm(x.data(), w.data(), dy.data());
  const auto ld = measure("layer_norm backward", "loom::grad", 3 * row_bytes,
                          [&] { loom::grad(layer_norm)(x, w, b, dy).into(dx, dw, db); },
                          [&] { return both(check_dx(), both(check_dw(), check_db())); });
  // The built-in passes return new tensors (held here, not copied out).
  std::optional<decltype(loom::layer_norm_backward(x, w, dy, ln_eps))> lg;
  const auto lb = measure("layer_norm backward", "layer_norm_backward", 3 * row_bytes,
                          [&] { lg.emplace(loom::layer_norm_backward(x, w, dy, ln_eps)); },
                          [&] {
                            return both(check_dx(lg->dx.data()),
                                        both(check_dw(lg->dweight.data()), check_db(lg->dbias.data())));
                          });
  verdict("layer_norm", ld, lb);
  constexpr auto layer_norm_saving = loom::layer([](auto v, auto wt, auto bs) {
    auto centred = v - loom::saved<0>(row_mean(v));
    return centred * rsqrt(loom::saved<1>(row_mean(centred * centred)) + ln_eps) * wt + bs;
  });
  row_a = loom::saved_value<0>(layer_norm_saving)(x, w, b);
  row_b = loom::saved_value<1>(layer_norm_saving)(x, w, b);
  const auto ls = measure("layer_norm backward", "loom::grad (saved mean and variance)", 3 * row_bytes,
                          [&] { loom::grad(layer_norm_saving).with_saved(row_a, row_b)(x, w, b, dy).into(dx, dw, db); },
                          [&] { return both(check_dx(), both(check_dw(), check_db())); });
  verdict("layer_norm, saved mean and variance", ls, lb);

  constexpr auto rms_norm = loom::layer([](auto v, auto wt) { return loom::rms_norm(v, wt, rms_eps); });
  ref.rms_norm(x.data(), w.data(), dy.data());
  const auto rd = measure("rms_norm backward", "loom::grad", 3 * row_bytes,
                          [&] { loom::grad(rms_norm)(x, w, dy).into(dx, dw); },
                          [&] { return both(check_dx(), check_dw()); });
  std::optional<decltype(loom::rms_norm_backward(x, w, dy, rms_eps))> rg;
  const auto rb = measure("rms_norm backward", "rms_norm_backward", 3 * row_bytes,
                          [&] { rg.emplace(loom::rms_norm_backward(x, w, dy, rms_eps)); },
                          [&] { return both(check_dx(rg->dx.data()), check_dw(rg->dweight.data())); });
  verdict("rms_norm", rd, rb);
  constexpr auto rms_norm_saving =
      loom::layer([](auto v, auto wt) { return v * rsqrt(loom::saved<0>(row_mean(v * v)) + rms_eps) * wt; });
  row_a = loom::saved_value<0>(rms_norm_saving)(x, w);
  const auto rs = measure("rms_norm backward", "loom::grad (saved mean square)", 3 * row_bytes,
                          [&] { loom::grad(rms_norm_saving).with_saved(row_a)(x, w, dy).into(dx, dw); },
                          [&] { return both(check_dx(), check_dw()); });
  verdict("rms_norm, saved mean square", rs, rb);

  if (failed) std::printf("FAIL: a result differs from its double reference or a kernel count differs\n");
  return failed ? 1 : 0;
}
