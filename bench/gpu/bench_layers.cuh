// SPDX-License-Identifier: Apache-2.0
// What the translation units of bench_layers share: the double references,
// the data of one shape, the check and the timing of one layer, and the
// layers of one shape (run_shape). Each element type's run_shape is
// compiled in its own translation unit (bench_layers_bf16.cu,
// bench_layers_f32.cu, and bench_layers_host.cpp for the host executor's),
// so they compile side by side.
#pragma once

#include "gpu_bench.cuh"

namespace bench_layers {
using loom::index_t;
using namespace loom_bench;

constexpr std::uint64_t seed_x = 21, seed_d = 22, seed_w = 23, seed_b = 24;
constexpr double ln_eps = 1e-5, rms_eps = 1e-6;

// The inputs of one row as doubles, and a double reference over them.
struct row_in {
  std::vector<double> x, dy, w, b;
  std::int64_t target = 0;  // the row's class (cross-entropy)
  double rows = 1;          // rows in the batch (the mean of the loss)
};
using row_ref = void (*)(const row_in&, std::vector<double>&);

inline double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s / static_cast<double>(v.size());
}

inline void ref_softmax(const row_in& in, std::vector<double>& out) {
  double mx = -INFINITY, s = 0;
  for (double e : in.x) mx = std::fmax(mx, e);
  for (double e : in.x) s += std::exp(e - mx);
  out.clear();
  for (double e : in.x) out.push_back(std::exp(e - mx) / s);
}
inline void ref_log_softmax(const row_in& in, std::vector<double>& out) {
  double mx = -INFINITY, s = 0;
  for (double e : in.x) mx = std::fmax(mx, e);
  for (double e : in.x) s += std::exp(e - mx);
  out.clear();
  for (double e : in.x) out.push_back(e - mx - std::log(s));
}
inline void ref_layer_norm(const row_in& in, std::vector<double>& out) {
  const double mean = mean_of(in.x);
  double var = 0;
  for (double e : in.x) var += (e - mean) * (e - mean);
  const double rstd = 1 / std::sqrt(var / static_cast<double>(in.x.size()) + ln_eps);
  out.clear();
  for (std::size_t j = 0; j < in.x.size(); ++j) out.push_back((in.x[j] - mean) * rstd * in.w[j] + in.b[j]);
}
inline void ref_rms_norm(const row_in& in, std::vector<double>& out) {
  double ss = 0;
  for (double e : in.x) ss += e * e;
  const double r = 1 / std::sqrt(ss / static_cast<double>(in.x.size()) + rms_eps);
  out.clear();
  for (std::size_t j = 0; j < in.x.size(); ++j) out.push_back(in.x[j] * r * in.w[j]);
}
// The backward benchmarks take x as the forward output y where one is needed.
inline void ref_softmax_backward(const row_in& in, std::vector<double>& out) {
  double s = 0;
  for (std::size_t j = 0; j < in.x.size(); ++j) s += in.dy[j] * in.x[j];
  out.clear();
  for (std::size_t j = 0; j < in.x.size(); ++j) out.push_back(in.x[j] * (in.dy[j] - s));
}
inline void ref_log_softmax_backward(const row_in& in, std::vector<double>& out) {
  double s = 0;
  for (double e : in.dy) s += e;
  out.clear();
  for (std::size_t j = 0; j < in.x.size(); ++j) out.push_back(in.dy[j] - std::exp(in.x[j]) * s);
}
inline void ref_layer_norm_backward_input(const row_in& in, std::vector<double>& out) {
  const std::size_t n = in.x.size();
  const double mean = mean_of(in.x);
  double var = 0;
  for (double e : in.x) var += (e - mean) * (e - mean);
  const double rstd = 1 / std::sqrt(var / static_cast<double>(n) + ln_eps);
  double mg = 0, mgx = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double g = in.dy[j] * in.w[j];
    mg += g, mgx += g * (in.x[j] - mean) * rstd;
  }
  mg /= static_cast<double>(n), mgx /= static_cast<double>(n);
  out.clear();
  for (std::size_t j = 0; j < n; ++j)
    out.push_back(rstd * (in.dy[j] * in.w[j] - mg - (in.x[j] - mean) * rstd * mgx));
}
inline void ref_rms_norm_backward_input(const row_in& in, std::vector<double>& out) {
  const std::size_t n = in.x.size();
  double ss = 0, mgx = 0;
  for (std::size_t j = 0; j < n; ++j) ss += in.x[j] * in.x[j], mgx += in.dy[j] * in.w[j] * in.x[j];
  const double r = 1 / std::sqrt(ss / static_cast<double>(n) + rms_eps);
  mgx /= static_cast<double>(n);
  out.clear();
  for (std::size_t j = 0; j < n; ++j) out.push_back(r * (in.dy[j] * in.w[j] - in.x[j] * r * r * mgx));
}
// Cross-entropy with the mean over rows, its gradient for the logits x:
// (softmax(x) - onehot(target)) / rows.
inline void ref_cross_entropy_backward(const row_in& in, std::vector<double>& out) {
  ref_softmax(in, out);
  out[static_cast<std::size_t>(in.target)] -= 1;
  for (double& v : out) v /= in.rows;
}
// add_rms_norm's normalized output: rms_norm(x + r) with r read from dy.
inline void ref_add_rms_norm(const row_in& in, std::vector<double>& out) {
  row_in h = in;
  for (std::size_t j = 0; j < h.x.size(); ++j) h.x[j] += in.dy[j];
  ref_rms_norm(h, out);
}
// The derived gradients read x: their references run the forward first.
inline void ref_softmax_backward_of_x(const row_in& in, std::vector<double>& out) {
  row_in y = in;
  ref_softmax(in, y.x);
  ref_softmax_backward(y, out);
}

