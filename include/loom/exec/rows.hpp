// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/exec/assign.hpp"
#include "loom/core/launch.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"

namespace loom {
namespace fn {
// Row reduction operations: an identity, a combine and a finalize.
//! Sum along the row.
struct row_sum_op {
  template <class A>
  LOOM_HD static A identity() {
    return A(0);
  }
  template <class A>
  LOOM_HD static A combine(A a, A b) {
    return a + b;
  }
  template <class A>
  LOOM_HD static A finalize(A a, index_t) {
    return a;
  }
};
//! Mean along the row (the sum divided by the row length; NaN for an empty row).
struct row_mean_op : row_sum_op {
  template <class A>
  LOOM_HD static A finalize(A a, index_t n) {
    return a / static_cast<A>(n);
  }
};
//! Maximum along the row; NaN if any element is NaN (as torch.amax).
struct row_max_op {
  template <class A>
  LOOM_HD static A identity() {
    return -std::numeric_limits<A>::infinity();
  }
  template <class A>
  LOOM_HD static A combine(A a, A b) {
    if (a != a || b != b) return a + b;
    return a < b ? b : a;
  }
  template <class A>
  LOOM_HD static A finalize(A a, index_t) {
    return a;
  }
};
//! Minimum along the row; NaN if any element is NaN.
struct row_min_op {
  template <class A>
  LOOM_HD static A identity() {
    return std::numeric_limits<A>::infinity();
  }
  template <class A>
  LOOM_HD static A combine(A a, A b) {
    if (a != a || b != b) return a + b;
    return b < a ? b : a;
  }
  template <class A>
  LOOM_HD static A finalize(A a, index_t) {
    return a;
  }
};
}  // namespace fn

namespace detail {
// The accumulation type of a row reduction over values of type T: float for
// everything but double (so half/bf16/int rows accumulate in float).
template <class T>
using row_acc_t = std::conditional_t<std::is_same_v<compute_t<T>, double>, double, float>;

template <std::size_t S, class A>
struct row_ctx {
  A v[S > 0 ? S : 1];
};

template <class Op, class A, std::size_t Slot, class B>
struct bound_row_reduce {
  using compute = A;
  using acc = A;
  using op = Op;
  template <int V>
  struct regs {};
  static constexpr std::size_t slots = slots_of<B> + 1;
  static constexpr std::size_t slot = Slot;
  B arg;
  index_t cols;  // length of the reduced rows

  template <class Ctx>
  LOOM_HD A at(const index_t*, const Ctx& ctx) const {
    return static_cast<A>(ctx.v[Slot]);
  }
  template <int V>
  LOOM_HD void row_load(const index_t*, index_t, regs<V>&) const {}
  template <int V, class Ctx>
  LOOM_HD A elem(const regs<V>&, int, const Ctx& ctx) const {
    return static_cast<A>(ctx.v[Slot]);
  }
  //! The same reduction of the same values (the slot number aside).
  template <std::size_t Other, class B2>
  bool same_as(const bound_row_reduce<Op, A, Other, B2>& o) const {
    return cols == o.cols && arg.same_as(o.arg);
  }
};
template <class Op, class A, std::size_t Slot, class B>
struct children_of<bound_row_reduce<Op, A, Slot, B>> {
  using types = type_list<B>;
  template <std::size_t, class M>
  LOOM_HD static auto& get(M& n) {
    return n.arg;
  }
  template <class C>
  using rebind = bound_row_reduce<Op, A, Slot, C>;
};
template <class Op, class A, std::size_t Slot, class B>
struct is_bound_row_reduce<bound_row_reduce<Op, A, Slot, B>> : std::true_type {};
template <class Op, class A, std::size_t Slot, class B>
struct slot_number<bound_row_reduce<Op, A, Slot, B>> : std::integral_constant<std::size_t, Slot> {};

// The type of the row-reduction node with slot S in a bound tree (void if none).
template <std::size_t S>
struct has_slot {
  template <class N>
  struct test : std::bool_constant<slot_number<N>::value == S> {};
};
template <class B, std::size_t S>
using slot_type_t = tree_find_t<B, has_slot<S>::template test>;

// A bound type with every slot number set to 0: two reductions whose erased
// types agree compute the same function of their inputs.
template <class X>
struct zero_slot {
  using type = X;
};
template <class Op, class A, std::size_t Slot, class B>
struct zero_slot<bound_row_reduce<Op, A, Slot, B>> {
  using type = bound_row_reduce<Op, A, 0, B>;
};
template <class X>
using erase_slots_t = typename tree_map<X, zero_slot>::type;

// The first slot before S whose reduction has the same type as slot S (S if
// none): a candidate to reuse instead of recomputing. Identical row
// reductions (the two row_max(x) of a plainly written softmax) have
// identical types; a run-time check confirms they also read the same data.
template <class B, std::size_t S, std::size_t T = 0>
constexpr std::size_t first_same_slot() {
  if constexpr (T >= S) {
    return S;
  } else {
    using st = slot_type_t<B, S>;
    using tt = slot_type_t<B, T>;
    if constexpr (std::is_same_v<erase_slots_t<st>, erase_slots_t<tt>>)
      return T;
    else
      return first_same_slot<B, S, T + 1>();
  }
}

// Bit S set: slot S is computed by copying slot first_same_slot<S>.
template <class B, std::size_t... S>
std::uint64_t reuse_mask(const B& b, std::index_sequence<S...>) {
  static_assert(sizeof...(S) <= 64, "loom: more than 64 row reductions in one assignment");
  std::uint64_t mask = 0;
  auto one = [&](auto s_const) {
    constexpr std::size_t s = decltype(s_const)::value;
    constexpr std::size_t t = first_same_slot<B, s>();
    if constexpr (t != s) {
      with_slot<s>(b, [&](const auto& rs) {
        with_slot<t>(b, [&](const auto& rt) {
          if (rs.same_as(rt)) mask |= std::uint64_t{1} << s;
        });
      });
    }
  };
  (one(std::integral_constant<std::size_t, S>{}), ...);
  return mask;
}

// The longest reduced row among the slots of a bound tree.
template <class B, std::size_t... S>
index_t longest_row(const B& b, index_t at_least, std::index_sequence<S...>) {
  (with_slot<S>(b, [&](const auto& red) { at_least = red.cols > at_least ? red.cols : at_least; }), ...);
  return at_least;
}

// Whether a bound tree reads double leaves or reduces a row in double (a
// double accumulator: `row_sum(cast<double>(x))` of float x): its row
// results, and a row kernel's reduction scratch, are then double, else float.
template <class N>
struct double_valued : std::false_type {};
template <std::size_t R>
struct double_valued<bound_leaf<double, R>> : std::true_type {};
template <class Op, std::size_t Slot, class B>
struct double_valued<bound_row_reduce<Op, double, Slot, B>> : std::true_type {};
template <class B>
inline constexpr bool uses_double = tree_any_v<B, double_valued>;
}  // namespace detail

//! A reduction along the last axis of `e` that keeps that axis with extent 1,
//! so it broadcasts back along the row: `x - row_max(x)`. Usable anywhere in
//! an elementwise expression, nested, depending on other row reductions. An
//! assignment whose tree holds row reductions is ONE kernel: each row is
//! reduced (in dependency order) and then written by one group of threads.
template <class Op, class E>
struct row_reduce_node : detail::node_tag {
  using value_type = std::conditional_t<std::is_same_v<Op, fn::row_mean_op> && !is_floating_v<typename E::value_type>,
                                        float, typename E::value_type>;
  using space = typename E::space;
  static constexpr std::size_t rank = E::rank > 0 ? E::rank : 1;
  E e;

