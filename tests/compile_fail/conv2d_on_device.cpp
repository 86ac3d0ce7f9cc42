// SPDX-License-Identifier: Apache-2.0
// expect: loom: convolution and pooling on device tensors are not built yet
#include <loom/nn/conv.hpp>

void f(const loom::device_tensor<float, 4>& x, const loom::device_tensor<float, 4>& w) { (void)loom::conv2d(x, w); }
