// SPDX-License-Identifier: Apache-2.0
// Fused layers written by a user in a few lines, each ONE kernel:
//  1. RMSNorm followed by a SwiGLU gate;
//  2. softmax with a temperature and a causal mask.
// Each is checked against the same computation done op by op.
#include <loom/loom.hpp>

#include <cmath>
#include <cstdio>
#include <random>

// A layer is a function of placeholders; the row reductions inside it run in
// the same kernel as the elementwise work around them.
constexpr auto rms_swiglu = loom::layer([](auto x, auto weight, auto gate) {
  auto normed = x * loom::rsqrt(loom::row_mean(x * x) + 1e-6) * weight;
  return loom::silu(gate) * normed;
});

constexpr auto causal_softmax = loom::layer([](auto scores, auto row_ids, auto temperature) {
  auto z = scores / temperature;
  auto masked = loom::where(loom::column_index(scores) <= row_ids, z, -INFINITY);
  auto e = loom::exp(masked - loom::row_max(masked));
  return e / loom::row_sum(e);
});

template <class Space>
int run() {
  const loom::index_t rows = 33, width = 1000;
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  loom::host_tensor<loom::bf16, 2> x_h({rows, width}), g_h({rows, width});
  loom::host_tensor<loom::bf16, 1> w_h({width});
  loom::host_tensor<float, 2> s_h({rows, rows});
  loom::host_tensor<std::int64_t, 2> id_h({rows, 1});
  for (loom::index_t i = 0; i < x_h.size(); ++i) x_h.data()[i] = dist(gen), g_h.data()[i] = dist(gen);
  for (loom::index_t i = 0; i < width; ++i) w_h(i) = dist(gen);
  for (loom::index_t i = 0; i < s_h.size(); ++i) s_h.data()[i] = dist(gen);
  for (loom::index_t i = 0; i < rows; ++i) id_h(i, 0) = i;
  auto put = [](const auto& h) {
    if constexpr (std::is_same_v<Space, loom::device>)
      return loom::to_device(h);
    else
      return h;
  };
  auto x = put(x_h), g = put(g_h);
  auto w = put(w_h);
  auto s = put(s_h);
  auto ids = put(id_h);

  loom::tensor<loom::bf16, 2, Space> y({rows, width});
  loom::tensor<float, 2, Space> p({rows, rows});
  const auto before = loom::launches();
  y = rms_swiglu(x, w, g);
  p = causal_softmax(s, ids, 0.8);
  const auto after = loom::launches();
  const unsigned long long launches = (after.host + after.device) - (before.host + before.device);

  // Op by op: the mean square, the normalization, the gate, then the product.
  auto ms = loom::materialize(loom::row_mean(loom::cast<float>(x) * loom::cast<float>(x)));
  auto normed = loom::materialize(x * loom::rsqrt(ms + 1e-6) * w);
  auto gated = loom::materialize(loom::silu(g));
  auto y_ref = loom::materialize(gated * normed);
  const auto a = loom::to_host(y);
  const auto b = loom::to_host(y_ref);
  double worst = 0;  // relative to the value: the output is bf16 (8 significant bits)
  for (loom::index_t i = 0; i < a.size(); ++i) {
    const double fa = static_cast<float>(a.data()[i]), fb = b.data()[i];
    worst = std::fmax(worst, std::fabs(fa - fb) / (std::fabs(fb) + 1e-3));
  }

  const auto ph = loom::to_host(p);
  double worst_p = 0;
  for (loom::index_t r = 0; r < rows; ++r) {
    double m = -INFINITY, sum = 0;
    for (loom::index_t c = 0; c <= r; ++c) m = std::fmax(m, s_h(r, c) / 0.8);
    for (loom::index_t c = 0; c <= r; ++c) sum += std::exp(s_h(r, c) / 0.8 - m);
    for (loom::index_t c = 0; c < rows; ++c) {
      const double want = c <= r ? std::exp(s_h(r, c) / 0.8 - m) / sum : 0.0;
      worst_p = std::fmax(worst_p, std::fabs(ph(r, c) - want));
    }
  }
  std::printf("rms_swiglu and causal_softmax on %s: %llu launches for 2 layers\n",
              std::is_same_v<Space, loom::device> ? "the GPU" : "the host executor", launches);
  std::printf("rms_swiglu vs op by op (relative, bf16 output): %.3g; causal softmax vs double reference: %.3g\n",
              worst, worst_p);
  return (launches == 2 && worst <= 1e-2 && worst_p <= 1e-6) ? 0 : 1;
}

int main() {
  try {
    if (loom::gpu::is_available()) return run<loom::device>();
    std::printf("no GPU (%s): running on the host executor\n", loom::gpu::unavailable_reason().c_str());
    return run<loom::host>();
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
