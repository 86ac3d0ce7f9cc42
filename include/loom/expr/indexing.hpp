// SPDX-License-Identifier: Apache-2.0
#pragma once

// Indexing nodes: gather, index_select and embedding read a source
// expression at positions that an integer index tensor (int32 or int64)
// gives. They are expression nodes like any other, so
// `y = embedding(ids, table) * scale + pos` is one kernel. The source is
// bound over its own shape and evaluated at the selected coordinates; a
// source that is a tensor is read with 16-byte loads where the selected
// rows allow (embedding, and index_select along any axis but the last).
//
// Out-of-range indices (index_mode): the host throws index_error naming the
// index and the extent before anything runs; a device kernel reads a
// clamped index (never out of bounds) and records the first one it meets,
// which loom raises at the next synchronization (core/index_fault.hpp).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/index_fault.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/coords.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! "No padding row" for embedding's and embedding_backward's padding_idx.
inline constexpr index_t no_padding = std::numeric_limits<index_t>::min();
}  // namespace loom

namespace loom::detail {
namespace emb {
// The padding row in [0, rows), or -1 for none; a padding index outside
// [-rows, rows) throws (a negative one counts from the end, as in PyTorch).
inline index_t padding_row(const char* op, index_t padding_idx, index_t rows) {
  if (padding_idx == no_padding) return -1;
  if (padding_idx < -rows || padding_idx >= rows)
    throw index_error(std::string("loom: ") + op + ": padding_idx " + std::to_string(padding_idx) +
                      " is out of range for a table of " + std::to_string(rows) + " rows (valid: " +
                      std::to_string(-rows) + " to " + std::to_string(rows - 1) + ")");
  return padding_idx < 0 ? padding_idx + rows : padding_idx;
}
}  // namespace emb

// Kernel-side indexing node. Src: the bound source (rank RS, bound over its
// own shape); I: the index type; R: the node's own rank; RO: the output's.
// Element c (own coordinates) reads the index at sum(c[d] * ist[d]) and the
// source at s, where s[k] is c[from[k]], or the index for from[k] < 0.
template <class Src, class I, std::size_t R, std::size_t RS, std::size_t RO>
struct bound_gather : coord_reader<bound_gather<Src, I, R, RS, RO>, typename Src::compute, R, RO> {
  using compute = typename Src::compute;
  template <int vector_width>
  using regs = vec_regs<compute, vector_width>;
  // The host's linear loops read runs of elements through load (one index
  // and one copy of a row's run), not element by element.
  static constexpr bool linear_blocks = true;
  Src src;
  const I* idx;
  shape<R> ist;               // the index's strides along the own axes (0: does not vary)
  std::int8_t from[RS];       // the own axis of each source axis (-1: the index)
  index_t bound;              // the source's extent along the indexed axis
  index_fault_record* fault;  // where a device kernel records a bad index (null: not recorded)
  int op;                     // index_op, for the record
  int axis;                   // the indexed source axis, for the record
  bool rows_ok;               // the vector form may read runs along the source's last axis
  shape<R> sown;              // a tensor source: its stride along the source axis that own axis d gives
  index_t saxis;              // a tensor source: its stride along the indexed axis

