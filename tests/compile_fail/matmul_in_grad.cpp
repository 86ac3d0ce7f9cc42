// SPDX-License-Identifier: Apache-2.0
// expect: loom: matmul inside a loom::layer
#include <loom/grad/grad.hpp>
#include <loom/linalg/matmul.hpp>

void f(const loom::host_tensor<float, 2>& x, const loom::host_tensor<float, 2>& w,
       const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dx) {
  constexpr auto lay = loom::layer([](auto a, auto b) { return loom::relu(loom::matmul(a * 2.0f, b)); });
  dx = loom::grad<0>(lay)(x, w, dy);
}
