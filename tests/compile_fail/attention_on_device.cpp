// SPDX-License-Identifier: Apache-2.0
// expect: loom: attention on device tensors launches kernels; compile this file with nvcc
#include <loom/nn/attention.hpp>

void f(const loom::device_tensor<float, 4>& q, const loom::device_tensor<float, 4>& k) {
  (void)loom::attention(loom::causal)(q, k, k);
}
