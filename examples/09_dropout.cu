// SPDX-License-Identifier: Apache-2.0
// Dropout fused into a layer: bias + GELU + dropout + residual is one
// assignment and one kernel, and its backward regenerates the same mask from
// the same (seed, step) instead of storing it. The random values depend only
// on (seed, step, element), so the host executor gives the same mask as the
// GPU. Then a data set shuffled each epoch with randperm and read in
// minibatches. Runs on the GPU when there is one and on the host executor
// otherwise.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>

#include <loom/loom.hpp>

template <class Space>
int run() {
  const loom::index_t batch = 129, width = 515;  // odd sizes on purpose
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  loom::host_tensor<float, 2> x_h({batch, width}), r_h({batch, width}), dy_h({batch, width});
  loom::host_tensor<float, 1> b_h({width});
  for (loom::index_t i = 0; i < x_h.size(); ++i)
    x_h.data()[i] = dist(gen), r_h.data()[i] = dist(gen), dy_h.data()[i] = 1;
  for (loom::index_t i = 0; i < width; ++i) b_h(i) = dist(gen);
  auto put = [](const auto& h) {
    if constexpr (std::is_same_v<Space, loom::device>)
      return loom::to_device(h);
    else
      return h;
  };
  auto x = put(x_h), r = put(r_h), dy = put(dy_h);
  auto b = put(b_h);
  loom::tensor<float, 2, Space> y({batch, width}), dx({batch, width});

  const std::uint64_t seed = 1234;
  const float p = 0.1f;
  for (std::uint64_t step = 0; step < 3; ++step) {
    // Forward: one kernel; the mask is never written to memory.
    const auto before = loom::launches();
    y = loom::dropout(loom::gelu(x + b), p, seed, step) + r;
    const auto after = loom::launches();
    // Backward of the dropout: the same mask, regenerated from (seed, step).
    dx = loom::dropout_backward(dy, p, seed, step);

    // The kept share and the launch count.
    const auto dx_h = loom::to_host(dx);
    loom::index_t kept = 0;
    for (loom::index_t i = 0; i < dx_h.size(); ++i) kept += dx_h.data()[i] != 0.0f;
    const auto launches = std::is_same_v<Space, loom::device> ? after.device - before.device : after.host - before.host;
    std::printf("%s step %llu: %llu launch, kept %.4f of the elements (1 - p = %.4f)\n", Space::name,
                static_cast<unsigned long long>(step), static_cast<unsigned long long>(launches),
                static_cast<double>(kept) / static_cast<double>(dx_h.size()), 1.0 - p);
    if (launches != 1) return 1;
  }

  // The same mask on the host executor: the values do not depend on the executor.
  loom::host_tensor<float, 2> mask_here({batch, width});
  mask_here = loom::dropout_backward(dy_h, p, seed, 2);
  const auto dx_h = loom::to_host(dx);
  for (loom::index_t i = 0; i < dx_h.size(); ++i)
    if (dx_h.data()[i] != mask_here.data()[i]) {
      std::printf("MISMATCH at element %lld\n", static_cast<long long>(i));
      return 1;
    }
  std::printf("%s mask equals the host executor's: ok\n", Space::name);
  return 0;
}

// Shuffling: each epoch reads the samples in a new order, randperm(samples,
// seed, epoch), in minibatches gathered by index_select. Sample i holds the
// value i in every feature, so the sum over an epoch shows each sample read once.
template <class Space>
int shuffle() {
  const loom::index_t samples = 1001, features = 3, batch = 64;  // the last minibatch is shorter
  loom::host_tensor<float, 2> data_h({samples, features});
  for (loom::index_t i = 0; i < samples; ++i)
    for (loom::index_t j = 0; j < features; ++j) data_h(i, j) = static_cast<float>(i);
  const loom::tensor<float, 2, Space> data = [&] {
    if constexpr (std::is_same_v<Space, loom::device>)
      return loom::to_device(data_h);
    else
      return data_h;
  }();
  const std::uint64_t seed = 2024;
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    double seen = 0;
    const auto order = loom::randperm<Space>(samples, seed, epoch);  // a new order each epoch
    for (loom::index_t start = 0; start < samples; start += batch) {
      const loom::index_t rows = std::min(batch, samples - start);
      loom::tensor<float, 2, Space> x({rows, features});
      x = loom::index_select(data, 0, order.slice(loom::range(start, start + rows)));  // one kernel
      seen += loom::sum(x).item();  // a training step reads the minibatch x here
    }
    const auto first = loom::to_host(order);
    const double want = static_cast<double>(features) * static_cast<double>(samples * (samples - 1) / 2);
    std::printf("%s epoch %llu: samples %lld, %lld, %lld, ... first; each sample read once: %s\n", Space::name,
                static_cast<unsigned long long>(epoch), static_cast<long long>(first(0)),
                static_cast<long long>(first(1)), static_cast<long long>(first(2)), seen == want ? "ok" : "NO");
    if (seen != want) return 1;
  }
  return 0;
}

int main() {
  if (loom::gpu::is_available()) {
    const int failed = run<loom::device>();
    return failed ? failed : shuffle<loom::device>();
  }
  std::printf("no GPU (%s): running on the host executor\n", loom::gpu::unavailable_reason().c_str());
  const int failed = run<loom::host>();
  return failed ? failed : shuffle<loom::host>();
}
