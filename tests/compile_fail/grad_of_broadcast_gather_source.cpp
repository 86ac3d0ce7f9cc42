// SPDX-License-Identifier: Apache-2.0
// expect: loom: grad: an embedding, index_select or gather is broadcast to the layer's output (a higher rank)
#include <cstdint>

#include <loom/grad/grad.hpp>
#include <loom/ops/indexing.hpp>

void f(const loom::host_tensor<float, 2>& x, const loom::host_tensor<std::int64_t, 2>& picks,
       const loom::host_tensor<float, 3>& z, const loom::host_tensor<float, 3>& dy, loom::host_tensor<float, 2>& dx) {
  constexpr auto lay = loom::layer([](auto s, auto p, auto b) { return loom::gather(s, 1, p) + b; });
  dx = loom::grad<0>(lay)(x, picks, z, dy);
}
