// SPDX-License-Identifier: Apache-2.0
// expect: loom: cast<T> needs one of loom's element types
#include <loom/expr/expression.hpp>

void f(const loom::host_tensor<float, 1>& x) { (void)loom::cast<long double>(x); }
