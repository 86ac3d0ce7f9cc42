// SPDX-License-Identifier: Apache-2.0
// loom::map needs at least one tensor-valued operand.
// expect: expression<X>
#include <loom/expr/expression.hpp>

struct plus {
  float operator()(float a, float b) const { return a + b; }
};
void f() { (void)loom::map(plus{}, 1.0f, 2.0f); }
