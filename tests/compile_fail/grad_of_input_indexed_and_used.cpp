// SPDX-License-Identifier: Apache-2.0
// expect: loom: grad: an input read by embedding, index_select or gather is used elsewhere in the layer too
#include <cstdint>

#include <loom/grad/grad.hpp>
#include <loom/ops/indexing.hpp>

void f(const loom::host_tensor<std::int32_t, 1>& ids, const loom::host_tensor<float, 2>& w,
       const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dw) {
  constexpr auto lay = loom::layer([](auto i, auto t) { return loom::index_select(t, 0, i) + t; });
  dw = loom::grad<1>(lay)(ids, w, dy);
}
