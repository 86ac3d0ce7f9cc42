// SPDX-License-Identifier: Apache-2.0
// expect: loom: grad: the source of an embedding, index_select or gather must be a layer input itself
#include <cstdint>

#include <loom/grad/grad.hpp>
#include <loom/ops/indexing.hpp>

void f(const loom::host_tensor<std::int32_t, 1>& ids, const loom::host_tensor<float, 2>& w,
       const loom::host_tensor<float, 2>& dy, loom::host_tensor<float, 2>& dw) {
  constexpr auto lay = loom::layer([](auto i, auto t) { return loom::embedding(i, t * 2.0f); });
  dw = loom::grad<1>(lay)(ids, w, dy);
}