  explicit row_reduce_node(const E& e_) : e(e_) {}
  shape<rank> extents() const {
    shape<rank> s{};
    s.fill(1);
    const auto in = e.extents();
    for (std::size_t d = 0; d != E::rank; ++d) s[rank - E::rank + d] = in[d];
    s[rank - 1] = 1;
    return s;
  }

  //! Binds the argument over the output's leading axes and its own row length.
  template <std::size_t Base, class O, std::size_t RO, class S>
  auto bind_node(const view<O, RO, S>& out, detail::bind_info& info) const {
    const auto target = row_target(out.extents());
    detail::bind_info inner;
    info.contiguous = false;
    info.linear = false;
    if (target == out.extents()) {
      // Reading the output's own memory is fine under the same index map: a
      // row is reduced completely before any of it is written.
      return finish<Base>(detail::binder::bind<Base>(e, out, inner), target);
    }
    detail::for_each_leaf(e, [&](const auto& leaf) {
      if (may_overlap(leaf.v, out))
        throw aliasing_error("loom: a row reduction over rows of length " + std::to_string(target[RO - 1]) +
                             " reads memory that the output (shape " + shape_string(out.extents()) +
                             ") overwrites; evaluate into a new tensor (loom::materialize) first");
    });
    return finish<Base>(detail::binder::bind<Base>(e, detail::read_only_target<RO, S>{target}, inner), target);
  }
  template <std::size_t Base, std::size_t RO, class S>
  auto bind_node(const detail::read_only_target<RO, S>& out, detail::bind_info& info) const {
    const auto target = row_target(out.extents());
    detail::bind_info inner;
    info.contiguous = false;
    info.linear = false;
    return finish<Base>(detail::binder::bind<Base>(e, detail::read_only_target<RO, S>{target}, inner), target);
  }

 private:
  // The argument's binding shape: the output's leading axes, the argument's row length.
  template <std::size_t RO>
  shape<RO> row_target(const shape<RO>& out_ext) const {
    static_assert(rank <= RO, "loom: a row reduction has a higher rank than the output");
    const auto in = e.extents();
    const index_t cols = E::rank > 0 ? in[E::rank - 1] : 1;
    if (cols == 0 && (std::is_same_v<Op, fn::row_max_op> || std::is_same_v<Op, fn::row_min_op>))
      throw shape_error("loom: row_max/row_min over empty rows (shape " + shape_string(in) + ")");
    shape<RO> target = out_ext;
    target[RO - 1] = cols;
    return target;
  }
  template <std::size_t Base, class B, std::size_t RO>
  static auto finish(const B& arg, const shape<RO>& target) {
    using A = detail::row_acc_t<typename E::value_type>;
    return detail::bound_row_reduce<Op, A, Base + detail::node_slots<E>::value, B>{arg, target[RO - 1]};
  }
};

namespace detail {
template <class Op, class E>
struct children_of<row_reduce_node<Op, E>> : one_child_e<E> {
  template <class C>
  using rebind = row_reduce_node<Op, C>;
  template <class C>
  static auto rebuild(const row_reduce_node<Op, E>&, const C& c) {
    return row_reduce_node<Op, C>(c);
  }
};
template <class Op, class E>
struct is_row_reduction<row_reduce_node<Op, E>> : std::true_type {};
}  // namespace detail
}  // namespace loom

namespace loom {
namespace detail {
// Kernel-side column index: the coordinate along the last axis.
template <std::size_t R>
struct bound_column_index {
  using compute = std::int64_t;
  template <int V>
  using regs = vec_regs<std::int64_t, V>;
  static constexpr std::size_t slots = 0;
  fast_divmod cols;  // for linear indexing: column = i % cols

  template <bool P = false>
  LOOM_HD std::int64_t at_linear(index_t i) const {
    std::uint64_t q, r;
    cols.divmod(static_cast<std::uint64_t>(i), q, r);
    return static_cast<std::int64_t>(r);
  }
  template <class Ctx = no_ctx>
  LOOM_HD std::int64_t at(const index_t* idx, const Ctx& = {}) const {
    return idx[R - 1];
  }
  template <int V, bool P = false>
  LOOM_HD void load(index_t i0, regs<V>& r) const {
    for (int j = 0; j < V; ++j) r.v[j] = at_linear(i0 + j);
  }
  template <int V>
  LOOM_HD void row_load(const index_t*, index_t c0, regs<V>& r) const {
    for (int j = 0; j < V; ++j) r.v[j] = c0 + j;
  }
  template <int V, class Ctx = no_ctx>
  LOOM_HD std::int64_t elem(const regs<V>& r, int j, const Ctx& = {}) const {
    return r.v[j];
  }
  bool same_as(const bound_column_index& o) const { return cols.d == o.cols.d; }
};
template <std::size_t R>
struct children_of<bound_column_index<R>> {
  using types = type_list<>;
  template <class...>
  using rebind = bound_column_index<R>;
};
}  // namespace detail

//! The column (last-axis) coordinate of every element of a shape, as int64;
//! reads no memory. With a target per row it selects one element per row:
//! `row_sum(where(column_index(x) == t, x, 0))` is x[r, t[r]].
template <std::size_t R, class S>
struct column_index_node : detail::node_tag {
  using value_type = std::int64_t;
  using space = S;
  static constexpr std::size_t rank = R;
  shape<R> ext;

