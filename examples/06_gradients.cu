// SPDX-License-Identifier: Apache-2.0
// The gradient of a user's layer, derived by loom::grad from the layer's
// expression: RMSNorm scaled by a swish gate with its own derivative rule.
// Checked against central finite differences of the forward in double.
#include <loom/loom.hpp>

#include <cmath>
#include <cstdio>
#include <random>

// A user op with its derivative, so loom::grad can differentiate through it.
struct swish {
  static constexpr bool floating = true;
  float beta = 1.0f;
  template <class T>
  LOOM_HD T operator()(T x) const {
    return x / (T(1) + loom::math::exp(-T(beta) * x));
  }
  template <int I, class T>
  LOOM_HD T derivative(T x) const {
    const T s = T(1) / (T(1) + loom::math::exp(-T(beta) * x));
    return s + T(beta) * x * s * (T(1) - s);
  }
};

// The rows' mean square is named loom::saved<0>: a backward given it as a
// tensor reads it instead of computing it. (The sum of its adjoint takes a
// pass over each row either way; on the host, unsaved, the mean square
// shares that pass, docs/08_gradients.md.)
constexpr auto gated_rms = loom::layer([](auto x, auto w) {
  return loom::map(swish{1.5f}, x) * (x * loom::rsqrt(loom::saved<0>(loom::row_mean(x * x)) + 1e-6) * w);
});

template <class Space>
int run() {
  const loom::index_t rows = 6, width = 37;
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  loom::host_tensor<double, 2> x_h({rows, width}), dy_h({rows, width});
  loom::host_tensor<double, 1> w_h({width});
  for (loom::index_t i = 0; i < x_h.size(); ++i) x_h.data()[i] = dist(gen), dy_h.data()[i] = dist(gen);
  for (loom::index_t i = 0; i < width; ++i) w_h(i) = 1.0 + 0.25 * dist(gen);
  auto put = [](const auto& h) {
    if constexpr (std::is_same_v<Space, loom::device>)
      return loom::to_device(h);
    else
      return h;
  };
  auto x = put(x_h), dy = put(dy_h);
  auto w = put(w_h);
  loom::tensor<double, 2, Space> dx({rows, width});
  loom::tensor<double, 1, Space> dw({width});

  const auto info = loom::grad<0, 1>(gated_rms)(x, w, dy).into(dx, dw);

  // The same gradients from the mean square a forward pass saved ([rows, 1]).
  loom::tensor<double, 2, Space> mean_square({rows, 1});
  mean_square = loom::saved_value<0>(gated_rms)(x, w);
  loom::tensor<double, 2, Space> dx_saved({rows, width});
  loom::tensor<double, 1, Space> dw_saved({width});
  const auto info_saved = loom::grad<0, 1>(gated_rms).with_saved(mean_square)(x, w, dy).into(dx_saved, dw_saved);

  // Finite differences of sum(dy * layer(x, w)) on the host, in double.
  auto loss = [&] {
    const auto y = loom::materialize(gated_rms(x_h, w_h));
    double s = 0;
    for (loom::index_t i = 0; i < y.size(); ++i) s += dy_h.data()[i] * y.data()[i];
    return s;
  };
  auto fd = [&](double& v) {
    const double v0 = v, h = 1e-6;
    v = v0 + h;
    const double up = loss();
    v = v0 - h;
    const double down = loss();
    v = v0;
    return (up - down) / (2 * h);
  };
  const auto dxh = loom::to_host(dx), dxs = loom::to_host(dx_saved);
  const auto dwh = loom::to_host(dw), dws = loom::to_host(dw_saved);
  double worst = 0;
  for (loom::index_t i = 0; i < x_h.size(); ++i) {
    const double want = fd(x_h.data()[i]);
    worst = std::fmax(worst, std::fmax(std::fabs(dxh.data()[i] - want), std::fabs(dxs.data()[i] - want)));
  }
  for (loom::index_t i = 0; i < width; ++i) {
    const double want = fd(w_h(i));
    worst = std::fmax(worst, std::fmax(std::fabs(dwh(i) - want), std::fabs(dws(i) - want)));
  }
  std::printf("grad of gated_rms on %s: %d kernels for dx and dw (row passes: %d, %d with the saved mean square); "
              "worst difference from finite differences %.3g\n",
              std::is_same_v<Space, loom::device> ? "the GPU" : "the host executor", info.kernels,
              info.rows.row_passes, info_saved.rows.row_passes, worst);
  return (info.kernels == 2 && info_saved.kernels == 2 && info_saved.rows.row_passes == 1 &&
          info.rows.row_passes == (std::is_same_v<Space, loom::device> ? 2 : 1) && worst <= 1e-6)
             ? 0
             : 1;
}

