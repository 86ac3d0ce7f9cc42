// SPDX-License-Identifier: Apache-2.0
// Representative assignments, one per LOOM_PTX_CASE, compiled to PTX by
// check_ptx.py, which asserts what fusion and vectorization promise: one
// kernel per compiled path, one 16-byte load per input and 16-byte stores on
// the contiguous path, and no register spills; for a whole-tensor reduction,
// a thread's 16-byte loads of a tile issued back to back.
// Each case includes what it uses: the umbrella header (CUB, Thrust,
// cuBLASLt) costs about 2 s more of nvcc than a layer's own headers, and
// the check compiles every case on its own.
#if LOOM_PTX_CASE == 5 || LOOM_PTX_CASE == 7 || LOOM_PTX_CASE == 15 || LOOM_PTX_CASE == 16
#include <loom/nn/softmax.hpp>
#elif LOOM_PTX_CASE == 6
#include <loom/nn/norm.hpp>
#elif LOOM_PTX_CASE == 19
#include <loom/nn/embedding.hpp>
#include <loom/ops/arithmetic.hpp>
#elif LOOM_PTX_CASE == 20
#include <loom/expr/unpack.hpp>
#include <loom/nn/quantize.hpp>
#include <loom/ops/arithmetic.hpp>
#elif LOOM_PTX_CASE <= 4 || LOOM_PTX_CASE == 14 || LOOM_PTX_CASE == 21
#include <loom/nn/layer.hpp>
#include <loom/ops/activations.hpp>
#include <loom/ops/arithmetic.hpp>
#include <loom/ops/compare.hpp>
#include <loom/ops/math.hpp>
#include <loom/rng/random.hpp>
#else
#include <loom/loom.hpp>
#endif

using namespace loom;