  explicit column_index_node(const shape<R>& s) : ext(s) {}
  shape<R> extents() const { return ext; }
  template <std::size_t Base, class Out>
  auto bind_node(const Out& out, detail::bind_info& info) const {
    constexpr std::size_t RO = std::tuple_size_v<std::remove_cvref_t<decltype(out.extents())>>;
    info.contiguous = false;  // its values depend on the coordinates, not on a memory layout
    info.linear = false;
    const index_t cols = out.extents()[RO - 1];
    return detail::bound_column_index<RO>{detail::fast_divmod(static_cast<std::uint64_t>(cols > 0 ? cols : 1))};
  }
};

namespace detail {
template <std::size_t R, class S>
struct children_of<column_index_node<R, S>> {
  using types = type_list<>;
  template <class...>
  using rebind = column_index_node<R, S>;
};
}  // namespace detail

//! Column coordinates shaped like `e` (in e's memory space).
//! Example: `auto causal = column_index(scores) <= row_index;`
template <expression E>
[[nodiscard]] auto column_index(const E& e) {
  using node = detail::node_t<E>;
  static_assert(node::rank >= 1, "loom: column_index needs a rank of 1 or more");
  return column_index_node<node::rank, typename node::space>(detail::as_node(e).extents());
}

#define LOOM_ROW_REDUCTION(name, op)                                   \
  template <expression E>                                              \
  [[nodiscard]] auto name(const E& e) {                                \
    using node = detail::node_t<E>;                                    \
    return row_reduce_node<fn::op, node>(detail::as_node(e));          \
  }
//! Row reductions: over the last axis, keeping it with extent 1 (so they
//! broadcast back along the row). Accumulate in float (double for double
//! inputs); max/min propagate NaN. Inside an assignment they cost no extra
//! kernel: the whole assignment is one kernel with one pass per reduction
//! over each row, then the output pass; a row that several passes read is
//! copied into shared memory once first (see eval_info::cached_rows).
//! Example: `y = exp(x - row_max(x)) / row_sum(exp(x - row_max(x)));`
LOOM_ROW_REDUCTION(row_sum, row_sum_op)
LOOM_ROW_REDUCTION(row_mean, row_mean_op)
LOOM_ROW_REDUCTION(row_max, row_max_op)
LOOM_ROW_REDUCTION(row_min, row_min_op)
#undef LOOM_ROW_REDUCTION

namespace detail {
// Coordinates of row `row` over the output's leading axes.
template <std::size_t R>
struct row_layout {
  index_t rows = 0;
  index_t cols = 0;
  fast_divmod div[R > 1 ? R - 1 : 1];
  LOOM_HD void lead_of(index_t row, index_t* lead) const {
    std::uint64_t rest = static_cast<std::uint64_t>(row);
    for (std::size_t d = R - 1; d-- > 0;) {
      std::uint64_t q, r;
      div[d].divmod(rest, q, r);
      lead[d] = static_cast<index_t>(r);
      rest = q;
    }
  }
};

template <class O, std::size_t R>
struct row_out {
  O* p;
  shape<R> st;
  LOOM_HD index_t offset(const index_t* lead, index_t c) const {
    index_t off = c * st[R - 1];
    for (std::size_t d = R - 1; d-- > 0;) off += lead[d] * st[d];
    return off;
  }
};

// Row outputs ("sinks"): where the output pass stores. A sink evaluates its
// trees for one column (`one`) or V columns (`vec`, 16-byte loads and stores)
// and computes every value before storing any, so an output may alias an
// input under the same index map.
// An output of one column ([N, 1]: a row reduction kept as a column) never
// takes a vector store: a vector step covers 16 bytes of the smallest type,
// at least 2 elements for the output types loom has, more than the row
// holds; so it does not keep its reductions' passes from the vector loads.
template <class O, std::size_t R>
bool row_out_vector_ok(const view<O, R, device>& v) {
  if (v.extent(R - 1) == 1 && sizeof(O) < 16) return true;
  if (v.stride(R - 1) != 1 || reinterpret_cast<std::uintptr_t>(v.data()) % 16 != 0) return false;
  for (std::size_t d = 0; d + 1 < R; ++d)
    if ((v.stride(d) * static_cast<index_t>(sizeof(O))) % 16 != 0) return false;
  return true;
}

// One output, written by the root tree.
template <class O, std::size_t R>
struct row_sink1 {
  static constexpr std::size_t smallest = sizeof(O);
  row_out<O, R> o;
  template <class B, class Ctx>
  LOOM_HD void one(const B& b, const index_t* idx, const index_t* lead, index_t c, const Ctx& ctx) const {
    o.p[o.offset(lead, c)] = convert<O>(b.at(idx, ctx));
  }
  template <int V, class B, class Ctx>
  LOOM_HD void vec(const B& b, const index_t* lead, index_t c0, const Ctx& ctx) const {
    typename B::template regs<V> r;
    b.template row_load<V>(lead, c0, r);
    vec_regs<O, V> v;
    LOOM_UNROLL
    for (int j = 0; j < V; ++j) v.v[j] = convert<O>(b.template elem<V>(r, j, ctx));
    vec_store<O, V>(o.p + o.offset(lead, c0), v);
  }
};

// Two outputs of one shape: the root is a bound_map whose two children
// write them.
template <class O1, class O2, std::size_t R>
struct row_sink2 {
  static constexpr std::size_t smallest = sizeof(O1) < sizeof(O2) ? sizeof(O1) : sizeof(O2);
  row_out<O1, R> o1;
  row_out<O2, R> o2;
  template <class B, class Ctx>
  LOOM_HD void one(const B& b, const index_t* idx, const index_t* lead, index_t c, const Ctx& ctx) const {
    const O1 v1 = convert<O1>(detail::get<0>(b.ch).at(idx, ctx));
    const O2 v2 = convert<O2>(detail::get<1>(b.ch).at(idx, ctx));
    o1.p[o1.offset(lead, c)] = v1;
    o2.p[o2.offset(lead, c)] = v2;
  }
  template <int V, class B, class Ctx>
  LOOM_HD void vec(const B& b, const index_t* lead, index_t c0, const Ctx& ctx) const {
    typename B::template regs<V> r;
    b.template row_load<V>(lead, c0, r);
    vec_regs<O1, V> v1;
    vec_regs<O2, V> v2;
    LOOM_UNROLL
    for (int j = 0; j < V; ++j) {
      v1.v[j] = convert<O1>(detail::get<0>(b.ch).template elem<V>(detail::get<0>(r.c), j, ctx));
      v2.v[j] = convert<O2>(detail::get<1>(b.ch).template elem<V>(detail::get<1>(r.c), j, ctx));
    }
    vec_store<O1, V>(o1.p + o1.offset(lead, c0), v1);
    vec_store<O2, V>(o2.p + o2.offset(lead, c0), v2);
  }
};

// Host executor: one row at a time (rows in parallel). Each reduction sums 32
// interleaved partial results and then combines them pairwise, the order the
// device's warps use, so long rows keep float accuracy.
template <class B, class Ctx, std::size_t R, class RR>
void host_reduce_slot(const RR& red, const index_t* lead, Ctx& ctx) {
  using A = typename RR::acc;
  using Op = typename RR::op;
  constexpr int lanes = 32;
  A part[lanes];
  for (int l = 0; l < lanes; ++l) part[l] = Op::template identity<A>();
  index_t idx[R];
  for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
  for (index_t c = 0; c < red.cols; ++c) {
    idx[R - 1] = c;
    part[c % lanes] = Op::combine(part[c % lanes], static_cast<A>(red.arg.at(idx, ctx)));
  }
  for (int w = lanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) part[l] = Op::combine(part[l], part[l + w]);
  ctx.v[RR::slot] = static_cast<typename std::remove_cvref_t<decltype(ctx.v[0])>>(Op::finalize(part[0], red.cols));
}

template <class B, class Ctx, std::size_t R, std::size_t S>
void host_reduce_one(const B& b, const index_t* lead, Ctx& ctx, std::uint64_t reuse) {
  constexpr std::size_t t = first_same_slot<B, S>();
  if constexpr (t != S) {
    if ((reuse >> S) & 1) {
      ctx.v[S] = ctx.v[t];
      return;
    }
  }
  with_slot<S>(b, [&](const auto& red) { host_reduce_slot<B, Ctx, R>(red, lead, ctx); });
}

template <class B, class Ctx, std::size_t R, std::size_t... S>
void host_reduce_all(const B& b, const index_t* lead, Ctx& ctx, std::uint64_t reuse, std::index_sequence<S...>) {
  (host_reduce_one<B, Ctx, R, S>(b, lead, ctx, reuse), ...);
}

#if LOOM_CUDA_COMPILER
// Deterministic reduction of one value per thread over a group of G threads
// (a warp when G == 32, else the whole block): a fixed shuffle tree per warp,
// then warp results combined in order by every thread. All threads get the
// same bits.
template <class Op, class A>
__device__ __forceinline__ A group_reduce(A v, int G, A* smem) {
  for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, __shfl_down_sync(0xffffffffu, v, o));
  if (G == 32) return __shfl_sync(0xffffffffu, v, 0);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int nw = static_cast<int>(blockDim.x) / 32;
  __syncthreads();  // the previous reduction's readers are done with smem
  if ((threadIdx.x & 31) == 0) smem[warp] = v;
  __syncthreads();
  A r = smem[0];
  for (int w = 1; w < nw; ++w) r = Op::combine(r, smem[w]);
  return r;
}

template <int V, bool Vec, class RR, class Ctx, std::size_t R>
__device__ __forceinline__ void device_reduce_slot(const RR& red, const index_t* lead, Ctx& ctx, int lane, int G,
                                                   typename RR::acc* smem) {
  using A = typename RR::acc;
  using Op = typename RR::op;
  A acc = Op::template identity<A>();
  index_t idx[R];
  for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
  index_t c = lane;
  if constexpr (Vec) {
    const index_t full = red.cols / V * V;
#pragma unroll 1
    for (index_t c0 = static_cast<index_t>(lane) * V; c0 < full; c0 += static_cast<index_t>(G) * V) {
      typename decltype(red.arg)::template regs<V> r;
      red.arg.template row_load<V>(lead, c0, r);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = Op::combine(acc, static_cast<A>(red.arg.template elem<V>(r, j, ctx)));
    }
    c = full + lane;
  }
#pragma unroll 1
  for (; c < red.cols; c += G) {
    idx[R - 1] = c;
    acc = Op::combine(acc, static_cast<A>(red.arg.at(idx, ctx)));
  }
  ctx.v[RR::slot] = static_cast<std::remove_cvref_t<decltype(ctx.v[0])>>(Op::finalize(group_reduce<Op>(acc, G, smem), red.cols));
}

template <int V, bool Vec, class A, class B, class Ctx, std::size_t R, std::size_t S>
__device__ __forceinline__ void device_reduce_one(const B& b, const index_t* lead, Ctx& ctx, int lane, int G,
                                                  A* smem, std::uint64_t reuse) {
  constexpr std::size_t t = first_same_slot<B, S>();
  if constexpr (t != S) {
    if ((reuse >> S) & 1) {
      ctx.v[S] = ctx.v[t];
      return;
    }
  }
  with_slot<S>(b, [&](const auto& red) {
    using RR = std::remove_cvref_t<decltype(red)>;
    device_reduce_slot<V, Vec, RR, Ctx, R>(red, lead, ctx, lane, G, reinterpret_cast<typename RR::acc*>(smem));
  });
}

template <int V, bool Vec, class A, class B, class Ctx, std::size_t R, std::size_t... S>
__device__ __forceinline__ void device_reduce_all(const B& b, const index_t* lead, Ctx& ctx, int lane, int G,
                                                  A* smem, std::uint64_t reuse, std::index_sequence<S...>) {
  (device_reduce_one<V, Vec, A, B, Ctx, R, S>(b, lead, ctx, lane, G, smem, reuse), ...);
}

#endif

// ---------------------------------------------------------------------------
// Row cache. A row kernel makes one pass over each row per reduction and one
// for the output. Every distinct input row that two or more of those passes
// read is copied once into on-chip memory (shared memory on the device, a
// per-thread buffer on the host) and the passes read it there, so device
// memory is read once per element. The tree is not compiled twice: its
// leaves are rebased onto the cached row (a pointer into the cache, leading
// strides 0, last stride 1), so the same code reads either memory.

// Number of leaf occurrences in a bound tree.
template <class B>
inline constexpr std::size_t leaf_count = tree_sum_v<B, is_bound_leaf>;

// Visits every leaf of a bound tree in one fixed (pre-order) order as
// f(leaf, k, len, pass): k numbers the occurrences, len is the length of the
// rows the leaf is read along (`cols` at the top, a reduction's own inside
// it) and pass the slot of the innermost enclosing reduction (-1: the output
// pass).
struct row_read {
  index_t len;
  int pass;
};
template <class F>
struct row_leaf_step {
  F& f;
  int& k;
  template <class N>
  LOOM_HD row_read operator()(N& n, const row_read& at) const {
    if constexpr (is_bound_leaf<std::remove_cv_t<N>>::value) f(n, k++, at.len, at.pass);
    if constexpr (is_bound_row_reduce<std::remove_cv_t<N>>::value)
      return row_read{n.cols, static_cast<int>(N::slot)};
    else
      return at;
  }
};
template <class B, class F>
LOOM_HD void visit_row_leaves(B& b, index_t cols, F&& f) {
  int k = 0;
  visit_down(b, row_read{cols, -1}, row_leaf_step<std::remove_reference_t<F>>{f, k});
}

// Whether the vector form (V columns per step) can serve a bound tree over
// rows of `cols` columns: every leaf read along rows of V columns or more
// must allow row_load (bound_leaf::row_vector_ok). A leaf read only along
// shorter rows is never loaded as a vector (a pass's vector steps cover
// cols / V * V columns): such as the per-row operands of an [N, 1] output's
// own pass, whose alignment does not matter.
template <int V, class B>
bool rows_vector_ok(const B& b, index_t cols) {
  bool ok = true;
  visit_row_leaves(b, cols, [&](const auto& leaf, int, index_t len, int) {
    if (len >= V && !leaf.row_vector_ok()) ok = false;
  });
  return ok;
}

// Which leaf occurrences read a cached row, where it lies in the cache of
// one group of threads, and the distinct rows to copy in (as bytes).
template <std::size_t L, std::size_t R>
struct row_cache_plan {
  static constexpr std::size_t n = L > 0 ? L : 1;
  bool on = false;
  int rows = 0;                     // distinct rows cached
  std::uint32_t group_bytes = 0;    // cache bytes per group of threads (one output row)
  std::uint32_t off[n] = {};        // per leaf occurrence: byte offset of its cached row
  std::uint8_t cached[n] = {};      // per leaf occurrence: reads the cache
  const unsigned char* src[n] = {}; // per distinct row: base pointer of the leaf
  index_t lead_bytes[n][R > 1 ? R - 1 : 1] = {};  // per distinct row: leading strides in bytes
  index_t bytes[n] = {};            // per distinct row: bytes of one row
  std::uint32_t to[n] = {};         // per distinct row: byte offset in the cache
};

template <class T>
struct type_key {
  static constexpr char id = 0;
};

// The cache budget per thread block (per row on the host), in bytes, from
// the value of LOOM_ROW_CACHE_BYTES: unset or empty gives 96 KiB (two blocks
// per SM on sm_90), 0 turns the cache off, anything but a number throws.
inline std::size_t parse_row_cache_bytes(const char* e) {
  if (e == nullptr || *e == '\0') return std::size_t{96} << 10;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(e, &end, 10);
  if (end == e || *end != '\0' || *e == '-')
    throw value_error(std::string("loom: LOOM_ROW_CACHE_BYTES must be a number of bytes, got '") + e + "'");
  return static_cast<std::size_t>(v);
}

// The cache budget in use: read from the environment once; tests may set it.
inline std::size_t& row_cache_budget() {
  static std::size_t bytes = parse_row_cache_bytes(std::getenv("LOOM_ROW_CACHE_BYTES"));
  return bytes;
}

// Plans the cache for a bound tree over output rows of rank R: a leaf's row
// is cached when it is contiguous along the row (last stride 1), is not the
// same row for every row of a multi-row output, and is read by two or more
// passes that run (a reduction skipped as a duplicate reads nothing). Leaves
// of one type over the same pointer, strides and row length share one cached
// row. The plan is off when nothing qualifies or `groups` rows exceed
// `budget` bytes.
template <std::size_t R, class B>
row_cache_plan<leaf_count<B>, R> plan_row_cache(const B& b, index_t cols, index_t rows, std::uint64_t reuse,
                                                       std::size_t groups, std::size_t budget) {
  constexpr std::size_t L = leaf_count<B>;
  row_cache_plan<L, R> plan;
  struct row_key {
    const void* type;
    const unsigned char* p;
    std::vector<index_t> st;
    index_t len;
    std::size_t elem;
    std::uint64_t passes;
    bool out;
  };
  std::vector<row_key> keys;
  int which[L > 0 ? L : 1];
  auto f = [&](const auto& leaf, int kk, index_t len, int pass) {
    using T = std::remove_cvref_t<decltype(*leaf.p)>;
    static_assert(std::tuple_size_v<std::remove_cvref_t<decltype(leaf.st)>> == R);
    which[kk] = -1;
    bool per_row = rows <= 1;
    for (std::size_t d = 0; d + 1 < R; ++d) per_row = per_row || leaf.st[d] != 0;
    if (leaf.st[R - 1] != 1 || !per_row || len <= 0) return;
    const auto* p = reinterpret_cast<const unsigned char*>(leaf.p);
    const std::vector<index_t> st(leaf.st.begin(), leaf.st.end());
    std::size_t i = 0;
    while (i < keys.size() &&
           !(keys[i].type == &type_key<T>::id && keys[i].p == p && keys[i].st == st && keys[i].len == len))
      ++i;
    if (i == keys.size()) keys.push_back({&type_key<T>::id, p, st, len, sizeof(T), 0, false});
    if (pass < 0)
      keys[i].out = true;
    else if (!((reuse >> pass) & 1))
      keys[i].passes |= std::uint64_t{1} << pass;
    which[kk] = static_cast<int>(i);
  };
  visit_row_leaves(b, cols, f);
  std::vector<int> slot(keys.size(), -1);
  std::size_t total = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (std::popcount(keys[i].passes) + (keys[i].out ? 1 : 0) < 2) continue;
    const auto j = static_cast<std::size_t>(plan.rows++);
    slot[i] = static_cast<int>(j);
    plan.src[j] = keys[i].p;
    for (std::size_t d = 0; d + 1 < R; ++d) plan.lead_bytes[j][d] = keys[i].st[d] * static_cast<index_t>(keys[i].elem);
    plan.bytes[j] = keys[i].len * static_cast<index_t>(keys[i].elem);
    plan.to[j] = static_cast<std::uint32_t>(total);
    total += (static_cast<std::size_t>(plan.bytes[j]) + 15) / 16 * 16;
    if (total > budget) break;
  }
  if (total == 0 || total > budget / (groups > 0 ? groups : 1) || total > std::numeric_limits<std::uint32_t>::max())
    return row_cache_plan<L, R>{};
  plan.on = true;
  plan.group_bytes = static_cast<std::uint32_t>(total);
  for (std::size_t kk = 0; kk < L; ++kk) {
    if (which[kk] < 0 || slot[static_cast<std::size_t>(which[kk])] < 0) continue;
    plan.cached[kk] = 1;
    plan.off[kk] = plan.to[static_cast<std::size_t>(slot[static_cast<std::size_t>(which[kk])])];
  }
  return plan;
}

