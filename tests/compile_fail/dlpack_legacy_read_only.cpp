// SPDX-License-Identifier: Apache-2.0
// expect: loom: the legacy DLManagedTensor cannot mark data read-only
#include <loom/interop/dlpack.hpp>

void f(const loom::host_tensor<float, 2>& t) { (void)loom::to_dlpack_legacy(t.view(), nullptr); }
