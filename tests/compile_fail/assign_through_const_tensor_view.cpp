// SPDX-License-Identifier: Apache-2.0
// expect: loom: cannot assign to a view of const elements
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>

// A const tensor's views are views of const elements: writing through one fails.
void f(const loom::host_tensor<float, 2>& w) { w.t() = w.t() * 2.0f; }
