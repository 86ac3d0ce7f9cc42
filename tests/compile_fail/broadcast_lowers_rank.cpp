// SPDX-License-Identifier: Apache-2.0
// expect: loom: broadcast_to() cannot lower the rank
#include <loom/tensor/tensor.hpp>

void f(loom::host_tensor<float, 2>& x) { (void)x.view().broadcast_to(loom::shape<1>{4}); }
