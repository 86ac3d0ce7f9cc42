// SPDX-License-Identifier: Apache-2.0
// expect: loom: cannot assign to a view of const elements
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>

void f(const loom::host_tensor<float, 1>& x) { x.view() = x * 2.0f; }