  // The index of own element c, clamped into [0, bound) (recorded if it was not).
  LOOM_HD index_t index_at(const index_t* c) const {
    index_t off = 0;
    for (std::size_t d = 0; d != R; ++d) off += c[d] * ist[d];
    index_t v = static_cast<index_t>(idx[off]);
    if (v < 0 || v >= bound) {
      record_index_fault(fault, static_cast<index_op>(op), axis, v, bound);
      v = v < 0 ? 0 : bound - 1;
    }
    return v;
  }
  LOOM_HD void source_coords(const index_t* c, index_t v, index_t* s) const {
    for (std::size_t k = 0; k != RS; ++k) s[k] = from[k] < 0 ? v : c[from[k]];
  }
  // A tensor source's offset of own element c given its index v: the strides
  // per own axis make it a sum over compile-time positions (no coordinates
  // indexed at run time, which would live in local memory on the device).
  LOOM_HD index_t source_offset(const index_t* c, index_t v) const {
    index_t off = v * saxis;
    for (std::size_t d = 0; d != R; ++d) off += c[d] * sown[d];
    return off;
  }
  LOOM_HD compute value(const index_t* c) const {
    if constexpr (is_bound_leaf<Src>::value) {
      return static_cast<compute>(src.p[source_offset(c, index_at(c))]);
    } else {
      index_t s[RS];
      source_coords(c, index_at(c), s);
      return src.at(s);
    }
  }
  // vector_width elements from own coordinates c on, along the last own
  // axis (which the source's last axis follows, with the same index): one
  // index read and, from a tensor source whose run is 16-byte aligned, one
  // vector load.
  using base = coord_reader<bound_gather<Src, I, R, RS, RO>, typename Src::compute, R, RO>;
  template <int vector_width>
  LOOM_HD void run(index_t* c, regs<vector_width>& r) const {
    if constexpr (is_bound_leaf<Src>::value) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(src.p)>>;
      const T* const p = src.p + source_offset(c, index_at(c));  // the run's last stride is 1 (rows_ok)
      if constexpr (sizeof(T) * vector_width % 16 == 0) {
        if (reinterpret_cast<std::uintptr_t>(p) % 16 == 0) {
          vec_regs<T, vector_width> t;
          vec_load<T, vector_width>(p, t);
          LOOM_UNROLL
          for (int j = 0; j < vector_width; ++j) r.v[j] = static_cast<compute>(t.v[j]);
          return;
        }
      }
      LOOM_UNROLL
      for (int j = 0; j < vector_width; ++j) r.v[j] = static_cast<compute>(p[j]);
    } else {
      index_t s[RS];
      source_coords(c, index_at(c), s);
      LOOM_UNROLL
      for (int j = 0; j < vector_width; ++j) {
        r.v[j] = src.at(s);
        ++s[RS - 1];
      }
    }
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t i0, regs<vector_width>& r) const {
    index_t c[R];
    this->map.of_linear(i0, c);
    if (rows_ok && this->map.last_moves() && c[R - 1] + vector_width <= this->map.last_extent())
      run<vector_width>(c, r);
    else
      base::template load<vector_width>(i0, r);
  }
  template <int vector_width>
  LOOM_HD void row_load(const index_t* lead, index_t c0, regs<vector_width>& r) const {
    index_t c[R];
    this->map.of_row(lead, c0, c);
    if (rows_ok && this->map.last_moves())
      run<vector_width>(c, r);
    else
      base::template row_load<vector_width>(lead, c0, r);
  }
  //! Host: whether consecutive output elements read consecutive source
  //! elements along each output row (a tensor source, the index fixed along
  //! the row, rows of at least `min_row` elements): the host's contiguous
  //! loop then reads the node as a dense operand over each row's run
  //! (host_run) instead of run by run through load.
  bool host_runs(index_t min_row) const
    requires is_bound_leaf<Src>::value
  {
    return rows_ok && this->map.last_moves() && this->map.last_extent() >= min_row;
  }
  //! Host, when host_runs: the node from linear element 0 on (rebase_linear
  //! moves it) as a dense leaf over its source run, and the run's length
  //! (to the end of the output row).
  auto host_run(index_t& len) const
    requires is_bound_leaf<Src>::value
  {
    index_t c[R];
    this->map.of_linear(0, c);
    len = this->map.last_extent() - c[R - 1];
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(src.p)>>;
    return bound_leaf<T, 1>{src.p + source_offset(c, index_at(c)), shape<1>{1}};
  }
  //! The same source read through the same index under the same map.
  bool same_as(const bound_gather& o) const {
    return idx == o.idx && ist == o.ist && this->map.same_as(o.map) &&
           std::memcmp(from, o.from, sizeof(from)) == 0 && bound == o.bound && src.same_as(o.src);
  }
};
// The node reads its source and index through coordinates of its own: to
// the walks of a bound tree (the row cache, the host's rebasing) it is one
// leaf that reads no memory of theirs.
template <class Src, class I, std::size_t R, std::size_t RS, std::size_t RO>
struct children_of<bound_gather<Src, I, R, RS, RO>> : no_children<bound_gather<Src, I, R, RS, RO>> {};

