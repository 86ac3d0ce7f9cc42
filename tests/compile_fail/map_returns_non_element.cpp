// SPDX-License-Identifier: Apache-2.0
// expect: loom: a function used in loom::map must return one of loom's element types
#include <loom/expr/expression.hpp>

struct to_pointer {
  const char* operator()(float) const { return "no"; }
};
void f(const loom::host_tensor<float, 1>& x) { (void)loom::map(to_pointer{}, x); }
