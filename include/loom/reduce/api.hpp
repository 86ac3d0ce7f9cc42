// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"  // so that `x - sum(x).item()` needs no other header
#include "loom/reduce/cuda.hpp"
#include "loom/reduce/host.hpp"
#include "loom/core/reduction_ops.hpp"
#include "loom/reduce/plan.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"

// Reductions over any expression: the elementwise work of the expression is
// fused into the reduction's loads, so `sum(x * y)` reads x and y once and
// writes one number. Every reduction is eager and returns a tensor in the
// expression's memory space.
//
// Accumulation order (the same for every run, so results are bit-identical run
// to run; no atomics anywhere):
//  - host, whole tensor: fixed chunks of 8192 elements, each summed pairwise
//    (blocks of 8 sequential, then a balanced binary tree), then the chunk
//    results combined pairwise. The chunking does not depend on the thread
//    count.
//  - host, along axes: each output element reduces its segment pairwise.
//  - device, whole tensor: cub::DeviceReduce (run-to-run deterministic on one
//    GPU; its tiling, hence its rounding, may differ between GPU models). A
//    plain contiguous tensor is handed to CUB as its pointer
//    (reduces_by_pointer); other contiguous inputs as items of one 16-byte
//    vector of input each, combined left to right.
//  - device, along axes: along rows (the reduced range innermost) one block,
//    warp or thread per output, each thread combining its elements (or
//    16-byte vectors) left to right, then cub::BlockReduce or WarpReduce;
//    across rows (`sum(x, 0)`) 32 outputs per block, 4 lanes per output
//    combined in order, and the range in fixed chunks when the outputs are
//    few. See axis_plan (reduce/plan.hpp).
namespace loom {

//! Tag that keeps the reduced axes (extent 1) in a reduction's result, like
//! NumPy's keepdims=True: `auto m = loom::amax(x, 1, loom::keepdims);` has
//! x's rank, so `x - m` broadcasts.
struct keepdims_t {
  explicit keepdims_t() = default;
};
//! See keepdims_t.
inline constexpr keepdims_t keepdims{};

//! The bias correction of var/stddev: the divisor is max(0, N - value)
//! (PyTorch's `correction`); 1 (the default) is Bessel's correction, 0 the
//! population variance. Example: `loom::var(x, loom::correction{0})`.
struct correction {
  double value = 1;
};

namespace detail::reduce {
//! The operator of a reduction: Op{}, or for var and stddev Op with the
//! correction in its accumulator's type.
template <class Op>
Op make_op() {
  return Op{};
}
template <class Op>
Op make_op(correction c) {
  return Op{static_cast<typename Op::F>(c.value)};
}

// Whole: every axis is reduced (known at compile time), the one case that
// compiles CUB's device-wide reduction; axis reductions compile only
// axis_reduce_kernel, twice (linear and by coordinates), and one combining
// kernel per reduction type (compile time grows with every CUB instantiation).
template <class Op, bool Keep, bool Whole, std::size_t out_rank, class Node, std::size_t R>
auto reduce_run(const Node& n, const std::array<bool, R>& red, const Op& op, const char* api) {
  using S = typename Node::space;
  require_cuda_compiler_for<S>();
  const shape<R> ext = n.extents();
  const reduce_layout<R> lay = layout_of(ext, red);
  const index_t outputs = lay.outputs, k = lay.k;
  tensor<typename Op::result, out_rank, S> out(output_shape<out_rank, Keep>(ext, red));
  if (outputs == 0) return out;
  if (k == 0) {
    if constexpr (!Op::has_identity) {
      throw value_error(std::string("loom: ") + api + "() over an empty range (shape " + shape_string(ext) +
                        ") has no identity; expected at least 1 element to reduce, got 0");
    } else {
      fill(out, op.finalize(op.identity(), 0));
      return out;
    }
  }
  bool row_major = false;
  const axis_map<R> m = make_axis_map(ext, lay.order, row_major);
  bind_info info;
  const auto b = bind_for_read(n, ext, info);
  const bool linear = info.contiguous && row_major;
  if constexpr (std::is_same_v<S, host>) {
    host_reduce(op, b, m, linear, outputs, k, out.data());
  } else {
#if LOOM_CUDA_COMPILER
    if constexpr (Whole)
      device_reduce_whole<Node>(op, b, m, info, linear, k, out.data(), current_stream());
    else
      device_reduce_along_axes<Node>(op, b, m, ext, red, info, outputs, k, out.data(), current_stream());
#endif
  }
  return out;
}

//! Reduces every element of `e` with OpT<value type> (`args`: a correction
//! or nothing); `api` names the public function in error messages.
template <template <class> class OpT, class E, class... A>
auto reduce_all(const char* api, const E& e, A... args) {
  using node = node_t<E>;
  check_reducible<node>();
  using Op = OpT<typename node::value_type>;
  std::array<bool, node::rank> red{};
  red.fill(true);
  return reduce_run<Op, false, true, 0>(as_node(e), red, make_op<Op>(args...), api);
}

//! Reduces the axes `axes` of `e` (keeping them as extent 1 with Keep).
template <template <class> class OpT, bool Keep, class E, std::size_t K, class... A>
auto reduce_axes(const char* api, const E& e, const std::array<int, K>& axes, A... args) {
  using node = node_t<E>;
  check_reducible<node>();
  constexpr std::size_t R = node::rank;
  static_assert(K <= R, "loom: a reduction names more axes than the expression has");
  using Op = OpT<typename node::value_type>;
  const auto red = reduced_axes<R>(axes, api);
  return reduce_run<Op, Keep, K == R, (Keep ? R : R - K)>(as_node(e), red, make_op<Op>(args...), api);
}

template <std::size_t K>
std::array<int, K> to_axes(const int (&a)[K]) {
  std::array<int, K> r{};
  for (std::size_t i = 0; i != K; ++i) r[i] = a[i];
  return r;
}
}  // namespace detail::reduce

// Every public reduction is spelled by LOOM_REDUCTION(name, op, forms), and
// var/stddev by LOOM_REDUCTION(name, op, forms, correction). Each form
// includes the ones before it:
//   whole     name(e): every element, a 0-d tensor
//   one_axis  name(e, axis), name(e, axis, keepdims)
//   axes      name(e, {axes...}), name(e, {axes...}, keepdims)
// A trailing `correction` ends every overload in `correction c = {}`.
#define LOOM_REDUCTION(name, op, forms, ...) LOOM_REDUCTION_##forms(name, op, __VA_ARGS__)
#define LOOM_REDUCTION_whole(name, op, ...)                                                       \
  template <expression E>                                                                         \
  [[nodiscard]] auto name(const E& e __VA_OPT__(, __VA_ARGS__ c = {})) {                          \
    return detail::reduce::reduce_all<op>(#name, e __VA_OPT__(, c));                              \
  }
#define LOOM_REDUCTION_one_axis(name, op, ...)                                                    \
  LOOM_REDUCTION_whole(name, op, __VA_ARGS__)                                                     \
  template <expression E>                                                                         \
  [[nodiscard]] auto name(const E& e, int axis __VA_OPT__(, __VA_ARGS__ c = {})) {                \
    return detail::reduce::reduce_axes<op, false>(#name, e, std::array<int, 1>{axis} __VA_OPT__(, c)); \
  }                                                                                               \
  template <expression E>                                                                         \
  [[nodiscard]] auto name(const E& e, int axis, keepdims_t __VA_OPT__(, __VA_ARGS__ c = {})) {    \
    return detail::reduce::reduce_axes<op, true>(#name, e, std::array<int, 1>{axis} __VA_OPT__(, c)); \
  }
#define LOOM_REDUCTION_axes(name, op, ...)                                                        \
  LOOM_REDUCTION_one_axis(name, op, __VA_ARGS__)                                                  \
  template <expression E, std::size_t K>                                                          \
  [[nodiscard]] auto name(const E& e, const int (&axes)[K] __VA_OPT__(, __VA_ARGS__ c = {})) {    \
    return detail::reduce::reduce_axes<op, false>(#name, e, detail::reduce::to_axes(axes) __VA_OPT__(, c)); \
  }                                                                                               \
  template <expression E, std::size_t K>                                                          \
  [[nodiscard]] auto name(const E& e, const int (&axes)[K], keepdims_t __VA_OPT__(, __VA_ARGS__ c = {})) { \
    return detail::reduce::reduce_axes<op, true>(#name, e, detail::reduce::to_axes(axes) __VA_OPT__(, c)); \
  }

//! Sum of the elements of any expression, over the whole tensor (a 0-d
//! tensor), one axis or a set of axes (`keepdims` keeps them as extent 1).
//! Result type sum_result_t<T>: int64 for bool/integers, else T; accumulates
//! in accumulate_t<T> (float for half/bf16). Empty: 0. The expression's
//! elementwise work is fused into the loads: one pass over the inputs.
//! Kernels: whole tensor, one cub::DeviceReduce call (CUB runs one kernel, or
//! two for inputs larger than one tile); along axes, one kernel (two when the
//! outputs are few and their ranges long: the ranges in chunks, then their
//! combination; see docs/03_reductions.md). Host: one parallel loop.
//! Example: `auto s = loom::sum(x * y); float v = loom::item(s);`,
//! `auto rows = loom::sum(x, -1);`, `auto c = loom::sum(x, {0, 2}, loom::keepdims);`
LOOM_REDUCTION(sum, detail::reduce::sum_op, axes)
//! Product of the elements; like sum (int64 for integers, 1 when empty).
//! Example: `auto p = loom::prod(x, 0);`
LOOM_REDUCTION(prod, detail::reduce::prod_op, axes)
//! Arithmetic mean; float_result_t<T> (float for integers: up to 32 bits
//! summed exactly in int64, 64-bit ones in double, divided once in double);
//! NaN when empty.
//! Same kernels as sum (the division happens as CUB writes its result).
//! Example: `auto m = loom::mean(x, 1, loom::keepdims);`
LOOM_REDUCTION(mean, detail::reduce::mean_op, axes)
//! Largest / smallest element along axes (torch.amax / amin); NaN propagates;
//! the result type is T; an empty range throws value_error. Kernels as sum.
//! (loom::max(a, b) with two operands is the elementwise maximum, so the
//! axis forms are spelled amax / amin, as in PyTorch.)
//! Example: `auto m = loom::amax(abs(a - b), 1);`
LOOM_REDUCTION(amax, detail::reduce::max_op, axes)
LOOM_REDUCTION(amin, detail::reduce::min_op, axes)
//! True where any / all elements are non-zero; bool. Empty: false / true.
//! Example: `bool bad = loom::item(loom::any(x != x));  // a NaN anywhere`
LOOM_REDUCTION(any, detail::reduce::any_op, axes)
LOOM_REDUCTION(all, detail::reduce::all_op, axes)
//! Number of non-zero elements; int64. Example: `auto n = loom::count_nonzero(x > 0, 1);`
LOOM_REDUCTION(count_nonzero, detail::reduce::count_nonzero_op, axes)
//! Vector norms: sum |x| (L1), sqrt(sum x^2) (L2), max |x| (Linf, NaN
//! propagates); float_result_t<T>; 0 when empty. Kernels as sum.
//! Example: `auto d = loom::l2_norm(a - b);`
LOOM_REDUCTION(l1_norm, detail::reduce::l1_op, axes)
LOOM_REDUCTION(l2_norm, detail::reduce::l2_op, axes)
LOOM_REDUCTION(linf_norm, detail::reduce::linf_op, axes)
//! log(sum(exp(x))) computed stably in one pass (running maximum);
//! float_result_t<T>; -inf when empty. Kernels as sum.
//! Example: `auto lse = loom::logsumexp(logits, -1, loom::keepdims);`
LOOM_REDUCTION(logsumexp, detail::reduce::logsumexp_op, axes)

//! The largest / smallest element of the whole expression (a 0-d tensor of
//! T); NaN propagates; empty throws value_error. One CUB call. With two
//! operands, loom::max(a, b) is the elementwise maximum; use amax/amin for axes.
//! Example: `float hi = loom::item(loom::max(x));`
LOOM_REDUCTION(max, detail::reduce::max_op, whole)
LOOM_REDUCTION(min, detail::reduce::min_op, whole)

//! Position of the largest / smallest element (int64): over the whole
//! expression the row-major flat index, along an axis the index on that
//! axis. Ties give the first index; a NaN counts as the largest (argmax) /
//! smallest (argmin) and the first NaN wins, as in PyTorch. Empty throws
//! value_error. Kernels as sum.
//! Example: `auto cls = loom::argmax(logits, -1);`
LOOM_REDUCTION(argmax, detail::reduce::argmax_op, one_axis)
LOOM_REDUCTION(argmin, detail::reduce::argmin_op, one_axis)

//! Variance and standard deviation, numerically stable (Welford / Chan
//! merging, one pass), with PyTorch's correction: divisor max(0, N - c),
//! c = 1 by default. float_result_t<T>; NaN when N - c <= 0 and all equal,
//! and NaN over an empty range for any c.
//! Kernels as sum.
//! Example: `auto v = loom::var(x, 0, loom::correction{0});`, `auto s = loom::stddev(x);`
LOOM_REDUCTION(var, detail::reduce::variance_op, axes, correction)
LOOM_REDUCTION(stddev, detail::reduce::stddev_op, axes, correction)

#undef LOOM_REDUCTION_axes
#undef LOOM_REDUCTION_one_axis
#undef LOOM_REDUCTION_whole
#undef LOOM_REDUCTION

//! The single element of a tensor or view (any rank, size 1) as a host
//! value: the same as `x.item()` (see view::item). For device data this
//! copies one element to the host and waits for the current stream. Throws
//! shape_error unless the size is 1.
//! Example: `float total = loom::item(loom::sum(x));`
template <tensor_like X>
auto item(const X& x) {
  return x.item();
}
}  // namespace loom