//! The position (coordinates) of element i of an index view, for messages.
template <class V>
std::string index_position(const V& v, index_t i) {
  constexpr std::size_t R = V::rank;
  shape<R> c{};
  for (std::size_t d = R; d-- > 0;) {
    c[d] = v.extent(d) > 0 ? i % v.extent(d) : 0;
    i = v.extent(d) > 0 ? i / v.extent(d) : 0;
  }
  return shape_string(c);
}

//! Throws index_error at the first element of host index view `v` outside
//! [0, bound), naming it, its position and the extent.
template <class I, std::size_t Ri>
void check_host_indices(const view<const I, Ri, host>& v, index_op op, int axis, index_t bound) {
  const index_t n = v.size();
  const bool dense = v.is_contiguous();
  for (index_t i = 0; i < n; ++i) {
    const auto x = static_cast<index_t>(dense ? v.data()[i] : v.data()[v.offset_of(i)]);
    if (x < 0 || x >= bound)
      throw index_error(index_fault_message(static_cast<int>(op), axis, x, bound) + " (element " +
                        index_position(v, i) + " of the index tensor of shape " + shape_string(v.extents()) + ")");
  }
}
}  // namespace loom::detail

namespace loom {
//! An indexing node (gather, index_select, embedding): reads source
//! expression Src (rank RS) at coordinates that index leaf Idx selects; R is
//! its own rank. Built by loom::gather, loom::index_select, loom::embedding.
template <class Idx, class Src, std::size_t R>
struct gather_node : detail::node_tag {
  using value_type = typename Src::value_type;
  using space = detail::common_space_t<typename Idx::space, typename Src::space>;
  using index_type = typename Idx::value_type;
  static constexpr std::size_t rank = R;
  static constexpr std::size_t source_rank = Src::rank;
  static_assert(std::is_same_v<index_type, std::int32_t> || std::is_same_v<index_type, std::int64_t>,
                "loom: indices must be an int32 or int64 tensor");
  static_assert(detail::node_slots<Src>::value == 0,
                "loom: an indexing node cannot read an expression with row reductions (row_sum, row_max, ...); "
                "materialize it first");
  Idx ids;
  Src src;
  shape<R> ext;
  shape<R> ist;                    // index strides along the own axes
  std::int8_t from[Src::rank]{};   // own axis of each source axis, -1 for the indexed one
  int axis = 0;                    // the indexed source axis
  detail::index_op op{};
  index_mode mode = index_mode::checked;
  index_t padding = no_padding;    // embedding: the row that gets no gradient (loom::grad)

  gather_node(const Idx& i, const Src& s) : ids(i), src(s) {}
  shape<R> extents() const { return ext; }

  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info&) const {
    constexpr std::size_t RO = detail::out_rank_v<Out>;
    static_assert(R <= RO, "loom: an indexing node has a higher rank than the output");
    using S = typename Out::space;
    detail::check_not_overwritten(*this, out, detail::index_op_name(static_cast<int>(op)));
    const index_t bound = src.extents()[static_cast<std::size_t>(axis)];
    // Nothing to clamp into: an error in either mode (the output has elements).
    if (bound == 0 && ids.v.size() > 0)
      throw index_error(std::string("loom: ") + detail::index_op_name(static_cast<int>(op)) +
                        ": every index is out of range for axis " + std::to_string(axis) + " of extent 0");
    detail::index_fault_record* fault = nullptr;
    if (mode == index_mode::checked) {
      if constexpr (std::is_same_v<S, host>)
        detail::check_host_indices(ids.v, op, axis, bound);
      else
        fault = detail::index_fault_device();
    }
    detail::bind_info inner;
    auto sb = detail::binder::bind<0>(src, detail::read_only_target<Src::rank, S>{src.extents()}, inner);
    using SB = decltype(sb);
    detail::bound_gather<SB, index_type, R, Src::rank, RO> b{{detail::own_coords<R, RO>::make(ext, out.extents())},
                                                             sb,
                                                             ids.v.data(),
                                                             ist,
                                                             {},
                                                             bound,
                                                             fault,
                                                             static_cast<int>(op),
                                                             axis,
                                                             false,
                                                             {},
                                                             0};
    std::memcpy(b.from, from, sizeof(from));
    // Runs along the last own axis read runs along the source's last axis
    // with one index when the index does not change along it.
    b.rows_ok = ist[R - 1] == 0 && from[Src::rank - 1] == static_cast<std::int8_t>(R - 1);
    if constexpr (detail::is_bound_leaf<SB>::value) {
      b.rows_ok = b.rows_ok && sb.st[Src::rank - 1] == 1;
      for (std::size_t k = 0; k != Src::rank; ++k) {
        if (from[k] < 0)
          b.saxis = sb.st[k];
        else
          b.sown[static_cast<std::size_t>(from[k])] = sb.st[k];
      }
    }
    return b;
  }
};

