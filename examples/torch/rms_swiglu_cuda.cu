// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels of loom::rms_swiglu and loom::rms_swiglu_backward: loom's
// device executor on torch's buffers, enqueued on torch's current stream of
// the tensors' device (no synchronization; torch's caching allocator and
// loom's stream-ordered temporaries both follow that stream). Built only when
// the extension is built with CUDA (loom_torch.py).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "rms_swiglu.hpp"

namespace {
// Runs f with x's device current and torch's current stream of that device as
// loom's current stream.
template <class F>
decltype(auto) on_torch_stream(const at::Tensor& x, F&& f) {
  const c10::cuda::CUDAGuard device(x.device());
  const c10::cuda::CUDAStream s = c10::cuda::getCurrentCUDAStream(x.device().index());
  const loom::stream_guard on(loom::stream_ref(s.stream(), s.device_index()));
  return f();
}

at::Tensor forward_cuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& gate, double eps) {
  return on_torch_stream(x, [&] { return loom_torch::forward_op<loom::device>(x, weight, gate, eps); });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cuda(const at::Tensor& x, const at::Tensor& weight,
                                                             const at::Tensor& gate, const at::Tensor& dy,
                                                             double eps) {
  return on_torch_stream(x, [&] { return loom_torch::backward_op<loom::device>(x, weight, gate, dy, eps); });
}
}  // namespace

TORCH_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("rms_swiglu", &forward_cuda);
  m.impl("rms_swiglu_backward", &backward_cuda);
}
