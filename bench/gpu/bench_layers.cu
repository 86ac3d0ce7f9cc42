// SPDX-License-Identifier: Apache-2.0
// Row-fused layers on the GPU as a share of the device-to-device copy
// bandwidth measured in the same run: softmax, log_softmax, layer_norm and
// rms_norm forward, and their input gradients (softmax_backward,
// log_softmax_backward, layer_norm_backward_input, rms_norm_backward_input),
// softmax of rank-3 activations, add_rms_norm and cross_entropy_backward,
// at 4096 x {1024, 4096, 16384, 65536} in bf16 and float; and the same input
// gradients derived by loom::grad from the forward layers (impl "loom::grad",
// docs/08_gradients.md), which read x where the built-in softmax backward
// reads the forward output, and the derived softmax backward reading the
// rows' max and sum that the forward saved (impl "loom::grad, saved max and
// sum"; the statistics' [rows, 1] reads are not counted), and the softmax
// forward that writes them (impl "loom, writing max and sum"). Bytes that must move:
// one read of each full-size input and one write of the output (the weight
// and bias vectors too). Each output is checked against a double reference on
// four rows before timing. PyTorch eager and torch.compile timings of the same
// layers come from torch_layers.py.
// Usage: bench_layers [--quick] [--json FILE]; exits 77 without a GPU.
// bench_layers --self-test checks the references against the host executor
// in float (the bf16 rows use the same references; instantiating the host
// executor for bf16 as well would double this program's compile time in CI).
#include "bench_layers.cuh"

using namespace bench_layers;

int main(int argc, char** argv) {
  bench_state st{{options::parse(argc, argv)}};
  if (st.opt.self_test) {
    // The references, tolerances and data of this program, checked against
    // loom's host executor in float: no GPU needed.
    print_header();
    for (index_t cols : {index_t{1023}, index_t{4099}}) run_f32_host(st, 9, cols);
    std::printf("bench_layers --self-test: %s\n", st.failed ? "FAIL" : "all checks passed on the host executor");
    return st.failed ? 1 : 0;
  }
  if (!loom::gpu::is_available()) return no_gpu("bench_layers");
  try {
    if (st.opt.quick) st.timing = {1, 3};
    const auto p = loom::gpu::properties();
    std::printf("bench_layers on %s (%d SMs, L2 %d MiB); median of %d samples after %d warm-up\n", p.name.c_str(),
                p.sm_count, p.l2_cache_bytes >> 20, st.timing.runs, st.timing.warmup);
    print_header();
    st.copy = measure_copy("gpu_layers", st.opt, st.timing);
    const index_t rows = st.opt.quick ? 64 : 4096;
    const std::vector<index_t> widths = st.opt.quick ? std::vector<index_t>{1023, 4097}
                                                     : std::vector<index_t>{1024, 4096, 16384, 65536};
    for (index_t cols : widths) {
      run_bf16(st, rows, cols);
      run_f32(st, rows, cols);
    }
    if (st.failed) {
      std::printf("FAIL: a result differs from its double reference\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {  // loom::error, and thrust's and the standard library's
    std::fprintf(stderr, "bench_layers: %s\n", e.what());
    return 1;
  }
}