// Points the cached leaves of `bc` at their rows in `cache` for the output
// row `lead`. Only the pointer changes (strides stay): it is moved so that
// the leaf's offset of column 0 in this row lands on the cached row.
template <class B, std::size_t L, std::size_t R>
LOOM_HD void rebase_leaves(B& bc, const row_cache_plan<L, R>& plan, const index_t* lead, unsigned char* cache) {
  auto f = [&](auto& leaf, int kk, index_t, int) {
    using T = std::remove_cvref_t<decltype(*leaf.p)>;
    if (!plan.cached[kk]) return;
    index_t off = 0;
    for (std::size_t d = 0; d + 1 < R; ++d) off += lead[d] * leaf.st[d];
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(cache + plan.off[kk]);
    leaf.p = reinterpret_cast<const T*>(at - static_cast<std::uintptr_t>(off) * sizeof(T));
  };
  visit_row_leaves(bc, 0, f);
}

// Host executor: copies the planned rows of `lead` into `cache`.
template <std::size_t L, std::size_t R>
void host_fill_cache(const row_cache_plan<L, R>& plan, const index_t* lead, unsigned char* cache) {
  for (int j = 0; j < plan.rows; ++j) {
    index_t off = 0;
    for (std::size_t d = 0; d + 1 < R; ++d) off += lead[d] * plan.lead_bytes[j][d];
    std::memcpy(cache + plan.to[j], plan.src[j] + off, static_cast<std::size_t>(plan.bytes[j]));
  }
}