// The forward layers that loom::grad differentiates (impl "loom::grad").
constexpr auto softmax_layer = loom::layer([](auto z) { return loom::softmax(z); });
constexpr auto layer_norm_layer = loom::layer([](auto z, auto w, auto b) { return loom::layer_norm(z, w, b, ln_eps); });
constexpr auto rms_norm_layer = loom::layer([](auto z, auto w) { return loom::rms_norm(z, w, rms_eps); });
// The softmax naming its rows' max and sum (loom::saved): its derived
// backward reads them (impl "loom::grad, saved max and sum"), as the
// built-in backward reads the saved output.
constexpr auto softmax_saving_layer = loom::layer([](auto z) {
  auto e = exp(z - stop_gradient(loom::saved<0>(row_max(z))));
  return e / loom::saved<1>(row_sum(e));
});
// The softmax naming its exponentials (full-size, as the built-in
// backward's saved output) and their sum: its derived backward reads e, the
// sum and dy and computes no exponential (impl "loom::grad, saved exp and
// sum").
constexpr auto softmax_saving_exp_layer = loom::layer([](auto z) {
  auto e = loom::saved<0>(exp(z - stop_gradient(row_max(z))));
  return e / loom::saved<1>(row_sum(e));
});

// One layer's tensors for one shape and dtype: `sets` rotating (x, dy, y);
// host tensors (one set) for the self-test.
template <class T, class Space>
struct layer_data {
  index_t rows, cols;
  int sets;
  std::vector<loom::tensor<T, 2, Space>> x, dy, y, h;
  loom::tensor<T, 1, Space> w, b;
  loom::tensor<std::int64_t, 1, Space> target;

  layer_data(index_t r, index_t c)
      : rows(r), cols(c), sets(std::is_same_v<Space, loom::device> ? rotation_sets(4.0 * r * c * sizeof(T)) : 1),
        w({c}), b({c}), target({r}) {
    for (int s = 0; s < sets; ++s) {
      x.emplace_back(loom::shape<2>{r, c}), dy.emplace_back(loom::shape<2>{r, c}), y.emplace_back(loom::shape<2>{r, c});
      h.emplace_back(loom::shape<2>{r, c});
      hash_fill(x.back(), seed_x + 100 * s), hash_fill(dy.back(), seed_d + 100 * s);
    }
    hash_fill(w, seed_w), hash_fill(b, seed_b);
    loom::host_tensor<std::int64_t, 1> t({r});
    for (index_t i = 0; i < r; ++i) t(i) = target_of(i);
    loom::copy(t, target);
  }
  std::int64_t target_of(index_t i) const { return static_cast<std::int64_t>((i * 2654435761LL) % cols); }
  // The inputs of row i of set 0 as the device holds them.
  row_in inputs(index_t i) const {
    row_in in;
    for (index_t j = 0; j < cols; ++j) {
      const auto k = static_cast<std::uint64_t>(i * cols + j), c = static_cast<std::uint64_t>(j);
      in.x.push_back(hashed<T>(seed_x, k)), in.dy.push_back(hashed<T>(seed_d, k));
      in.w.push_back(hashed<T>(seed_w, c)), in.b.push_back(hashed<T>(seed_b, c));
    }
    in.target = target_of(i);
    in.rows = static_cast<double>(rows);
    return in;
  }
};

