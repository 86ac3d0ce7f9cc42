// SPDX-License-Identifier: Apache-2.0
// Representative assignments, one per LOOM_PTX_CASE, compiled to PTX by
// check_ptx.py, which asserts what fusion and vectorization promise: one
// kernel per compiled path, one 16-byte load per input and 16-byte stores on
// the contiguous path, and no register spills; for a whole-tensor reduction,
// a thread's 16-byte loads of a tile issued back to back.
#include <loom/loom.hpp>

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
#else
#error "unknown LOOM_PTX_CASE"
#endif
