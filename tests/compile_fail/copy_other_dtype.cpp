// SPDX-License-Identifier: Apache-2.0
// expect: loom: copy() needs the same element type on both sides; convert with loom::cast<T>(x)
#include <loom/tensor/tensor.hpp>

void f(const loom::host_tensor<double, 1>& x, loom::host_tensor<float, 1>& y) { loom::copy(x, y); }
