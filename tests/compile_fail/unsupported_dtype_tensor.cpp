// SPDX-License-Identifier: Apache-2.0
// expect: loom: a view's element type must be one of bool, int8_t, uint8_t, int32_t, int64_t, loom::half
#include <loom/tensor/tensor.hpp>

void f() { loom::host_tensor<long double, 1> t({4}); }
