// SPDX-License-Identifier: Apache-2.0
#pragma once

// The checks every assignment form makes before it runs (elementwise, rows,
// matmul): the expression broadcasts to the output, the output holds each
// element once, and on a machine with several GPUs every tensor lives on the
// current device.

#include <cstddef>
#include <string>
#include <vector>

#include "loom/core/device.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/stream.hpp"
#include "loom/expr/expression.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail {
template <std::size_t RE, std::size_t RO>
LOOM_COLD void throw_not_assignable(const shape<RE>& from, const shape<RO>& to) {
  throw shape_error("loom: cannot assign an expression of shape " + shape_string(from) + " to an output of shape " +
                    shape_string(to));
}

template <std::size_t RO>
LOOM_COLD void throw_repeating_output(const shape<RO>& ext, const shape<RO>& str) {
  throw aliasing_error("loom: the output (shape " + shape_string(ext) + ", strides " + shape_string(str) +
                       ") repeats elements (a broadcast view); assign into a tensor");
}

// The checks of check_assignable on shapes alone: compiled once per pair of
// ranks, not once per expression.
template <std::size_t RO, std::size_t RE>
void check_assignable_shapes(const shape<RO>& out_ext, const shape<RO>& out_str, const shape<RE>& ext) {
  shape<RO> acc{};
  bool first = true;
  broadcast_into(acc, out_ext, first);
  bool ok = true;
  try {
    broadcast_into(acc, ext, first);
  } catch (const shape_error&) {
    ok = false;
  }
  if (!ok || acc != out_ext) throw_not_assignable(ext, out_ext);
  for (std::size_t d = 0; d != RO; ++d)
    if (out_ext[d] > 1 && out_str[d] == 0) throw_repeating_output(out_ext, out_str);
}

// Throws unless `e` broadcasts to `out`'s shape and `out` holds each element
// once; shared by every assignment form.
template <class O, std::size_t RO, class S, class N>
void check_assignable(const view<O, RO, S>& out, const N& e) {
  check_assignable_shapes(out.extents(), out.strides(), e.extents());
}

// The pointers a multi-GPU check looks at: the outputs first, then every
// device leaf. Not templated on the expression, so compiled once.
inline void check_devices_of(const void* const* outs, std::size_t n_outs, const void* const* leaves,
                             std::size_t n_leaves) {
  const stream_ref s = current_stream();
  const int dev = gpu::current_device();
  if (s.device() != dev)
    throw value_error("loom: the current stream belongs to device " + std::to_string(s.device()) +
                      ", but the current device is " + std::to_string(dev) +
                      "; switch with loom::gpu::set_device or use a stream of this device");
  auto check = [&](const void* p, const char* what) {
    if (p == nullptr) return;
    cudaPointerAttributes a{};
    LOOM_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
    if ((a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) && a.device != dev)
      throw value_error(std::string("loom: ") + what + " lives on device " + std::to_string(a.device) +
                        ", but the assignment runs on device " + std::to_string(dev) +
                        "; copy it to this device first (loom::copy)");
  };
  for (std::size_t i = 0; i != n_outs; ++i) check(outs[i], "an output");
  for (std::size_t i = 0; i != n_leaves; ++i) check(leaves[i], "an input tensor");
}

// On a machine with more than one GPU: throws unless the current stream
// belongs to the current device and every device tensor of the assignment
// (the outputs and every leaf of `e`) lives on that device. A kernel cannot
// read another device's memory without peer access, and CUDA would report
// the failure only later and vaguely. With one GPU there is nothing to check
// and nothing is asked of the driver.
template <class N, class... Views>
void check_devices(const N& e, const Views&... outs) {
  if (gpu::device_count() < 2) return;
  const void* const out_ptrs[sizeof...(Views) + 1] = {static_cast<const void*>(outs.data())..., nullptr};
  std::vector<const void*> leaves;
  for_each_leaf(e, [&](const auto& leaf) { leaves.push_back(leaf.v.data()); });
  check_devices_of(out_ptrs, sizeof...(Views), leaves.data(), leaves.size());
}
}  // namespace loom::detail
