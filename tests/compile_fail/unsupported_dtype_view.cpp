// SPDX-License-Identifier: Apache-2.0
// expect: loom: a view's element type must be one of bool, int8_t, uint8_t, int32_t, int64_t, loom::half
#include <cstdint>

#include <loom/tensor/view.hpp>

void f(std::uint32_t* p) { loom::view<std::uint32_t, 1, loom::host> v(p, loom::shape<1>{4}); (void)v; }
