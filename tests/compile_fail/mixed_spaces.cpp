// SPDX-License-Identifier: Apache-2.0
// expect: loom: an expression mixes host and device tensors; copy one side first with loom::to_device(x)
#include <loom/ops/arithmetic.hpp>

void f(const loom::host_tensor<float, 1>& h, const loom::device_tensor<float, 1>& d) { (void)(h + d); }
