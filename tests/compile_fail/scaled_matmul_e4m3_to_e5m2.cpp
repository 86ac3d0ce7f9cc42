// SPDX-License-Identifier: Apache-2.0
// expect: loom: scaled_matmul writes e5m2 only from one e4m3 and one e5m2 operand
#include <loom/linalg/scaled_matmul.hpp>

void f(loom::host_tensor<loom::e5m2, 2>& y, const loom::host_tensor<loom::e4m3, 2>& a,
       const loom::host_tensor<loom::e4m3, 2>& w, const loom::host_tensor<float, 1>& s) {
  loom::scaled_matmul(y, a, s, w.t(), s);
}
