// SPDX-License-Identifier: Apache-2.0
// expect: loom: to_dlpack(t) of a named tensor: move it in
#include <loom/interop/dlpack.hpp>

void f(loom::host_tensor<float, 2>& t) { (void)loom::to_dlpack(t); }
