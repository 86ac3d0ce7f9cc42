// SPDX-License-Identifier: Apache-2.0
// The torch ops loom::rms_swiglu and loom::rms_swiglu_backward: their schemas
// and their CPU kernels, which run loom's host executor on torch's buffers.
// The CUDA kernels are in rms_swiglu_cuda.cu, built only when the extension is
// built with CUDA; autograd is registered in Python (loom_torch.py).
#include <torch/library.h>

#include <mutex>
#include <utility>

#include "rms_swiglu.hpp"

namespace loom_torch {
namespace {
std::mutex record_mutex;
call_record last_forward, last_backward;
}  // namespace

void record_forward(call_record r) {
  const std::scoped_lock lock(record_mutex);
  last_forward = std::move(r);
}
void record_backward(call_record r) {
  const std::scoped_lock lock(record_mutex);
  last_backward = std::move(r);
}
call_record forward_record() {
  const std::scoped_lock lock(record_mutex);
  return last_forward;
}
call_record backward_record() {
  const std::scoped_lock lock(record_mutex);
  return last_backward;
}
}  // namespace loom_torch

TORCH_LIBRARY(loom, m) {
  m.def("rms_swiglu(Tensor x, Tensor weight, Tensor gate, float eps) -> Tensor");
  m.def("rms_swiglu_backward(Tensor x, Tensor weight, Tensor gate, Tensor dy, float eps) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("rms_swiglu", &loom_torch::forward_op<loom::host>);
  m.impl("rms_swiglu_backward", &loom_torch::backward_op<loom::host>);
}