// Host executor, one row: copies the planned rows of `lead` into this
// thread's buffer and rebases `bc` onto them, then computes every reduction
// slot in order into ctx.
template <class B, class Ctx, std::size_t L, std::size_t R>
void host_row_reductions(B& bc, const row_cache_plan<L, R>& plan, const index_t* lead, Ctx& ctx, std::uint64_t reuse) {
  if (plan.on) {
    thread_local std::vector<std::max_align_t> cache;
    cache.resize((plan.group_bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
    auto* bytes = reinterpret_cast<unsigned char*>(cache.data());
    host_fill_cache(plan, lead, bytes);
    rebase_leaves(bc, plan, lead, bytes);
  }
  host_reduce_all<B, Ctx, R>(bc, lead, ctx, reuse, std::make_index_sequence<slots_of<B>>{});
}

// Host executor, one whole row: its reductions, then one(bc, idx, lead, c,
// ctx) for each column c, bc being the tree rebased onto the cached rows.
template <class A, class B, std::size_t L, std::size_t R, class One>
void host_row(const B& b, const row_cache_plan<L, R>& plan, const row_layout<R>& lay, index_t row, std::uint64_t reuse,
              One&& one) {
  index_t lead[R > 1 ? R - 1 : 1];
  lay.lead_of(row, lead);
  B bc = b;
  row_ctx<slots_of<B>, A> ctx;
  host_row_reductions(bc, plan, lead, ctx, reuse);
  index_t idx[R];
  for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
  for (index_t c = 0; c < lay.cols; ++c) {
    idx[R - 1] = c;
    one(bc, idx, lead, c, ctx);
  }
}

#if LOOM_CUDA_COMPILER
// Copies `bytes` bytes with G threads in units of U (four in flight per
// thread), then the remaining bytes one by one.
template <class U>
__device__ __forceinline__ void device_copy_bytes(const unsigned char* src, unsigned char* dst, index_t bytes, int lane,
                                                  int G) {
  const index_t units = bytes / static_cast<index_t>(sizeof(U));
  const U* s = reinterpret_cast<const U*>(src);
  U* d = reinterpret_cast<U*>(dst);
  constexpr int N = 4;
  index_t i = lane;
#pragma unroll 1
  for (; i + (N - 1) * G < units; i += N * G) {
    U t[N];
#pragma unroll
    for (int u = 0; u < N; ++u) t[u] = s[i + u * G];
#pragma unroll
    for (int u = 0; u < N; ++u) d[i + u * G] = t[u];
  }
#pragma unroll 1
  for (; i < units; i += G) d[i] = s[i];
#pragma unroll 1
  for (index_t b = units * static_cast<index_t>(sizeof(U)) + lane; b < bytes; b += G) dst[b] = src[b];
}

// Copies the planned rows of `lead` into the group's cache, G threads at a
// time, in the widest unit the row's alignment allows.
template <std::size_t L, std::size_t R>
__device__ __forceinline__ void device_fill_cache(const row_cache_plan<L, R>& plan, const index_t* lead,
                                                  unsigned char* cache, int lane, int G) {
#pragma unroll 1
  for (int j = 0; j < plan.rows; ++j) {
    index_t off = 0;
    for (std::size_t d = 0; d + 1 < R; ++d) off += lead[d] * plan.lead_bytes[j][d];
    const unsigned char* src = plan.src[j] + off;
    unsigned char* dst = cache + plan.to[j];
    const auto a = reinterpret_cast<std::uintptr_t>(src);
    if (a % 16 == 0)
      device_copy_bytes<uint4>(src, dst, plan.bytes[j], lane, G);
    else if (a % 4 == 0)
      device_copy_bytes<unsigned>(src, dst, plan.bytes[j], lane, G);
    else
      device_copy_bytes<unsigned char>(src, dst, plan.bytes[j], lane, G);
  }
}

__device__ __forceinline__ void group_sync(int G) {
  if (G == 32)
    __syncwarp();
  else
    __syncthreads();
}

// One row, device: the planned rows of `lead` into the group's cache and
// `bc` rebased onto them, then every reduction slot in order into ctx.
template <int V, bool Vec, class A, std::size_t R, class B, class Ctx, std::size_t L>
__device__ __forceinline__ void device_row_reductions(B& bc, const row_cache_plan<L, R>& plan, const index_t* lead,
                                                      unsigned char* cache, Ctx& ctx, int lane, int G, A* smem,
                                                      std::uint64_t reuse) {
  if (plan.on) {
    device_fill_cache(plan, lead, cache, lane, G);
    rebase_leaves(bc, plan, lead, cache);
    group_sync(G);
  }
  device_reduce_all<V, Vec, A, B, Ctx, R>(bc, lead, ctx, lane, G, smem, reuse, std::make_index_sequence<slots_of<B>>{});
}

// The output pass of one row of `cols` columns: vec(c0) for V columns at a
// time (the vector form), then one(idx, c) for the rest.
template <int V, bool Vec, std::size_t R, class Vector, class One>
__device__ __forceinline__ void device_row_output(const index_t* lead, index_t cols, int lane, int G, Vector&& vec,
                                                  One&& one) {
  index_t c = lane;
  if constexpr (Vec) {
    const index_t full = cols / V * V;
#pragma unroll 1
    for (index_t c0 = static_cast<index_t>(lane) * V; c0 < full; c0 += static_cast<index_t>(G) * V) vec(c0);
    c = full + lane;
  }
  index_t idx[R];
  for (std::size_t d = 0; d + 1 < R; ++d) idx[d] = lead[d];
#pragma unroll 1
  for (; c < cols; c += G) {
    idx[R - 1] = c;
    one(idx, c);
  }
}

// One group of G threads per row (G = 32: a warp per row; G = blockDim: a
// block per row): the planned rows into the group's part of the shared
// cache, every reduction slot in order, then the output pass. Four blocks
// per SM in the launch bounds: with the maximum thread count alone, ptxas
// held the registers of the softmax kernel at 40-48 and spilled.
template <int V, bool Vec, class A, std::size_t R, class Sink, class B, std::size_t L>
__global__ void __launch_bounds__(256, 4)
    row_kernel(Sink sink, B b, row_layout<R> lay, int G, std::uint64_t reuse,
               __grid_constant__ const row_cache_plan<L, R> plan) {
  __shared__ A smem[32];
  extern __shared__ __align__(16) unsigned char row_cache_smem[];
  unsigned char* cache = row_cache_smem + static_cast<std::size_t>(threadIdx.x / G) * plan.group_bytes;
  const int lane = static_cast<int>(threadIdx.x) % G;
  const index_t groups_per_block = blockDim.x / G;
  const index_t group = static_cast<index_t>(blockIdx.x) * groups_per_block + threadIdx.x / G;
  const index_t step = static_cast<index_t>(gridDim.x) * groups_per_block;
#pragma unroll 1
  for (index_t row = group; row < lay.rows; row += step) {
    index_t lead[R > 1 ? R - 1 : 1];
    lay.lead_of(row, lead);
    B bc = b;
    row_ctx<slots_of<B>, A> ctx;
    device_row_reductions<V, Vec>(bc, plan, lead, cache, ctx, lane, G, smem, reuse);
    device_row_output<V, Vec, R>(
        lead, lay.cols, lane, G, [&](index_t c0) { sink.template vec<V>(bc, lead, c0, ctx); },
        [&](const index_t* idx, index_t c) { sink.one(bc, idx, lead, c, ctx); });
    if (plan.on) group_sync(G);  // the next row's copy overwrites the cache
  }
}

// Raises `kernel`'s dynamic shared memory limit on the current device (where
// cudaFuncSetAttribute sets it) to all a row kernel's block may ask for
// there (smem_per_block), once per kernel and device. The limit belongs to
// the kernel, not to a launch: raising it to each launch's own need, as
// before 2026-12-02, let another host thread that launches the same kernel
// with a smaller need in between lower it under this launch.
inline std::size_t smem_per_block(int device);
inline void allow_row_smem(const void* kernel) {
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex m;
  static std::set<std::pair<const void*, int>> raised;
  const std::lock_guard<std::mutex> lock(m);
  if (raised.count({kernel, device}) != 0) return;
  LOOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem_per_block(device))));
  raised.insert({kernel, device});
}