struct bench_state : bench_common {
  // Poisons set 0's output, runs f(0) and compares four rows with ref.
  template <class T, class Space, class F>
  static std::string check(layer_data<T, Space>& d, row_ref ref, F& f) {
    poison(d.y[0]);
    f(0);
    const double tol = std::is_same_v<T, float> ? 1e-4 : 2e-2;
    std::vector<double> want;
    std::vector<std::pair<std::vector<double>, std::vector<float>>> rows_checked;
    double scale = 0;
    for (index_t i : {index_t{0}, index_t{1}, d.rows / 2, d.rows - 1}) {
      ref(d.inputs(i), want);
      const auto got = loom::to_host(d.y[0].view().slice(i));
      std::vector<float> g(static_cast<std::size_t>(d.cols));
      for (index_t j = 0; j < d.cols; ++j) g[static_cast<std::size_t>(j)] = static_cast<float>(got.data()[j]);
      for (double v : want) scale = std::fmax(scale, std::fabs(v));
      rows_checked.emplace_back(want, std::move(g));
    }
    error_meter m{tol * scale, tol};
    for (const auto& [ref_row, got_row] : rows_checked)
      for (std::size_t j = 0; j < ref_row.size(); ++j) m.add(got_row[j], ref_row[j]);
    return m.verdict();
  }

  // Checks f (check above), then times f over all sets (not in the
  // self-test). `inputs` full-size tensors are read.
  template <class T, class Space, class F>
  void measure(layer_data<T, Space>& d, const char* op, int inputs, row_ref ref, F&& f, const char* impl = "loom") {
    const std::string shape = std::to_string(d.rows) + "x" + std::to_string(d.cols);
    record r{"gpu_layers", op, shape, dtype_name<T>(), impl};
    r.bytes = (inputs + 1.0) * d.rows * d.cols * sizeof(T) + 2.0 * d.cols * sizeof(T);
    r.copy_gbps = copy.memcpy_gbps;
    r.check = check(d, ref, f);
    if (r.check != "ok") failed = true;
    const int cached = loom::last_eval().cached_rows;
    if constexpr (std::is_same_v<Space, loom::device>) r.ms = time_rotated_ms(d.sets, timing, f);
    print_row(r);
    emit_json(opt.json_path, r);
    if constexpr (std::is_same_v<Space, loom::device>) {
      // The same kernel with the row cache off (every pass reads the rows in
      // place): what the cache is worth at this shape; its results checked
      // as well.
      if (cached > 0) {
        struct restore {
          std::size_t& budget;
          std::size_t saved;
          ~restore() { budget = saved; }
        } keep{loom::detail::rows::row_cache_budget(), loom::detail::rows::row_cache_budget()};
        keep.budget = 0;
        record off = r;
        off.impl = r.impl + ", row cache off";
        off.check = check(d, ref, f);
        if (off.check == "ok" && loom::last_eval().cached_rows != 0) off.check = "FAIL (the row cache stayed on)";
        if (off.check != "ok") failed = true;
        off.ms = time_rotated_ms(d.sets, timing, f);
        print_row(off);
        emit_json(opt.json_path, off);
      }
    }
  }
};

