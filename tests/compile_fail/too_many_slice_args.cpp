// SPDX-License-Identifier: Apache-2.0
// expect: loom: slice() takes at most one argument per axis
#include <loom/tensor/tensor.hpp>

void f(loom::host_tensor<float, 2>& x) { (void)x.slice(0, 1, loom::whole); }
