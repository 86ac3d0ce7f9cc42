// SPDX-License-Identifier: Apache-2.0
// expect: loom: matmul inside a loom::layer
#include <loom/linalg/matmul.hpp>
#include <loom/nn/layer.hpp>

void f(const loom::host_tensor<float, 2>& x, const loom::host_tensor<float, 2>& w, loom::host_tensor<float, 2>& y) {
  constexpr auto lay = loom::layer([](auto a, auto b) { return loom::matmul(a, b); });
  y = lay(x, w);
}
