// SPDX-License-Identifier: Apache-2.0
// Compile-time check (tests/compile_time/CMakeLists.txt): device assignments
// of trees 32 nodes deep, a forward chain and its gradient. nvcc's cost must
// grow with the tree's size, not exponentially with its depth; this file
// compiles to PTX in seconds, and ctest's timeout fails it otherwise.
#include <loom/loom.hpp>

namespace {
template <int N, class X>
auto chain(const X& x) {
  if constexpr (N == 1)
    return exp(x);
  else
    return chain<N - 1>(x) + exp(x) * 0.5;
}
}  // namespace

void deep_forward(const loom::device_tensor<float, 2>& x, loom::device_tensor<float, 2>& y) { y = chain<32>(x); }

void deep_gradient(const loom::device_tensor<float, 2>& x, const loom::device_tensor<float, 2>& dy,
                   loom::device_tensor<float, 2>& dx) {
  dx = loom::grad<0>(loom::layer([](auto v) { return chain<16>(v) * row_sum(v); }))(x, dy);
}
