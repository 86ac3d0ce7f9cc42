// SPDX-License-Identifier: Apache-2.0
// expect: loom: the expression has a higher rank than the output it is assigned to
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>

void f(loom::host_tensor<float, 1>& y, const loom::host_tensor<float, 2>& x) { y = x + 1.0f; }
