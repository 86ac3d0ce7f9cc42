// SPDX-License-Identifier: Apache-2.0
// bench_layers' layers in bf16 (see bench_layers.cu).
#include "bench_layers.cuh"

namespace bench_layers {
void run_bf16(bench_state& st, index_t rows, index_t cols) { run_shape<loom::bf16>(st, rows, cols); }
}  // namespace bench_layers