// Whether `smem` bytes of dynamic shared memory need a row kernel's limit
// raised: without it, static and dynamic shared memory together must fit
// 48 KiB, and the kernels keep up to 1 KiB static (see smem_per_block).
inline bool row_smem_needs_raise(std::size_t smem) { return smem + 1024 > (std::size_t{48} << 10); }

// Launches a row kernel with `smem` bytes of dynamic shared memory (raising
// the kernel's limit first when row_smem_needs_raise: allow_row_smem),
// checks the launch and counts it.
template <class... P, class... Args>
void launch_row_kernel(void (*kernel)(P...), unsigned grid, unsigned block, std::size_t smem, cudaStream_t s,
                       const Args&... args) {
  if (row_smem_needs_raise(smem)) allow_row_smem(reinterpret_cast<const void*>(kernel));
  launch_kernel(kernel, grid, block, smem, s, args...);
}

// What one block of a row kernel may ask for as dynamic shared memory on
// `device` (the opt-in limit less 1 KiB for the kernels' static shared
// memory), cached per thread.
inline std::size_t smem_per_block(int device) {
  static thread_local int cached_device = -1;
  static thread_local std::size_t cached = 0;
  if (device != cached_device) {
    int optin = 0;
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cached = optin > 1024 ? static_cast<std::size_t>(optin) - 1024 : 0;
    cached_device = device;
  }
  return cached;
}
#endif

