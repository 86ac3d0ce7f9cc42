// SPDX-License-Identifier: Apache-2.0
// conv2d on device tensors (cuDNN through loom) at ResNet-50's 3x3 stage
// shapes, bf16, channels last (NHWC), batch 32: the forward, the forward
// with bias and ReLU (fused into cuDNN's call), the data gradient and the
// weight gradient. bench/gpu/conv_torch.py times PyTorch's calls on the
// same shapes (op, shape, dtype and impl "torch ...") into the same JSON
// file, so the report sets them side by side. First a check against the
// host executor at a small odd size.
// Usage: bench_conv_gpu [--quick] [--json FILE]; exits 77 without a GPU.
#include <cstdio>
#include <string>

#include "gpu_bench.cuh"

namespace {
using loom::index_t;
using namespace loom_bench;
using T = loom::bf16;

constexpr loom::conv2d_options relu_nhwc{
    .padding = {1, 1}, .activation = loom::matmul_activation::relu, .layout = loom::conv_layout::nhwc};
constexpr loom::conv2d_options plain_nhwc{.padding = {1, 1}, .layout = loom::conv_layout::nhwc};

// The fused forward and the two gradients on the GPU against the host in
// float on the same bf16 values, at an odd size: "ok" or why not.
std::string check_small() {
  loom::host_tensor<T, 4> x({3, 9, 11, 24}), w({40, 24, 3, 3}), dy({3, 9, 11, 40});
  loom::host_tensor<T, 1> b(loom::shape<1>{40});
  hash_fill(x, 1), hash_fill(w, 2), hash_fill(dy, 3), hash_fill(b, 4);
  const auto f = [](const auto& t) { return loom::materialize(loom::cast<float>(t)); };
  const auto xd = loom::to_device(x), wd = loom::to_device(w), dyd = loom::to_device(dy);
  const auto bd = loom::to_device(b);
  error_meter e{5e-2, 2e-2};
  const auto add = [&](const auto& got_bf16, const auto& want) {
    const auto got = f(loom::to_host(got_bf16));
    for (index_t i = 0; i < got.size(); ++i) e.add(got.data()[i], want.data()[i]);
  };
  add(loom::conv2d(xd, wd, bd, relu_nhwc), loom::conv2d(f(x), f(w), f(b), relu_nhwc));
  add(loom::conv2d_backward_input(dyd, wd, x.extents(), plain_nhwc),
      loom::conv2d_backward_input(f(dy), f(w), x.extents(), plain_nhwc));
  add(loom::conv2d_backward_weight(dyd, xd, w.extents(), plain_nhwc),
      loom::conv2d_backward_weight(f(dy), f(x), w.extents(), plain_nhwc));
  return e.verdict();
}

void run_stage(bench_common& st, const std::string& check, index_t batch, index_t channels, index_t size) {
  const loom::shape<4> xs{batch, size, size, channels}, ws{channels, channels, 3, 3};
  loom::device_tensor<T, 4> x(xs), w(ws), dy(xs), y(xs), dx(xs), dw(ws);
  loom::device_tensor<T, 1> b(loom::shape<1>{channels});
  hash_fill(x, 11), hash_fill(w, 12), hash_fill(dy, 13), hash_fill(b, 14);
  const double flops = 2.0 * static_cast<double>(batch * size * size) * static_cast<double>(channels * channels * 9);
  const std::string shape = "N" + std::to_string(batch) + " C" + std::to_string(channels) + " " +
                            std::to_string(size) + "x" + std::to_string(size) + " k3";
  const auto run = [&](const char* op, auto&& call) {
    record r{"gpu_conv", op, shape, "bf16", "loom"};
    r.bytes = 3.0 * static_cast<double>(x.size()) * sizeof(T);
    r.check = check;
    r.ms = time_rotated_ms(1, st.timing, [&](int) { call(); });
    print_row(r);
    std::printf("  %s %s: %.1f TFLOP/s\n", op, shape.c_str(), flops / (r.ms * 1e9));
    emit_json(st.opt.json_path, r);
  };
  run("conv2d 3x3 forward", [&] { loom::conv2d_into(y, x, w, plain_nhwc); });
  run("conv2d 3x3 + bias + relu", [&] { loom::conv2d_into(y, x, w, b, relu_nhwc); });
  run("conv2d 3x3 data gradient", [&] { loom::conv2d_backward_input_into(dx, dy, w, plain_nhwc); });
  run("conv2d 3x3 weight gradient", [&] { loom::conv2d_backward_weight_into(dw, dy, x, plain_nhwc); });
}
}  // namespace

int main(int argc, char** argv) {
  bench_common st{options::parse(argc, argv)};
  if (!loom::gpu::is_available()) return no_gpu("bench_conv_gpu");
  try {
    st.timing = st.opt.quick ? gpu_timing{1, 3} : gpu_timing{3, 20};
    const auto p = loom::gpu::properties();
    std::printf("bench_conv_gpu on %s (%d SMs), cuDNN %zu; median of %d samples after %d warm-up\n", p.name.c_str(),
                p.sm_count, loom::cudnn_version(), st.timing.runs, st.timing.warmup);
    const std::string check = check_small();
    std::printf("check against the host executor (x [3, 9, 11, 24] NHWC, 40 filters 3x3, bf16): %s\n",
                check.c_str());
    if (check != "ok") st.failed = true;
    print_header();
    // ResNet-50's 3x3 convolutions, one per stage.
    const index_t batch = st.opt.quick ? 8 : 32;
    run_stage(st, check, batch, 64, 56);
    run_stage(st, check, batch, 128, 28);
    run_stage(st, check, batch, 256, 14);
    run_stage(st, check, batch, 512, 7);
  } catch (const loom::error& e) {
    std::fprintf(stderr, "bench_conv_gpu: %s\n", e.what());
    return 1;
  }
  return st.failed ? 1 : 0;
}
