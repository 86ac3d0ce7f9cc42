// SPDX-License-Identifier: Apache-2.0
// expect: loom: to_dlpack(view, keep_alive) with a named tensor would copy its elements
#include <loom/interop/dlpack.hpp>

void f(loom::host_tensor<float, 2>& t) { (void)loom::to_dlpack(t.t(), t); }
