// SPDX-License-Identifier: Apache-2.0
// The control: correct uses of the same headers compile with the same flags,
// so a failure of the other files comes from the misuse they show.
#include <loom/exec/assign.hpp>
#include <loom/ops/arithmetic.hpp>
#include <loom/ops/math.hpp>

void f(loom::host_tensor<float, 2>& y, const loom::host_tensor<float, 2>& x) {
  y = loom::exp(x) * 2.0f + 1;
  y.slice(0) = x.slice(1, loom::whole) + loom::cast<float>(x.slice(0));
  y.slice(1) += x.slice(0) * 2.0f;
  y.t() *= 2;
}
