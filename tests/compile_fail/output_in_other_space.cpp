// SPDX-License-Identifier: Apache-2.0
// expect: loom: the expression lives in another memory space than the output
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>

void f(loom::host_tensor<float, 1>& h, const loom::device_tensor<float, 1>& d) { h = d * 2.0f; }
