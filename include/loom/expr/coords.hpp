// SPDX-License-Identifier: Apache-2.0
#pragma once

// The coordinates of a node's own axes at an element of the output it is
// bound to. Nodes whose values depend on coordinates rather than on a
// memory layout (arange, eye, the indexing and concatenation nodes) take
// the last R axes of the output (NumPy's right alignment); an own axis of
// extent 1 is broadcast, its coordinate always 0. The same coordinates come
// from a linear output index (the contiguous paths), from the output's
// coordinates (the general path) or from a row and a column (row kernels).

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include <string>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail {
template <std::size_t R, std::size_t RO>
struct own_coords {
  static_assert(R >= 1 && R <= RO, "loom: internal error: a node has a higher rank than its output");
  fast_divmod div[R];       // the output's extents of the last R axes
  std::uint32_t fixed = 0;  // bit d: own axis d has extent 1 (broadcast: coordinate 0)
  index_t base = 0;         // added to linear indices (rebase_linear)

  //! For a node of own extents `own` bound to an output of extents `out`.
  static own_coords make(const shape<R>& own, const shape<RO>& out) {
    own_coords m;
    for (std::size_t d = 0; d != R; ++d) {
      const index_t e = out[RO - R + d];
      m.div[d] = fast_divmod(static_cast<std::uint64_t>(e > 0 ? e : 1));
      if (own[d] == 1) m.fixed |= std::uint32_t{1} << d;
    }
    return m;
  }
  //! Own coordinates of output element `i` (row-major index).
  LOOM_HD void of_linear(index_t i, index_t* c) const {
    std::uint64_t rest = static_cast<std::uint64_t>(base + i);
    for (std::size_t d = R; d-- > 0;) {
      std::uint64_t q, r;
      div[d].divmod(rest, q, r);
      c[d] = (fixed >> d) & 1 ? 0 : static_cast<index_t>(r);
      rest = q;
    }
  }
  //! Own coordinates of the output element at coordinates idx[RO].
  LOOM_HD void of_index(const index_t* idx, index_t* c) const {
    for (std::size_t d = 0; d != R; ++d) c[d] = (fixed >> d) & 1 ? 0 : idx[RO - R + d];
  }
  //! Own coordinates of column `col` of the output row with leading
  //! coordinates lead[RO - 1].
  LOOM_HD void of_row(const index_t* lead, index_t col, index_t* c) const {
    for (std::size_t d = 0; d + 1 < R; ++d) c[d] = (fixed >> d) & 1 ? 0 : lead[RO - R + d];
    c[R - 1] = (fixed >> (R - 1)) & 1 ? 0 : col;
  }
  //! The same map (field by field: fast_divmod has padding bytes).
  bool same_as(const own_coords& o) const {
    for (std::size_t d = 0; d != R; ++d)
      if (div[d].d != o.div[d].d) return false;
    return fixed == o.fixed && base == o.base;
  }
  //! Whether the last own axis follows the output's last axis (not broadcast).
  LOOM_HD bool last_moves() const { return ((fixed >> (R - 1)) & 1) == 0; }
  //! The output's extent along the last axis.
  LOOM_HD index_t last_extent() const { return static_cast<index_t>(div[R - 1].d); }
};

//! The members the executors call of a bound node whose value at an output
//! element is D::value(c) of its own coordinates c (rank R; D::value may
//! change c): from a linear index, coordinates or a row, one element at a
//! time. D derives from it (and may read vectors faster in its own load
//! and row_load).
template <class D, class C, std::size_t R, std::size_t RO>
struct coord_reader {
  using compute = C;
  template <int vector_width>
  using regs = vec_regs<C, vector_width>;
  static constexpr std::size_t slots = 0;
  own_coords<R, RO> map;

  //! Moves linear index 0 to output element `start` (the host's pieces).
  void rebase_linear(index_t start) { map.base += start; }
  template <bool allow_periodic = false>
  LOOM_HD C at_linear(index_t i) const {
    index_t c[R];
    map.of_linear(i, c);
    return self().value(c);
  }
  template <class Ctx = no_ctx>
  LOOM_HD C at(const index_t* idx, const Ctx& = {}) const {
    index_t c[R];
    map.of_index(idx, c);
    return self().value(c);
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t i0, regs<vector_width>& r) const {
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) r.v[j] = at_linear(i0 + j);
  }
  template <int vector_width>
  LOOM_HD void row_load(const index_t* lead, index_t c0, regs<vector_width>& r) const {
    index_t c[R];
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) {
      map.of_row(lead, c0 + j, c);
      r.v[j] = self().value(c);
    }
  }
  template <int vector_width, class Ctx = no_ctx>
  LOOM_HD C elem(const regs<vector_width>& r, int j, const Ctx& = {}) const {
    return r.v[j];
  }

 private:
  LOOM_HD const D& self() const { return static_cast<const D&>(*this); }
};

//! Throws aliasing_error when a leaf of node n overlaps the output `out`
//! (a view; nothing to check for a read-only target): nodes that read
//! their operands at other coordinates than the element they write cannot
//! read what the assignment overwrites.
template <class N, class Out>
void check_not_overwritten(const N& n, const Out& out, const char* what) {
  if constexpr (any_view<Out>) {
    for_each_leaf(n, [&](const auto& leaf) {
      if (may_overlap(leaf.v, out))
        throw aliasing_error(std::string("loom: ") + what + " reads memory that the output (shape " +
                             shape_string(out.extents()) +
                             ") overwrites; evaluate into a new tensor (loom::materialize) first");
    });
  } else {
    (void)n, (void)out, (void)what;
  }
}

//! The rank of what a node is bound to (a view or a read_only_target).
template <class Out>
inline constexpr std::size_t out_rank_v =
    std::tuple_size_v<std::remove_cvref_t<decltype(std::declval<const Out&>().extents())>>;
}  // namespace loom::detail