template <class T, class Space = loom::device>
void run_shape(bench_state& st, index_t rows, index_t cols) {
  layer_data<T, Space> d(rows, cols);
  auto& x = d.x;
  auto& dy = d.dy;
  auto& y = d.y;
  const auto& w = d.w;
  const auto& b = d.b;
  st.measure(d, "softmax", 1, ref_softmax, [&](int s) { y[s] = loom::softmax(x[s]); });
  st.measure(d, "log_softmax", 1, ref_log_softmax, [&](int s) { y[s] = loom::log_softmax(x[s]); });
  st.measure(d, "layer_norm", 1, ref_layer_norm, [&](int s) { y[s] = loom::layer_norm(x[s], w, b, ln_eps); });
  st.measure(d, "rms_norm", 1, ref_rms_norm, [&](int s) { y[s] = loom::rms_norm(x[s], w, rms_eps); });
  st.measure(d, "softmax_backward", 2, ref_softmax_backward,
             [&](int s) { y[s] = loom::softmax_backward(x[s], dy[s]); });
  st.measure(d, "log_softmax_backward", 2, ref_log_softmax_backward,
             [&](int s) { y[s] = loom::log_softmax_backward(x[s], dy[s]); });
  st.measure(d, "layer_norm_backward_input", 2, ref_layer_norm_backward_input,
             [&](int s) { y[s] = loom::layer_norm_backward_input(x[s], w, dy[s], ln_eps); });
  st.measure(d, "rms_norm_backward_input", 2, ref_rms_norm_backward_input,
             [&](int s) { y[s] = loom::rms_norm_backward_input(x[s], w, dy[s], rms_eps); });
  // Rank 3 ([B, T, C], transformer activations): the same rows as [N, C].
  const index_t inner = rows % 64 == 0 ? 64 : (rows % 3 == 0 ? 3 : 1);
  const loom::shape<3> btc{rows / inner, inner, cols};
  st.measure(d, "softmax_rank3", 1, ref_softmax,
             [&](int s) { y[s].reshape(btc) = loom::softmax(x[s].reshape(btc)); });
  // Reads x and r, writes y and h: 4 full-size transfers, counted as 3
  // inputs and the output.
  st.measure(d, "add_rms_norm", 3, ref_add_rms_norm,
             [&](int s) { loom::add_rms_norm(y[s], d.h[s], x[s], dy[s], w, rms_eps); });
  // Two kernels (the count of rows for the mean, then the gradient).
  st.measure(d, "cross_entropy_backward", 1, ref_cross_entropy_backward,
             [&](int s) { y[s] = loom::cross_entropy_backward(x[s], d.target); });
  st.measure(d, "softmax_backward", 2, ref_softmax_backward_of_x,
             [&](int s) { y[s] = loom::grad<0>(softmax_layer)(x[s], dy[s]); }, "loom::grad");
  {
    // The statistics per set of inputs, [rows, 1] in float, saved untimed.
    std::vector<loom::tensor<float, 2, Space>> row_max, row_sum;
    for (int s = 0; s < d.sets; ++s) {
      row_max.emplace_back(loom::shape<2>{rows, 1}), row_sum.emplace_back(loom::shape<2>{rows, 1});
      row_max.back() = loom::saved_value<0>(softmax_saving_layer)(x[s]);
      row_sum.back() = loom::saved_value<1>(softmax_saving_layer)(x[s]);
    }
    // The forward that writes them: y, the max and the sum in one kernel.
    st.measure(d, "softmax", 1, ref_softmax,
               [&](int s) {
                 loom::assign_with_row_stats(y[s], softmax_saving_layer(x[s]), row_max[s],
                                             loom::saved_value<0>(softmax_saving_layer)(x[s]), row_sum[s],
                                             loom::saved_value<1>(softmax_saving_layer)(x[s]));
               },
               "loom, writing max and sum");
    st.measure(d, "softmax_backward", 2, ref_softmax_backward_of_x,
               [&](int s) { y[s] = loom::grad<0>(softmax_saving_layer).with_saved(row_max[s], row_sum[s])(x[s], dy[s]); },
               "loom::grad, saved max and sum");
    // The exponentials in T, as y would be, saved untimed with the sum.
    std::vector<loom::tensor<T, 2, Space>> saved_exp;
    for (int s = 0; s < d.sets; ++s) {
      saved_exp.emplace_back(loom::shape<2>{rows, cols});
      saved_exp.back() = loom::saved_value<0>(softmax_saving_exp_layer)(x[s]);
      row_sum[s] = loom::saved_value<1>(softmax_saving_exp_layer)(x[s]);
    }
    st.measure(d, "softmax_backward", 2, ref_softmax_backward_of_x,
               [&](int s) {
                 y[s] = loom::grad<0>(softmax_saving_exp_layer).with_saved(saved_exp[s], row_sum[s])(x[s], dy[s]);
               },
               "loom::grad, saved exp and sum");
  }
  st.measure(d, "layer_norm_backward_input", 2, ref_layer_norm_backward_input,
             [&](int s) { y[s] = loom::grad<0>(layer_norm_layer)(x[s], w, b, dy[s]); }, "loom::grad");
  st.measure(d, "rms_norm_backward_input", 2, ref_rms_norm_backward_input,
             [&](int s) { y[s] = loom::grad<0>(rms_norm_layer)(x[s], w, dy[s]); }, "loom::grad");
}

// The layers of one shape for bf16 and float on the device, and for float on
// the host executor (the self-test).
void run_bf16(bench_state& st, index_t rows, index_t cols);
void run_f32(bench_state& st, index_t rows, index_t cols);
void run_f32_host(bench_state& st, index_t rows, index_t cols);
}  // namespace bench_layers