// Elements per vector step of a row kernel: 16 bytes of the smallest type
// among the leaves and the output (element size OutSize), so every vector
// access covers whole 16-byte units of every type.
template <class B, std::size_t OutSize>
constexpr int row_vector_width() {
  return 16 / static_cast<int>(std::min<std::size_t>(tree_min_v<B, leaf_size>, OutSize));
}

// Runs the rows path for a bound tree and a sink over the output layout.
template <class S, class Sink, class B, std::size_t RO>
eval_info run_rows(const Sink& sink, const B& b, const row_layout<RO>& lay, bool sink_vector_ok) {
  using A = std::conditional_t<uses_double<B>, double, float>;
  eval_info info;
  info.path = eval_path::rows;
  info.on_device = std::is_same_v<S, device>;
  const std::uint64_t reuse = reuse_mask(b, std::make_index_sequence<slots_of<B>>{});
  info.row_passes = static_cast<int>(slots_of<B>) - std::popcount(reuse);
  if constexpr (std::is_same_v<S, host>) {
    (void)sink_vector_ok;
    info.threads_per_row = 1;
    const auto plan = plan_row_cache<RO>(b, lay.cols, lay.rows, reuse, 1, row_cache_budget());
    info.cached_rows = plan.rows;
    host_for_each(lay.rows, [&](index_t row) {
      host_row<A>(b, plan, lay, row, reuse, [&](const B& bc, const index_t* idx, const index_t* lead, index_t c,
                                                const row_ctx<slots_of<B>, A>& ctx) { sink.one(bc, idx, lead, c, ctx); });
    }, lay.cols * static_cast<index_t>(slots_of<B> + 1));
  } else {
#if LOOM_CUDA_COMPILER
    constexpr int V = row_vector_width<B, Sink::smallest>();
    const index_t longest = longest_row(b, lay.cols, std::make_index_sequence<slots_of<B>>{});
    // A warp per row for short rows, a block of 256 per row for long ones.
    const int G = longest <= 2048 ? 32 : 256;
    const stream_ref s = current_stream();
    const index_t groups = 256 / G;
    const std::size_t budget = std::min(row_cache_budget(), smem_per_block(s.device()));
    const auto plan = plan_row_cache<RO>(b, lay.cols, lay.rows, reuse, static_cast<std::size_t>(groups), budget);
    const std::size_t smem = plan.on ? static_cast<std::size_t>(groups) * plan.group_bytes : 0;
    // Whether the cache is on never changes the vector form (it would change
    // each lane's order of summation, hence the bits of the results).
    const bool vec = sink_vector_ok && rows_vector_ok<V>(b, lay.cols);
    const index_t want = (lay.rows + groups - 1) / groups;
    const unsigned grid = grid_size(want, G == 32 ? 8 : 4, s.device());
    info.threads_per_row = G;
    info.vector_width = vec ? V : 1;
    info.cached_rows = plan.rows;
    if (lay.rows > 0) {
      auto kernel = vec ? row_kernel<V, true, A, RO, Sink, B, leaf_count<B>>
                        : row_kernel<V, false, A, RO, Sink, B, leaf_count<B>>;
      launch_row_kernel(kernel, grid, 256, smem, s.get(), sink, b, lay, G, reuse, plan);
    }
#else
    (void)sink;
    (void)sink_vector_ok;
#endif
  }
  return info;
}

