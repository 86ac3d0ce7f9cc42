// SPDX-License-Identifier: Apache-2.0
// expect: loom: grad: an integer or bool input has no gradient
#include <cstdint>

#include <loom/grad/grad.hpp>

void f(const loom::host_tensor<float, 2>& x, const loom::host_tensor<std::int32_t, 2>& m,
       const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dm) {
  constexpr auto lay = loom::layer([](auto v, auto k) { return v * k; });
  dm = loom::grad<1>(lay)(x, m, dy);
}
