// SPDX-License-Identifier: Apache-2.0
// expect: loom: a tensor owns its elements; use a view<const T, ...> for read-only access
#include <loom/tensor/tensor.hpp>

void f() { loom::host_tensor<const float, 1> t; (void)t; }
