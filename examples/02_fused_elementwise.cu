// SPDX-License-Identifier: Apache-2.0
// A bias + GELU + residual layer written as one expression: one kernel, each
// input read once, the output written once. Checked against the same layer
// computed op by op (one launch and one temporary per op), on the GPU when
// there is one and on the host executor otherwise.
#include <loom/loom.hpp>

#include <cmath>
#include <cstdio>
#include <random>

// A new elementwise op: a functor that runs on both executors (LOOM_HD), and
// a lazy wrapper, like loom's own ops. `floating` asks for integer inputs to
// be computed in float; half and bf16 arrive as float anyway.
struct swish {
  static constexpr bool floating = true;
  float beta = 1.0f;
  template <class T>
  LOOM_HD T operator()(T x) const {
    return x / (T(1) + loom::math::exp(-T(beta) * x));
  }
};

template <loom::expression E>
auto swish_of(const E& e, float beta) {
  return loom::map(swish{beta}, e);
}

template <class Space>
int run() {
  const loom::index_t batch = 257, width = 1023;  // odd sizes on purpose
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  loom::host_tensor<float, 2> x_h({batch, width}), r_h({batch, width});
  loom::host_tensor<float, 1> w_h({width}), b_h({width});
  for (loom::index_t i = 0; i < x_h.size(); ++i) x_h.data()[i] = dist(gen), r_h.data()[i] = dist(gen);
  for (loom::index_t i = 0; i < width; ++i) w_h(i) = dist(gen), b_h(i) = dist(gen);

  auto put = [](const auto& h) {
    if constexpr (std::is_same_v<Space, loom::device>)
      return loom::to_device(h);
    else
      return h;
  };
  auto x = put(x_h), r = put(r_h);
  auto w = put(w_h), b = put(b_h);
  loom::tensor<float, 2, Space> y({batch, width});

  // The layer: one assignment, one kernel.
  const auto before = loom::launches();
  y = loom::gelu(x * w + b) + r;
  const auto after = loom::launches();
  const auto info = loom::last_eval();

  // The same layer op by op, as an eager library runs it.
  auto t1 = loom::materialize(x * w);
  auto t2 = loom::materialize(t1 + b);
  auto t3 = loom::materialize(loom::gelu(t2));
  auto y_eager = loom::materialize(t3 + r);

  const auto y1 = loom::to_host(y);
  const auto y2 = loom::to_host(y_eager);
  double worst = 0;
  for (loom::index_t i = 0; i < y1.size(); ++i) worst = std::fmax(worst, std::fabs(y1.data()[i] - y2.data()[i]));
  const unsigned long long fused = (after.host + after.device) - (before.host + before.device);

  // The user's op fuses like any other: one more kernel, reading y once.
  auto z = loom::materialize(swish_of(y, 1.5f) * 2);
  const auto zh = loom::to_host(z);
  double worst_z = 0;
  for (loom::index_t i = 0; i < zh.size(); ++i) {
    const double v = y1.data()[i];
    worst_z = std::fmax(worst_z, std::fabs(zh.data()[i] - 2 * v / (1 + std::exp(-1.5 * v))));
  }
  std::printf("y = gelu(x * w + b) + r on %s: %llu launch, path %s (vector width %d)\n",
              std::is_same_v<Space, loom::device> ? "the GPU" : "the host executor", fused,
              info.path == loom::eval_path::contiguous ? "contiguous" : "general", info.vector_width);
  std::printf("largest difference from the op-by-op version (4 launches, 3 temporaries): %.3g\n", worst);
  std::printf("a user op, 2 * swish(y, 1.5): largest difference from a double loop: %.3g\n", worst_z);
  return (fused == 1 && worst <= 1e-5 && worst_z <= 1e-5) ? 0 : 1;
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