namespace detail {
template <class Idx, class Src, std::size_t R>
struct children_of<gather_node<Idx, Src, R>> {
  using types = type_list<Idx, Src>;
  template <std::size_t I, class M>
  LOOM_HD static auto& get(M& n) {
    if constexpr (I == 0)
      return n.ids;
    else
      return n.src;
  }
  template <class I2, class S2>
  using rebind = gather_node<I2, S2, R>;
  template <class I2, class S2>
  static auto rebuild(const gather_node<Idx, Src, R>& n, const I2& i, const S2& s) {
    gather_node<I2, S2, R> m(i, s);
    m.ext = n.ext;
    m.ist = n.ist;
    std::memcpy(m.from, n.from, sizeof(m.from));
    m.axis = n.axis;
    m.op = n.op;
    m.mode = n.mode;
    m.padding = n.padding;
    return m;
  }
};

// Sets what index_select and gather share: source axis a (normalized) takes
// the index, every other source axis its own coordinate.
template <class N>
void select_along(N& n, std::size_t a, index_op op, index_mode mode) {
  for (std::size_t k = 0; k != N::source_rank; ++k)
    n.from[k] = k == a ? std::int8_t{-1} : static_cast<std::int8_t>(k);
  n.axis = static_cast<int>(a);
  n.op = op;
  n.mode = mode;
}

// The index as a leaf: a tensor or view, or a layer's parameter that is one.
template <class X>
auto index_leaf(const X& x) {
  static_assert(tensor_like<X> || is_leaf_node<X>, "loom: the indices must be a tensor or a view (int32 or int64)");
  return as_node(x);
}
template <class Idx, class Src>
void check_index_spaces() {
  static_assert(std::is_void_v<typename Src::space> || std::is_same_v<typename Idx::space, typename Src::space>,
                "loom: the indices and the source live in different memory spaces; copy one side first with "
                "loom::to_device(x) or loom::to_host(x)");
}
}  // namespace detail

//! Selects entries of `src` along `axis` (negative counts from the end):
//! the result has src's shape with that axis replaced by the length of
//! `index` (a rank-1 int32 or int64 tensor or view), and element [..., j,
//! ...] is src[..., index[j], ...], as torch.index_select. Lazily: the
//! selection is part of the assignment's one kernel. Indices must lie in
//! [0, extent) (negative ones are out of range, as in PyTorch); see
//! index_mode for what an out-of-range index does.
//! Example: `y = loom::index_select(x * 2, 0, rows);`
template <expression E, class I>
[[nodiscard]] auto index_select(const E& src, int axis, const I& index, index_mode mode = index_mode::checked) {
  using Src = detail::node_t<E>;
  using Idx = decltype(detail::index_leaf(index));
  detail::check_index_spaces<Idx, Src>();
  static_assert(Idx::rank == 1, "loom: index_select needs a rank-1 index tensor");
  static_assert(Src::rank >= 1, "loom: index_select needs a source of rank 1 or more");
  constexpr std::size_t R = Src::rank;
  gather_node<Idx, Src, R> n(detail::index_leaf(index), detail::as_node(src));
  const std::size_t a = detail::normalize_axis<R>(axis);
  n.ext = n.src.extents();
  n.ext[a] = n.ids.v.extent(0);
  n.ist = {};
  n.ist[a] = n.ids.v.stride(0);
  detail::select_along(n, a, detail::index_op::index_select, mode);
  return n;
}