#if LOOM_PTX_CASE == 0  // float, three contiguous inputs
void run(device_tensor<float, 2>& y, const device_tensor<float, 2>& a, const device_tensor<float, 2>& b,
         const device_tensor<float, 2>& c) {
  y = a * b + c;
}
#elif LOOM_PTX_CASE == 1  // bf16 fused layer body: 8 elements per 16-byte load
void run(device_tensor<bf16, 2>& y, const device_tensor<bf16, 2>& a, const device_tensor<bf16, 2>& b,
         const device_tensor<bf16, 2>& c) {
  y = gelu(a * b + c);
}
#elif LOOM_PTX_CASE == 2  // float with a broadcast row and a scalar
void run(device_tensor<float, 2>& y, const device_tensor<float, 2>& x, const device_tensor<float, 1>& w) {
  y = silu(x * w + 1.0f);
}
#elif LOOM_PTX_CASE == 3  // bf16 with broadcast scale and shift, residual add
void run(device_tensor<bf16, 2>& y, const device_tensor<bf16, 2>& x, const device_tensor<bf16, 1>& g,
         const device_tensor<bf16, 1>& b, const device_tensor<bf16, 2>& r) {
  y = gelu(x * g + b) + r;
}
#elif LOOM_PTX_CASE == 4  // half activations, deep tree over two inputs
void run(device_tensor<half, 2>& y, const device_tensor<half, 2>& a, const device_tensor<half, 2>& b) {
  y = tanh(a) * sigmoid(b) + relu(a - b) * 0.5f - exp(-abs(a)) + where(a > b, a, b);
}
#elif LOOM_PTX_CASE == 5  // bf16 softmax rows: one row kernel (vector and general forms)
void run(device_tensor<bf16, 2>& y, const device_tensor<bf16, 2>& x) { y = softmax(x); }
#elif LOOM_PTX_CASE == 6  // bf16 rms_norm rows with a broadcast weight
void run(device_tensor<bf16, 2>& y, const device_tensor<bf16, 2>& x, const device_tensor<bf16, 1>& w) {
  y = rms_norm(x, w, 1e-6);
}
#elif LOOM_PTX_CASE == 7  // bf16 rows into a float output: 8 columns per vector step
void run(device_tensor<float, 2>& y, const device_tensor<bf16, 2>& x) { y = softmax(x); }
#elif LOOM_PTX_CASE == 8  // float sum of a whole tensor: one cub::DeviceReduce call, CUB's pointer kernel
void run(device_tensor<float, 0>& y, const device_tensor<float, 2>& x) { y = sum(x); }
#elif LOOM_PTX_CASE == 9  // float sums along an axis: one kernel, linear and coordinates forms
void run(device_tensor<float, 1>& y, const device_tensor<float, 2>& x) { y = sum(x, 1); }
#elif LOOM_PTX_CASE == 10  // float cumsum along the first axis (across rows: many lines, few long ones) and of one long row
void run(device_tensor<float, 2>& y, const device_tensor<float, 2>& x) { y = cumsum(x, 0); }
#elif LOOM_PTX_CASE == 11  // float max of a whole tensor (NaN propagates): CUB's pointer kernel
void run(device_tensor<float, 0>& y, const device_tensor<float, 2>& x) { y = max(x); }
#elif LOOM_PTX_CASE == 12  // float sum of a fused expression: 16-byte items handed to cub::DeviceReduce
void run(device_tensor<float, 0>& y, const device_tensor<float, 2>& a, const device_tensor<float, 2>& b) {
  y = sum(a * b);
}
#elif LOOM_PTX_CASE == 13  // float sum of a tensor next to a direct cub::DeviceReduce::Sum: the same main loop
void run(device_tensor<float, 0>& y, const device_tensor<float, 1>& x) { y = sum(x); }
cudaError_t cub_sum(void* tmp, std::size_t& bytes, const float* x, float* out, long long n, cudaStream_t s) {
  return cub::DeviceReduce::Sum(tmp, bytes, x, out, n, s);
}
#elif LOOM_PTX_CASE == 14  // bf16 bias + dropout + residual: the mask drawn in the kernel, nothing read for it
void run(device_tensor<bf16, 2>& y, const device_tensor<bf16, 2>& x, const device_tensor<bf16, 1>& b,
         const device_tensor<bf16, 2>& r) {
  y = dropout(x + b, 0.1f, 2026, 33) + r;
}
#elif LOOM_PTX_CASE == 15  // bf16 softmax of rank-3 activations [B, T, C]: 16-byte stores as at rank 2
void run(device_tensor<bf16, 3>& y, const device_tensor<bf16, 3>& x) { y = softmax(x); }
#elif LOOM_PTX_CASE == 16  // float softmax of rank-3 activations
void run(device_tensor<float, 3>& y, const device_tensor<float, 3>& x) { y = softmax(x); }
#elif LOOM_PTX_CASE == 17  // the heavier row layers: every kernel without spills
// The built-in layers and backward passes whose row kernels spilled under a
// 64-register cap, in float and bf16 (and bf16 with a float weight), and the
// user layers of examples/03_custom_layer.cu and examples/06_gradients.cu.
constexpr auto rms_swiglu = layer([](auto x, auto weight, auto gate) {
  auto normed = x * rsqrt(row_mean(x * x) + 1e-6) * weight;
  return silu(gate) * normed;
});
constexpr auto causal_softmax = layer([](auto scores, auto row_ids, auto temperature) {
  auto z = scores / temperature;
  auto masked = where(column_index(scores) <= row_ids, z, -INFINITY);
  auto e = exp(masked - row_max(masked));
  return e / row_sum(e);
});
constexpr auto masked_biased_softmax = layer([](auto scores, auto bias, auto row_ids, auto temperature) {
  auto z = scores / temperature + bias;
  auto masked = where(column_index(scores) <= row_ids, z, -INFINITY);
  auto e = exp(masked - row_max(masked));
  return e / row_sum(e);
});
struct swish {
  static constexpr bool floating = true;
  float beta = 1.0f;
  template <class T>
  LOOM_HD T operator()(T x) const {
    return x / (T(1) + math::exp(-T(beta) * x));
  }
  template <int I, class T>
  LOOM_HD T derivative(T x) const {
    const T s = T(1) / (T(1) + math::exp(-T(beta) * x));
    return s + T(beta) * x * s * (T(1) - s);
  }
};
constexpr auto gated_rms = layer([](auto x, auto w) {
  return map(swish{1.5f}, x) * (x * rsqrt(row_mean(x * x) + 1e-6) * w);
});
template <class T, class W>
void heavy(device_tensor<T, 2>& y, device_tensor<T, 2>& h, const device_tensor<T, 2>& x,
           const device_tensor<T, 2>& r, const device_tensor<W, 1>& w, const device_tensor<std::int64_t, 1>& t,
           const device_tensor<std::int64_t, 2>& ids, device_tensor<float, 2>& loss) {
  y = cross_entropy_backward(x, t);
  y = layer_norm_backward_input(x, w, r, 1e-5);
  y = rms_norm_backward_input(x, w, r, 1e-6);
  add_rms_norm(y, h, x, r, w);
  y = layer_norm(x + r, w, w, 1e-5);
  loss = cross_entropy_rows(x, t.unsqueeze(1));
  y = masked_biased_softmax(x, w, ids, 0.8f);
  y = causal_softmax(x, ids, 0.8f);
  y = rms_swiglu(x, w, r);
}
template void heavy<float, float>(device_tensor<float, 2>&, device_tensor<float, 2>&, const device_tensor<float, 2>&,
                                  const device_tensor<float, 2>&, const device_tensor<float, 1>&,
                                  const device_tensor<std::int64_t, 1>&, const device_tensor<std::int64_t, 2>&,
                                  device_tensor<float, 2>&);
