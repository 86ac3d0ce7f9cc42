// SPDX-License-Identifier: Apache-2.0
// bench_layers' layers in f32 (see bench_layers.cu).
#include "bench_layers.cuh"

namespace bench_layers {
void run_f32(bench_state& st, index_t rows, index_t cols, bool on_host) {
  if (on_host)
    run_shape<float, loom::host>(st, rows, cols);
  else
    run_shape<float>(st, rows, cols);
}
}  // namespace bench_layers
