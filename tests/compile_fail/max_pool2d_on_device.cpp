// SPDX-License-Identifier: Apache-2.0
// expect: loom: pooling runs on host tensors only
#include <loom/nn/pool.hpp>

void f(const loom::device_tensor<float, 4>& x) { (void)loom::max_pool2d(x, {.kernel = {2, 2}}); }
