// SPDX-License-Identifier: Apache-2.0
// expect: loom: grad: with_saved gives a tensor for loom::saved<K>
#include <loom/grad/grad.hpp>

void f(const loom::host_tensor<float, 2>& x, const loom::host_tensor<float, 2>& m,
       const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dx) {
  // The layer names loom::saved<0> only; with_saved's second tensor is saved<1>.
  constexpr auto lay = loom::layer([](auto v) { return v - loom::saved<0>(loom::row_mean(v)); });
  dx = loom::grad<0>(lay).with_saved(m, m)(x, dy);
}
