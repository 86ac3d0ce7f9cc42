// SPDX-License-Identifier: Apache-2.0
// expect: loom: compound assignment (+=, -=, *=, /=, %=) writes the viewed elements
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>

void f(const loom::host_tensor<float, 2>& x) { x.view().t() *= 2.0f; }
