// SPDX-License-Identifier: Apache-2.0
// bench_layers' layers in f32 on the host executor, for `bench_layers
// --self-test` (see bench_layers.cu). A C++ file: the host compiler alone
// builds it, faster than nvcc would with the device forms beside it.
#include "bench_layers.cuh"

namespace bench_layers {
void run_f32_host(bench_state& st, index_t rows, index_t cols) { run_shape<float, loom::host>(st, rows, cols); }
}  // namespace bench_layers
