// SPDX-License-Identifier: Apache-2.0
// The torch ops loom::rms_swiglu and loom::rms_swiglu_backward: their schemas
// and their CPU kernels, which run loom's host executor on torch's buffers.
// The CUDA kernels are in rms_swiglu_cuda.cu, built only when the extension is
// built with CUDA; autograd is registered in Python (loom_torch.py). Also
// keeps what the tests inspect (record_views).
#include <torch/library.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rms_swiglu.hpp"

namespace loom_torch {
namespace {
std::mutex record_mutex;
std::map<std::string, std::vector<std::int64_t>> last_views;
}  // namespace

void record_views(const std::string& op, std::vector<std::int64_t> data_pointers) {
  const std::scoped_lock lock(record_mutex);
  last_views[op] = std::move(data_pointers);
}
std::vector<std::int64_t> recorded_views(const std::string& op) {
  const std::scoped_lock lock(record_mutex);
  return last_views[op];
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
