// SPDX-License-Identifier: Apache-2.0
// bench_layers' layers in f32 (see bench_layers.cu).
#include "bench_layers.cuh"

namespace bench_layers {
void run_f32(bench_state& st, index_t rows, index_t cols) { run_shape<float>(st, rows, cols); }
}  // namespace bench_layers