//! Gathers along `axis` (negative counts from the end): the result has the
//! shape of `index` (an int32 or int64 tensor or view of src's rank whose
//! extents, but along `axis`, are at most src's), and element c is src at
//! c with coordinate `axis` replaced by index[c], as torch.gather. Lazily,
//! in the assignment's one kernel. Indices must lie in [0, extent); see
//! index_mode. Shapes that do not fit throw shape_error naming both shapes
//! and the axis. Example: `y = loom::gather(scores, 1, picks);`
template <expression E, class I>
[[nodiscard]] auto gather(const E& src, int axis, const I& index, index_mode mode = index_mode::checked) {
  using Src = detail::node_t<E>;
  using Idx = decltype(detail::index_leaf(index));
  detail::check_index_spaces<Idx, Src>();
  static_assert(Idx::rank == Src::rank && Src::rank >= 1,
                "loom: gather needs an index tensor of the source's rank (1 or more)");
  constexpr std::size_t R = Src::rank;
  gather_node<Idx, Src, R> n(detail::index_leaf(index), detail::as_node(src));
  const std::size_t a = detail::normalize_axis<R>(axis);
  const auto se = n.src.extents();
  n.ext = n.ids.v.extents();
  for (std::size_t d = 0; d != R; ++d)
    if (d != a && n.ext[d] > se[d])
      throw shape_error("loom: gather along axis " + std::to_string(a) + ": the index shape " + shape_string(n.ext) +
                        " exceeds the source shape " + shape_string(se) + " on axis " + std::to_string(d));
  n.ist = n.ids.v.strides();
  for (std::size_t d = 0; d != R; ++d)
    if (n.ext[d] == 1) n.ist[d] = 0;
  detail::select_along(n, a, detail::index_op::gather, mode);
  return n;
}

//! Embedding lookup, as torch.nn.functional.embedding: for `ids` (an int32
//! or int64 tensor or view of any rank) and `table` (rank 2, [rows, dim]),
//! the result has shape ids.shape + [dim] and row ids[c] of the table at c.
//! Lazily: `y = embedding(ids, table) * scale + pos` is one kernel, reading
//! each selected row with 16-byte loads where it is aligned. A padding index
//! changes only the backward (embedding_backward), as in PyTorch. Ids must
//! lie in [0, rows); see index_mode.
//! Example: `h = loom::embedding(tokens, wte) + loom::embedding(positions, wpe);`
template <class I, expression E>
[[nodiscard]] auto embedding(const I& ids, const E& table, index_mode mode = index_mode::checked) {
  using Src = detail::node_t<E>;
  using Idx = decltype(detail::index_leaf(ids));
  detail::check_index_spaces<Idx, Src>();
  static_assert(Src::rank == 2, "loom: embedding needs a table of rank 2 ([rows, dim])");
  static_assert(Idx::rank + 1 <= max_rank, "loom: embedding's ids have too high a rank");
  constexpr std::size_t R = Idx::rank + 1;
  gather_node<Idx, Src, R> n(detail::index_leaf(ids), detail::as_node(table));
  const auto ie = n.ids.v.extents();
  n.ist = {};
  for (std::size_t d = 0; d + 1 < R; ++d) {
    n.ext[d] = ie[d];
    n.ist[d] = ie[d] == 1 ? 0 : n.ids.v.stride(d);
  }
  n.ext[R - 1] = n.src.extents()[1];
  n.from[0] = -1;
  n.from[1] = static_cast<std::int8_t>(R - 1);
  n.axis = 0;
  n.op = detail::index_op::embedding;
  n.mode = mode;
  return n;
}

//! embedding(ids, table) whose row `padding_idx` (negative counts from the
//! end) gets no gradient under loom::grad, as torch.nn.functional.embedding's
//! padding_idx; the forward reads that row as any other. A padding index
//! outside [-rows, rows) throws index_error.
//! Example: `y = loom::embedding(ids, table, pad) * scale;`
template <class I, expression E>
[[nodiscard]] auto embedding(const I& ids, const E& table, index_t padding_idx, index_mode mode = index_mode::checked) {
  auto n = embedding(ids, table, mode);
  detail::emb::padding_row("embedding", padding_idx, n.src.extents()[0]);
  n.padding = padding_idx;
  return n;
}
}  // namespace loom
