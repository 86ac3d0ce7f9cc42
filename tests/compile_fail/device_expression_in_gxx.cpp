// SPDX-License-Identifier: Apache-2.0
// Evaluating an expression on device tensors launches a kernel, which a file
// compiled by g++ (not nvcc) cannot do.
// expect: loom: this operation launches a kernel on device tensors; compile this file with nvcc
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>

void f(loom::device_tensor<float, 1>& y, const loom::device_tensor<float, 1>& x) { y = x * 2.0f; }
