// SPDX-License-Identifier: Apache-2.0
// expect: loom: negation of a bool tensor; use logical_not
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>

void f(const loom::host_tensor<bool, 1>& x) { (void)loom::materialize(-x); }