template <std::size_t RO, class O, class S>
row_layout<RO> layout_of(const view<O, RO, S>& out) {
  row_layout<RO> lay;
  lay.cols = out.extent(RO - 1);
  lay.rows = lay.cols ? out.size() / lay.cols : 0;
  for (std::size_t d = 0; d + 1 < RO; ++d) lay.div[d] = fast_divmod(static_cast<std::uint64_t>(out.extent(d)));
  return lay;
}

template <class O, std::size_t RO, class S>
bool sink_vector_ok(const view<O, RO, S>& v) {
  if constexpr (std::is_same_v<S, device>)
    return row_out_vector_ok(v);
  else
    return false;
}

template <class O, std::size_t RO, class S, class N>
eval_info row_assign_impl(const view<O, RO, S>& out, const N& e) {
  static_assert(RO >= 1, "loom: row reductions need an output of rank 1 or more");
  bind_info bi;
  const auto b = binder::bind<0>(e, out, bi);
  const row_sink1<O, RO> sink{{out.data(), out.strides()}};
  return run_rows<S>(sink, b, layout_of(out), sink_vector_ok(out));
}
}  // namespace detail
}  // namespace loom

namespace loom {
namespace fn {
//! The first of its arguments: the root of a two-output row assignment.
struct first_of {
  template <class T>
  LOOM_HD T operator()(T a, T) const {
    return a;
  }
};
}  // namespace fn

//! Evaluates two expressions into two outputs of one shape in ONE kernel:
//! row reductions are computed once per row for both, and each element of
//! both outputs is computed before either is stored. For example a residual
//! add that also writes its sum: `assign_pair(h, x + r, y, rms_norm(x + r, w))`.
//! The outputs must not overlap each other; an output may be an input under
//! the same index map.
template <tensor_like O1, operand E1, tensor_like O2, operand E2>
eval_info assign_pair(O1&& out1, const E1& e1, O2&& out2, const E2& e2) {
  const auto v1 = detail::as_view(out1);
  const auto v2 = detail::as_view(out2);
  using V1 = decltype(v1);
  using V2 = decltype(v2);
  using S = typename V1::space;
  constexpr std::size_t RO = V1::rank;
  static_assert(std::is_same_v<S, typename V2::space> && RO == V2::rank,
                "loom: assign_pair needs two outputs of the same rank in the same memory space");
  static_assert(RO >= 1, "loom: assign_pair needs outputs of rank 1 or more");
  static_assert(!std::is_const_v<typename V1::element_type> && !std::is_const_v<typename V2::element_type>,
                "loom: cannot assign to a view of const elements");
  detail::require_cuda_compiler_for<S>();
  using N1 = detail::node_t<E1>;
  using N2 = detail::node_t<E2>;
  static_assert((std::is_void_v<typename N1::space> || std::is_same_v<typename N1::space, S>) &&
                    (std::is_void_v<typename N2::space> || std::is_same_v<typename N2::space, S>),
                "loom: an expression lives in another memory space than the outputs; copy it with loom::to_device(x) "
                "or loom::to_host(x)");
  if (v1.extents() != v2.extents())
    throw shape_error("loom: assign_pair needs outputs of one shape, got " + shape_string(v1.extents()) + " and " +
                      shape_string(v2.extents()));
  if (may_overlap(v1, v2)) throw aliasing_error("loom: the two outputs of assign_pair overlap");
  const map_node<fn::first_of, N1, N2> both(fn::first_of{}, detail::as_node(e1), detail::as_node(e2));
  detail::check_assignable(v1, detail::get<0>(both.children));
  detail::check_assignable(v2, detail::get<1>(both.children));
  if constexpr (std::is_same_v<S, device>) detail::check_devices(both, v1, v2);
  eval_info info;
  info.on_device = std::is_same_v<S, device>;
  if (v1.size() == 0) return detail::last_eval_slot() = info;
  // Binding against the first output checks every input against it; the
  // second output is checked here.
  detail::for_each_leaf(both, [&](const auto& leaf) {
    if (!may_overlap(leaf.v, v2)) return;
    bool same = false;
    try {
      same = detail::same_index_map(leaf.v.broadcast_to(v2.extents()), v2);
    } catch (const shape_error&) {
    }
    if (!same)
      throw aliasing_error("loom: the second output of assign_pair (shape " + shape_string(v2.extents()) +
                           ") overlaps an input under a different index map; evaluate into a new tensor first");
  });
  detail::bind_info bi;
  const auto b = detail::binder::bind<0>(both, v1, bi);
  const detail::row_sink2<typename V1::value_type, typename V2::value_type, RO> sink{{v1.data(), v1.strides()},
                                                                                    {v2.data(), v2.strides()}};
  return detail::last_eval_slot() =
             detail::run_rows<S>(sink, b, detail::layout_of(v1), detail::sink_vector_ok(v1) && detail::sink_vector_ok(v2));
}
}  // namespace loom
