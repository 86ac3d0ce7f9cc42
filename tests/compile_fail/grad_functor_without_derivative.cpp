// SPDX-License-Identifier: Apache-2.0
// expect: loom: grad: this functor (named in the lines above) has no derivative rule
#include <loom/grad/grad.hpp>
#include <loom/ops/math.hpp>

struct my_square {
  template <class T>
  T operator()(T x) const {
    return x * x;
  }
};
void f(const loom::host_tensor<float, 2>& x, const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dx) {
  constexpr auto lay = loom::layer([](auto v) { return loom::map(my_square{}, v) + 1.0f; });
  dx = loom::grad<0>(lay)(x, dy);
}
