// SPDX-License-Identifier: Apache-2.0
// expect: loom: grad: gather has no derivative rule
#include <cstdint>

#include <loom/grad/grad.hpp>
#include <loom/ops/indexing.hpp>

void f(const loom::host_tensor<float, 2>& x, const loom::host_tensor<std::int64_t, 2>& picks,
       const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dx) {
  constexpr auto lay = loom::layer([](auto s, auto p) { return loom::gather(s, 1, p); });
  dx = loom::grad<0>(lay)(x, picks, dy);
}