// The spellings of docs/08_gradients.md, on the host.
void spellings(const loom::host_tensor<float, 2>& x, const loom::host_tensor<float, 1>& w,
               const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dx,
               loom::host_tensor<float, 1>& dw) {
constexpr auto rms = loom::layer([](auto x, auto w) { return x * rsqrt(row_mean(x * x) + 1e-6) * w; });

dx = loom::grad<0>(rms)(x, w, dy);              // one row kernel
loom::grad<0, 1>(rms)(x, w, dy).into(dx, dw);   // dx and dw: 2 kernels
loom::grad<0, 1>(rms)(x, w, dy).into(loom::skip, dw);  // dw alone: 2 kernels
loom::grad(rms)(x, w, dy).into(dx, dw);         // every input
}

// Saving a row statistic for the backward (docs/08_gradients.md).
void saving(const loom::host_tensor<float, 2>& x, const loom::host_tensor<float, 1>& w,
            const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dx, loom::host_tensor<float, 1>& dw,
            loom::host_tensor<float, 2>& y) {
constexpr auto rms = loom::layer([](auto x, auto w) {
  return x * rsqrt(loom::saved<0>(row_mean(x * x)) + 1e-6) * w;  // names the mean square 0
});

loom::host_tensor<float, 2> ms({x.extent(0), 1});  // one value per row
// The forward writes y and ms in one kernel, row_mean(x * x) computed once:
loom::assign_with_row_stat(y, rms(x, w), ms, loom::saved_value<0>(rms)(x, w));
loom::grad(rms).with_saved(ms)(x, w, dy).into(dx, dw);  // the backward reads ms
}

// Saving a softmax's exponentials and their sum (docs/08_gradients.md): the
// backward reads e, the sum and dy, and computes no exponential.
void saving_exponentials(const loom::host_tensor<float, 2>& x, const loom::host_tensor<float, 2>& dy,
                         loom::host_tensor<float, 2>& dx, loom::host_tensor<float, 2>& e_saved,
                         loom::host_tensor<float, 2>& s_saved) {
constexpr auto sm = loom::layer([](auto z) {
  auto e = loom::saved<0>(exp(z - stop_gradient(row_max(z))));  // full-size, as y would be
  return e / loom::saved<1>(row_sum(e));
});
e_saved = loom::saved_value<0>(sm)(x);  // [..., C]
s_saved = loom::saved_value<1>(sm)(x);  // [..., 1]
dx = loom::grad<0>(sm).with_saved(e_saved, s_saved)(x, dy);
}

int main() {
  try {
    loom::host_tensor<float, 2> x({3, 5}), dy({3, 5}), dx({3, 5});
    loom::host_tensor<float, 1> w({5}), dw({5});
    loom::fill(x, 0.5f), loom::fill(dy, 1.0f), loom::fill(w, 2.0f);
    spellings(x, w, dy, dx, dw);
    loom::host_tensor<float, 2> y({3, 5});
    saving(x, w, dy, dx, dw, y);
    loom::host_tensor<float, 2> e_saved({3, 5}), s_saved({3, 1});
    saving_exponentials(x, dy, dx, e_saved, s_saved);
    if (loom::gpu::is_available()) return run<loom::device>();
    std::printf("no GPU (%s): running on the host executor\n", loom::gpu::unavailable_reason().c_str());
    return run<loom::host>();
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
