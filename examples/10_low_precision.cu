// SPDX-License-Identifier: Apache-2.0
// fp8 and fp4 weights: a weight quantized per block of 32 (MXFP8: e4m3
// values, e8m0 scales) and per block of 16 (NVFP4-style: fp4 values packed
// two per byte, e4m3 scales), each dequantized in one fused kernel and used
// in a layer; a per-row quantization whose dequantization rides inside
// an activation; and an fp8 GEMM writing fp8 with its scale and amax. Runs on the
// GPU when there is one and on the host executor otherwise.
#include <cmath>
#include <cstdio>
#include <random>

#include <loom/loom.hpp>

template <class Space>
int run() {
  using namespace loom;
  const index_t batch = 7, in = 96, out = 33;  // in: whole blocks of 32
  std::mt19937 gen(10);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  host_tensor<float, 2> w_h({out, in}), x_h({batch, in});
  for (index_t i = 0; i < w_h.size(); ++i) w_h.data()[i] = 0.05f * dist(gen);
  for (index_t i = 0; i < x_h.size(); ++i) x_h.data()[i] = dist(gen);
  auto put = [](const auto& h) {
    if constexpr (std::is_same_v<Space, device>)
      return to_device(h);
    else
      return h;
  };
  const auto w = put(w_h);
  const auto x = put(x_h);

  // Quantize the weight in blocks of 32 along its rows: one row kernel
  // writes the e4m3 values and one e8m0 scale per block.
  tensor<e4m3, 2, Space> w8({out, in});
  tensor<e8m0, 2, Space> scales({out, in / 32});
  quantize_blocks(w8, scales, w, 32);

  // Dequantize (one fused kernel, 1 byte read per weight) and run the layer.
  tensor<float, 2, Space> wq({out, in}), y({batch, out});
  blocks(wq, 32) = dequantize(blocks(w8, 32), scales.view().unsqueeze(-1));
  y = gelu(matmul(x, wq.t()));

  // 4-bit weights, NVFP4-style (fp4 values, e4m3 scales over 16), two per
  // byte. unpack reads w4 [out, in / 2] as its logical [out, in], and
  // blocks of 8 bytes are blocks of 16 values: one fused kernel.
  tensor<fp4x2, 2, Space> w4({out, in / 2});
  tensor<e4m3, 2, Space> scales4({out, in / 16});
  quantize_packed(w4, scales4, w, 16);
  tensor<float, 2, Space> wq4({out, in});
  blocks(wq4, 16) = dequantize(unpack(blocks(w4, 8)), scales4.view().unsqueeze(-1));
  y = gelu(matmul(x, wq4.t()));

  // Per-row scales, and the dequantization fused into an activation.
  tensor<e4m3, 2, Space> x8({batch, in});
  tensor<float, 2, Space> row_scales({batch, 1}), z({batch, in});
  quantize_rows(x8, row_scales, x);
  z = gelu(dequantize(x8, row_scales) * 2.0f);

  // fp8 in, fp8 out: one cuBLASLt GEMM scales the product, converts it to
  // e4m3 with the output's scale and writes max |t| before that scale, from
  // which the next step's output scale follows. Leading dimensions are
  // multiples of 16 bytes, as cuBLASLt's fp8 kernels need.
  const index_t hidden = 32;
  tensor<e4m3, 2, Space> xs8({batch, in}), wh8({hidden, in}), h8({batch, hidden});
  tensor<float, 1, Space> x_scale({1}), w_scale({1}), h_amax({1});
  quantize_tensor(xs8, x_scale, x);
  quantize_tensor(wh8, w_scale, w.view().slice(range(0, hidden)));
  const auto h_scale = full<float, 1, Space>({1}, 1.0f);
  scaled_matmul(h8, xs8, x_scale, wh8.t(), w_scale, {.amax = h_amax.view(), .d_scale = h_scale.view()});
  const float next_h_scale = 448.0f / to_host(h_amax).data()[0];

  // How far the quantized weights are from the original.
  const auto wq_h = to_host(wq);
  const auto wq4_h = to_host(wq4);
  // MX scales are powers of two: a block's largest values may be clamped by
  // up to a quarter of its amax; the rest keep e4m3's 3 mantissa bits. fp4's
  // steps are at most a sixth of a block's amax (from 4 to 6 times its scale).
  double worst = 0, worst4 = 0, amax = 0;
  for (index_t i = 0; i < w_h.size(); ++i) {
    worst = std::fmax(worst, std::fabs(static_cast<double>(wq_h.data()[i]) - w_h.data()[i]));
    worst4 = std::fmax(worst4, std::fabs(static_cast<double>(wq4_h.data()[i]) - w_h.data()[i]));
    amax = std::fmax(amax, std::fabs(static_cast<double>(w_h.data()[i])));
  }
  std::printf("%s: MXFP8 weight [%lld, %lld], largest error %.5f (amax %.5f); NVFP4-style %.5f\n", Space::name,
              static_cast<long long>(out), static_cast<long long>(in), worst, amax, worst4);
  std::printf("%s: layer output y[0, 0] = %.4f, z[0, 0] = %.4f\n", Space::name,
              static_cast<double>(to_host(y).data()[0]), static_cast<double>(to_host(z).data()[0]));
  std::printf("%s: fp8 GEMM h[0, 0] = %.4f, amax %.4f, next scale %.2f\n", Space::name,
              static_cast<double>(static_cast<float>(to_host(h8).data()[0])),
              static_cast<double>(to_host(h_amax).data()[0]), static_cast<double>(next_h_scale));
  return worst <= amax / 4 && worst4 <= amax / 4 ? 0 : 1;
}

int main() {
  if (loom::gpu::is_available()) return run<loom::device>();
  std::printf("no GPU (%s): running on the host executor\n", loom::gpu::unavailable_reason().c_str());
  return run<loom::host>();
}
