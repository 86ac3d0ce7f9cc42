// SPDX-License-Identifier: Apache-2.0
// loom's side of bench/cpu/conv_vs_torch.py: one pass of a float32 3x3
// convolution (padding 1, stride 1) on the host executor, timed: the
// median and the fastest of `runs` calls after one warm-up call, printed
// as one JSON line. The passes: fwd (conv2d), fwd_bias_relu (conv2d with
// bias and ReLU in the GEMM's epilogue), dx (conv2d_backward_input), dw
// (conv2d_backward_weight). Threads: the host executor's (OMP_NUM_THREADS).
// Usage: bench_conv_cpu N C H W PASS RUNS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <loom/core/env.hpp>
#include <loom/nn/conv.hpp>

namespace {
using loom::index_t;

loom::host_tensor<float, 4> random(const loom::shape<4>& s, std::mt19937& g) {
  loom::host_tensor<float, 4> t(s);
  std::uniform_real_distribution<float> d(-1, 1);
  for (index_t i = 0; i < t.size(); ++i) t.data()[i] = d(g);
  return t;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s N C H W fwd|fwd_bias_relu|dx|dw RUNS\n", argv[0]);
    return 2;
  }
  const index_t n = std::atol(argv[1]), c = std::atol(argv[2]), h = std::atol(argv[3]), w = std::atol(argv[4]);
  const std::string pass = argv[5];
  const int runs = std::atoi(argv[6]);
  std::mt19937 g(1);
  const loom::shape<4> xs{n, c, h, w}, ws{c, c, 3, 3};
  const auto x = random(xs, g), wt = random(ws, g), dy = random(xs, g);
  loom::host_tensor<float, 1> b(loom::shape<1>{c});
  loom::fill(b, 0.5f);
  loom::host_tensor<float, 4> y(xs), dx(xs), dw(ws);
  const loom::conv2d_options plain{.padding = {1, 1}};
  const loom::conv2d_options fused{.padding = {1, 1}, .activation = loom::matmul_activation::relu};
  const auto call = [&] {
    if (pass == "fwd")
      loom::conv2d_into(y, x, wt, plain);
    else if (pass == "fwd_bias_relu")
      loom::conv2d_into(y, x, wt, b, fused);
    else if (pass == "dx")
      loom::conv2d_backward_input_into(dx, dy, wt, plain);
    else if (pass == "dw")
      loom::conv2d_backward_weight_into(dw, dy, x, plain);
    else
      throw loom::value_error("bench_conv_cpu: unknown pass " + pass);
  };
  std::vector<double> ms;
  try {
    call();
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("{\"impl\": \"loom\", \"pass\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"threads\": %d}\n",
              pass.c_str(), ms[ms.size() / 2], ms.front(), loom::host_threads());
  return 0;
}