template void heavy<bf16, bf16>(device_tensor<bf16, 2>&, device_tensor<bf16, 2>&, const device_tensor<bf16, 2>&,
                                const device_tensor<bf16, 2>&, const device_tensor<bf16, 1>&,
                                const device_tensor<std::int64_t, 1>&, const device_tensor<std::int64_t, 2>&,
                                device_tensor<float, 2>&);
template void heavy<bf16, float>(device_tensor<bf16, 2>&, device_tensor<bf16, 2>&, const device_tensor<bf16, 2>&,
                                 const device_tensor<bf16, 2>&, const device_tensor<float, 1>&,
                                 const device_tensor<std::int64_t, 1>&, const device_tensor<std::int64_t, 2>&,
                                 device_tensor<float, 2>&);
void gated_rms_grad(device_tensor<float, 2>& dx, device_tensor<float, 1>& dw, const device_tensor<float, 2>& x,
                    const device_tensor<float, 1>& w, const device_tensor<float, 2>& dy) {
  grad<0, 1>(gated_rms)(x, w, dy).into(dx, dw);
}
#elif LOOM_PTX_CASE == 18  // scans whose items are not one number: bool items, (value, index) pairs
// A running count of a comparison, across rows too; the running extremes
// with indices of fused float trees (every scan kernel of each).
void run(device_tensor<std::int64_t, 2>& y, const device_tensor<float, 2>& x) { y = cumsum(x > 0.0f, 0); }
void run_extremes(const device_tensor<float, 2>& x) {
  [[maybe_unused]] const auto rows = cummax(x - 1.0f, 1);
  [[maybe_unused]] const auto cols = cummin(x * 2.0f, 0);
}
#elif LOOM_PTX_CASE == 19  // bf16 embedding scaled plus positions: one 16-byte load per table run and per input
void run(device_tensor<bf16, 2>& y, const device_tensor<std::int64_t, 1>& ids, const device_tensor<bf16, 2>& table,
         const device_tensor<bf16, 2>& pos) {
  y = embedding(ids, table) * 2.0f + pos;
}
#elif LOOM_PTX_CASE == 20  // fp4 weights unpacked in registers: one 16-byte load of packed bytes is 32 values
void run(device_tensor<float, 2>& y, const device_tensor<fp4x2, 2>& w4, const device_tensor<float, 1>& s,
         const device_tensor<float, 2>& x) {
  y = dequantize(unpack(w4), s) * x;
}
#elif LOOM_PTX_CASE == 21  // a float layer whose body uses its three arguments 13 times: each loaded once
constexpr auto mixed = layer([](auto a, auto b, auto c) {
  return tanh(a) * sigmoid(b) + relu(a - b) * c - exp(-abs(a)) * c + where(a > b, a, b) * c + b;
});
void run(device_tensor<float, 2>& y, const device_tensor<float, 2>& a, const device_tensor<float, 2>& b,
         const device_tensor<float, 2>& c) {
  y = mixed(a, b, c);
}
#elif LOOM_PTX_CASE == 22  // the tanh gelu written out over a named subexpression t = x * w + b: t computed once
void run(device_tensor<float, 2>& y, const device_tensor<float, 2>& x, const device_tensor<float, 1>& w,
         const device_tensor<float, 1>& b) {
  const auto t = x * w + b;
  y = 0.5f * t * (1.f + tanh(0.7978845608f * (t + 0.044715f * t * t * t)));
}
#elif LOOM_PTX_CASE == 23  // case 21's body as a plain expression: three float tensors used 13 times
void run(device_tensor<float, 2>& y, const device_tensor<float, 2>& a, const device_tensor<float, 2>& b,
         const device_tensor<float, 2>& c) {
  y = tanh(a) * sigmoid(b) + relu(a - b) * c - exp(-abs(a)) * c + where(a > b, a, b) * c + b;
}
#else
#error "unknown LOOM_PTX_CASE"
#endif
