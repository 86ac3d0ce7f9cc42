// SPDX-License-Identifier: Apache-2.0
// Compiled without LOOM_HAS_CUDNN (a build that found no cuDNN): conv2d on device tensors says what it needs.
// expect: loom: conv2d and conv1d on device tensors need cuDNN 9
#include <loom/nn/conv.hpp>

void f(const loom::device_tensor<float, 4>& x, const loom::device_tensor<float, 4>& w) { (void)loom::conv2d(x, w); }
