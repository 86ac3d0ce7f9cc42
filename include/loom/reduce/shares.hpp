// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>

#include "loom/config.hpp"
#include "loom/core/shape.hpp"
#include "loom/reduce/plan.hpp"

// Each thread's share of an axis reduction on the device (see axis_plan):
// which elements it combines, and in which order. axis_reduce_kernel calls
// these; the host tests replay its plans with them.
namespace loom::detail::reduce {

//! Thread t's share of the `k` elements of a row from position `start`
//! (element j0 of its row: a chunk's first), element by element: t,
//! t + nt, ... (nt: the row's threads, plan.row_threads).
template <bool Linear, class Op, class B, std::size_t R>
LOOM_HD typename Op::acc row_share(const Op& op, const B& b, const axis_map<R>& m, index_t start, index_t k, int t,
                                   int nt, index_t j0) {
  typename Op::acc a = op.identity();
  for (index_t j = t; j < k; j += nt) a = op(a, op.lift(read_at<Linear>(b, m, start + j), j0 + j));
  return a;
}

//! Thread t's share of the contiguous elements [start, start + k) (element
//! j0 of their row onwards) in 16-byte vectors of vector_width elements:
//! head elements t, t + nt, ... (those before the first aligned position),
//! vectors t, t + nt, ..., then tail elements t, t + nt, ... (nt: the row's
//! threads; with nt >= vector_width a thread has at most one head and one
//! tail element, and Wide says so: a test each instead of a loop, 8 fewer
//! registers in the kernel).
template <int vector_width, bool Wide, class Op, class B>
LOOM_HD typename Op::acc row_share_vec(const Op& op, const B& b, index_t start, index_t k, int t, int nt,
                                       index_t j0) {
  typename Op::acc a = op.identity();
  const index_t skew = (vector_width - start % vector_width) % vector_width;
  const index_t head = skew < k ? skew : k;
  const index_t vectors = (k - head) / vector_width;
  const index_t body = head + vectors * vector_width;  // row position of the tail
  if constexpr (Wide) {
    if (t < head) a = op(a, op.lift(b.at_linear(start + t), j0 + t));
  } else {
    for (index_t j = t; j < head; j += nt) a = op(a, op.lift(b.at_linear(start + j), j0 + j));
  }
#if LOOM_DEVICE_CODE
#pragma unroll 4
#endif
  for (index_t v = t; v < vectors; v += nt) {
    const index_t p = head + v * vector_width;
    typename B::template regs<vector_width> r;
    b.template load<vector_width>(start + p, r);
    LOOM_UNROLL
    for (int i = 0; i < vector_width; ++i) a = op(a, op.lift(b.template elem<vector_width>(r, i), j0 + p + i));
  }
  if constexpr (Wide) {
    if (t < k - body) a = op(a, op.lift(b.at_linear(start + body + t), j0 + body + t));
  } else {
    for (index_t j = body + t; j < k; j += nt) a = op(a, op.lift(b.at_linear(start + j), j0 + j));
  }
  return a;
}

//! Lane `lane`'s share of output o across rows, over the range [lo, hi):
//! j = lo + lane, lo + lane + cross_lanes, ... (Linear: element j at
//! base + j * inner, base = line_base(o, plan.inner, k)).
template <bool Linear, class Op, class B, std::size_t R>
LOOM_HD typename Op::acc cross_share(const Op& op, const B& b, const axis_map<R>& m, index_t o, index_t base,
                                     index_t inner, index_t k, index_t lo, index_t hi, int lane) {
  typename Op::acc a = op.identity();
#if LOOM_DEVICE_CODE
#pragma unroll 4
#endif
  for (index_t j = lo + lane; j < hi; j += cross_lanes) {
    if constexpr (Linear)
      a = op(a, op.lift(b.at_linear(base + j * inner), j));
    else
      a = op(a, op.lift(read_at<false>(b, m, o * k + j), j));
  }
  return a;
}
}  // namespace loom::detail::reduce
