// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/shape.hpp"
#include "loom/reduce/plan.hpp"

// Where a scan's results go: the position of each result in the contiguous
// output (scan_out), the values and, for cummax/cummin, the indices
// (scan_writer), and the shift by one position that makes an exclusive scan
// of an inclusive one (inclusive_sink).
namespace loom::detail::scan {
using reduce::axis_map;

//! The index an accumulator carries (cummax/cummin's position), else 0.
template <class Op>
LOOM_HD std::int64_t index_of(const typename Op::acc& a) {
  if constexpr (std::is_class_v<typename Op::acc>)
    return a.i;
  else
    return 0;
}

//! Where scan position j (in the map's order) lands in a contiguous output.
template <std::size_t R>
struct scan_out {
  axis_map<R> m;
  shape<R> st;  // contiguous strides of the output
  bool linear;  // position j is linear index j

  LOOM_HD index_t offset(index_t j) const {
    if (linear) return j;
    index_t idx[R > 0 ? R : 1] = {};
    m.coords(j, idx);
    index_t off = 0;
    for (std::size_t d = R; d-- > 0;) off += idx[d] * st[d];
    return off;
  }
};

template <class Op, bool Indices, std::size_t R>
struct scan_writer {
  typename Op::result* out;
  std::int64_t* idx;
  Op op;
  scan_out<R> where;
  LOOM_HD void operator()(index_t j, const typename Op::acc& a) const { put(where.offset(j), a); }
  //! Writes a result at offset `off` of the contiguous output.
  LOOM_HD void put(index_t off, const typename Op::acc& a) const {
    out[off] = op.finalize(a, 0);
    if constexpr (Indices) idx[off] = index_of<Op>(a);
  }
};

// Every scan runs inclusive; an exclusive one is the same scan written one
// position later along the row (the inclusive result at k is the exclusive
// result at k + 1), with the identity at the row's first position. So on the
// device inclusive and exclusive share every kernel (compile time):
// `exclusive` is a run-time flag. The host loop writes through it too.
template <class Writer, class Op>
struct inclusive_sink {
  Writer w;
  Op op;
  bool exclusive;
  // Position j of the row [row0, row_end) has the inclusive result a.
  template <class A>
  LOOM_HD void operator()(index_t j, const A& a, index_t row0, index_t row_end) const {
    if (!exclusive) {
      w(j, a);
      return;
    }
    if (j + 1 < row_end) w(j + 1, a);
    if (j == row0) w(j, op.identity());
  }
  // Position q of a line of `len` elements at output offsets base,
  // base + stride, ... (a contiguous output scanned across rows) has the
  // inclusive result a.
  template <class A>
  LOOM_HD void strided(index_t base, index_t stride, index_t q, index_t len, const A& a) const {
    if (!exclusive) {
      w.put(base + q * stride, a);
      return;
    }
    if (q + 1 < len) w.put(base + (q + 1) * stride, a);
    if (q == 0) w.put(base, op.identity());
  }
};

}  // namespace loom::detail::scan
