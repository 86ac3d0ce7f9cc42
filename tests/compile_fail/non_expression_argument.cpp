// SPDX-License-Identifier: Apache-2.0
// A std::vector is not a loom expression: the call has no viable overload, and
// the diagnostic names the concept it fails.
// expect: expression<E>
// expect: does not satisfy 'expression'
#include <vector>

#include <loom/ops/math.hpp>

void f(const std::vector<float>& v) { (void)loom::exp(v); }
