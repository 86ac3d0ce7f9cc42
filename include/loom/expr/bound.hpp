// SPDX-License-Identifier: Apache-2.0
#pragma once

// The bound (kernel-side) tree and the binder. Binding turns an expression
// node tree into what enters a kernel: leaves become a pointer plus strides
// already broadcast to the output's rank, row reductions get their slots,
// and aliasing between the output and the inputs is checked.

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail {

template <class T, int vector_width>
struct alignas(16) vec_regs {
  T v[vector_width];
};

template <class T, int vector_width>
LOOM_HD void vec_load(const T* p, vec_regs<T, vector_width>& r) {
  static_assert(sizeof(T) * vector_width % 16 == 0,
                "loom: internal error: a vector load must cover whole 16-byte units");
#if LOOM_DEVICE_CODE
  static_assert(sizeof(r) % 16 == 0);
  constexpr int k = static_cast<int>(sizeof(r) / 16);
  const uint4* src = reinterpret_cast<const uint4*>(p);
  uint4* dst = reinterpret_cast<uint4*>(&r);
#pragma unroll
  for (int i = 0; i < k; ++i) dst[i] = src[i];
#else
  std::memcpy(static_cast<void*>(&r), static_cast<const void*>(p), sizeof(r));
#endif
}

template <class T, int vector_width>
LOOM_HD void vec_store(T* p, const vec_regs<T, vector_width>& r) {
  static_assert(sizeof(T) * vector_width % 16 == 0,
                "loom: internal error: a vector store must cover whole 16-byte units");
#if LOOM_DEVICE_CODE
  constexpr int k = static_cast<int>(sizeof(r) / 16);
  uint4* dst = reinterpret_cast<uint4*>(p);
  const uint4* src = reinterpret_cast<const uint4*>(&r);
  // The store intrinsic is one 16-byte store whatever the compiler infers
  // of p: a plain uint4 assignment through an address computed from several
  // strides (a rank-3 row output) was split into element stores.
#pragma unroll
  for (int i = 0; i < k; ++i) __stwb(dst + i, src[i]);
#else
  std::memcpy(static_cast<void*>(p), static_cast<const void*>(&r), sizeof(r));
#endif
}

//! Evaluation context of a row kernel: the finished row reductions of the
//! current row; elementwise kernels pass none.
struct no_ctx {};

// Predicates over node kinds for the traversal's folds; the row nodes and
// the bound row reduction specialize them where they are defined.
namespace cap {
//! The bits per element of a leaf that reads memory (4 for a packed 4-bit
//! value read through unpack; 128, a whole vector, for every other node).
struct leaf_bits {
  template <class N>
  using fallback = std::integral_constant<std::size_t, 128>;
};
}  // namespace cap
template <class N>
using leaf_bits = capability<cap::leaf_bits, N>;
template <class T, std::size_t R, class S, class Tag>
struct capability<cap::leaf_bits, leaf_node<T, R, S, Tag>> : std::integral_constant<std::size_t, 8 * sizeof(T)> {};
//! A row reduction of the user-facing tree.
template <class N>
struct is_row_reduction : std::false_type {};
//! A row reduction of the bound tree (it owns one slot of the row context).
template <class N>
struct is_bound_row_reduce : std::false_type {};
//! The slot of a bound row reduction (the largest size_t for other nodes).
template <class N>
struct slot_number : std::integral_constant<std::size_t, ~std::size_t{0}> {};
//! A bound leaf that reads memory.
template <class N>
struct is_bound_leaf : std::false_type {};

//! Number of row-reduction slots in bound tree B.
template <class B>
inline constexpr std::size_t slots_of = tree_sum_v<B, is_bound_row_reduce>;
//! The first slot inside bound subtree B (meaningful when it has slots). Slots
//! are numbered in post-order, so a subtree's slots are [first, first +
//! slots_of): slot lookups descend into one child only.
template <class B>
inline constexpr std::size_t first_slot_of = tree_min_v<B, slot_number>;

template <class T, std::size_t R>
struct bound_leaf {
  using compute = compute_t<T>;
  template <int vector_width>
  using regs = vec_regs<T, vector_width>;
  static constexpr std::size_t slots = 0;
  const T* p;
  shape<R> st;
  // A periodic leaf (broadcast along leading axes over a dense suffix of
  // `period.d` elements) holds output element i at i % period.d.
  fast_divmod period{};
  bool periodic = false;

  // allow_periodic (the periodic-leaf branch is compiled in): only the
  // elementwise contiguous path passes true.
  // Reductions and scans read dense operands only, and keeping the branch
  // and the division out of their kernels halves their device compile time.
  template <bool allow_periodic = false>
  LOOM_HD index_t linear_offset(index_t i) const {
    if constexpr (allow_periodic) {
      if (periodic) {
        const auto u = static_cast<std::uint64_t>(i);
        return static_cast<index_t>(u - period.div(u) * period.d);
      }
    }
    return i;
  }
  template <bool allow_periodic = false>
  LOOM_HD compute at_linear(index_t i) const {
    return convert<compute>(p[linear_offset<allow_periodic>(i)]);
  }
  template <class Ctx = no_ctx>
  LOOM_HD compute at(const index_t* idx, const Ctx& = {}) const {
    index_t off = 0;
    for (std::size_t d = R; d-- > 0;) off += idx[d] * st[d];
    return convert<compute>(p[off]);
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t i0, regs<vector_width>& r) const {
    vec_load<T, vector_width>(p + linear_offset<allow_periodic>(i0), r);
  }
  //! Loads columns [c0, c0 + vector_width) of the row whose leading coordinates are
  //! `lead`: one 16-byte load when the last stride is 1; a repeated value
  //! when it is 0 (an input broadcast along the row).
  template <int vector_width>
  LOOM_HD LOOM_HOST_INLINE void row_load(const index_t* lead, index_t c0, regs<vector_width>& r) const {
    index_t off = 0;
    for (std::size_t d = R - 1; d-- > 0;) off += lead[d] * st[d];
    if (st[R - 1] == 0) {
      const T v = p[off];
      LOOM_UNROLL
      for (int j = 0; j < vector_width; ++j) r.v[j] = v;
    } else {
      vec_load<T, vector_width>(p + off + c0, r);
    }
  }
  //! True when row_load can serve this leaf for the given row layout (the
  //! rows executor asks it of each leaf read along rows of vector_width columns or
  //! more, rows_vector_ok): last stride 0 (one element read and repeated,
  //! any alignment: a per-row target [N, 1] broadcast along the row), or
  //! last stride 1 with every row start 16-byte aligned.
  bool row_vector_ok() const {
    if (st[R - 1] == 0) return true;
    if (st[R - 1] != 1) return false;
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
    for (std::size_t d = 0; d + 1 < R; ++d)
      if ((st[d] * static_cast<index_t>(sizeof(T))) % 16 != 0) return false;
    return true;
  }
  template <int vector_width, class Ctx = no_ctx>
  LOOM_HD compute elem(const regs<vector_width>& r, int j, const Ctx& = {}) const {
    return convert<compute>(r.v[j]);
  }
  //! Same data under the same index map (so the values are the same).
  bool same_as(const bound_leaf& o) const { return p == o.p && st == o.st; }
};
template <class T, std::size_t R>
struct children_of<bound_leaf<T, R>> : no_children<bound_leaf<T, R>> {};
template <class T, std::size_t R>
struct capability<cap::leaf_bits, bound_leaf<T, R>> : std::integral_constant<std::size_t, 8 * sizeof(T)> {};
template <class T, std::size_t R>
struct is_bound_leaf<bound_leaf<T, R>> : std::true_type {};

template <class C>
struct bound_scalar {
  using compute = C;
  template <int vector_width>
  struct regs {};
  static constexpr std::size_t slots = 0;
  C value;

  template <bool allow_periodic = false>
  LOOM_HD C at_linear(index_t) const {
    return value;
  }
  template <class Ctx = no_ctx>
  LOOM_HD C at(const index_t*, const Ctx& = {}) const {
    return value;
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t, regs<vector_width>&) const {}
  template <int vector_width>
  LOOM_HD LOOM_HOST_INLINE void row_load(const index_t*, index_t, regs<vector_width>&) const {}
  template <int vector_width, class Ctx = no_ctx>
  LOOM_HD C elem(const regs<vector_width>&, int, const Ctx& = {}) const {
    return value;
  }
  bool same_as(const bound_scalar& o) const { return std::memcmp(&value, &o.value, sizeof(C)) == 0; }
};
template <class C>
struct children_of<bound_scalar<C>> : no_children<bound_scalar<C>> {};

template <class F, class Cin, class... B>
struct bound_map {
  using compute = std::remove_cvref_t<decltype(std::declval<const F&>()(std::declval<repeat_t<B, Cin>>()...))>;
  template <int vector_width>
  struct regs {
    tuple<typename B::template regs<vector_width>...> c;
  };
  static constexpr std::size_t slots = (std::size_t{0} + ... + slots_of<B>);
  F f;
  tuple<B...> ch;

  template <bool allow_periodic = false>
  LOOM_HD LOOM_HOST_INLINE compute at_linear(index_t i) const {
    return linear_impl<allow_periodic>(i, std::index_sequence_for<B...>{});
  }
  template <class Ctx = no_ctx>
  LOOM_HD LOOM_HOST_INLINE compute at(const index_t* idx, const Ctx& ctx = {}) const {
    return at_impl(idx, ctx, std::index_sequence_for<B...>{});
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t i0, regs<vector_width>& r) const {
    load_impl<vector_width, allow_periodic>(i0, r, std::index_sequence_for<B...>{});
  }
  template <int vector_width>
  LOOM_HD LOOM_HOST_INLINE void row_load(const index_t* lead, index_t c0, regs<vector_width>& r) const {
    row_load_impl<vector_width>(lead, c0, r, std::index_sequence_for<B...>{});
  }
  template <int vector_width, class Ctx = no_ctx>
  LOOM_HD LOOM_HOST_INLINE compute elem(const regs<vector_width>& r, int j, const Ctx& ctx = {}) const {
    return elem_impl<vector_width>(r, j, ctx, std::index_sequence_for<B...>{});
  }
  //! Same functor state and the same children: the same values.
  template <class... B2>
  bool same_as(const bound_map<F, Cin, B2...>& o) const {
    if constexpr (!std::is_empty_v<F>)
      if (std::memcmp(&f, &o.f, sizeof(F)) != 0) return false;
    return same_impl(o, std::index_sequence_for<B...>{});
  }

 private:
  template <bool allow_periodic, std::size_t... I>
  LOOM_HD LOOM_HOST_INLINE compute linear_impl(index_t i, std::index_sequence<I...>) const {
    return f(static_cast<Cin>(detail::get<I>(ch).template at_linear<allow_periodic>(i))...);
  }
  template <class Ctx, std::size_t... I>
  LOOM_HD LOOM_HOST_INLINE compute at_impl(const index_t* idx, const Ctx& ctx, std::index_sequence<I...>) const {
    return f(static_cast<Cin>(detail::get<I>(ch).at(idx, ctx))...);
  }
  template <int vector_width, bool allow_periodic, std::size_t... I>
  LOOM_HD void load_impl(index_t i0, regs<vector_width>& r, std::index_sequence<I...>) const {
    (detail::get<I>(ch).template load<vector_width, allow_periodic>(i0, detail::get<I>(r.c)), ...);
  }
  template <int vector_width, std::size_t... I>
  LOOM_HD LOOM_HOST_INLINE void row_load_impl(const index_t* lead, index_t c0, regs<vector_width>& r,
                                              std::index_sequence<I...>) const {
    (detail::get<I>(ch).template row_load<vector_width>(lead, c0, detail::get<I>(r.c)), ...);
  }
  template <class M, std::size_t... I>
  bool same_impl(const M& o, std::index_sequence<I...>) const {
    return (true && ... && detail::get<I>(ch).same_as(detail::get<I>(o.ch)));
  }
  template <int vector_width, class Ctx, std::size_t... I>
  LOOM_HD LOOM_HOST_INLINE compute elem_impl(const regs<vector_width>& r, int j, const Ctx& ctx,
                                             std::index_sequence<I...>) const {
    return f(static_cast<Cin>(detail::get<I>(ch).template elem<vector_width>(detail::get<I>(r.c), j, ctx))...);
  }
};
template <class F, class Cin, class... B>
struct children_of<bound_map<F, Cin, B...>> {
  using types = type_list<B...>;
  template <std::size_t I, class M>
  LOOM_HD static auto& get(M& n) {
    return detail::get<I>(n.ch);
  }
  template <class... C>
  using rebind = bound_map<F, Cin, C...>;
  template <class... C>
  static bound_map<F, Cin, C...> rebuild(const bound_map<F, Cin, B...>& n, const C&... c) {
    return {n.f, tuple<C...>(c...)};
  }
};
//! Whether bound node kind N is a map.
template <class N>
struct is_bound_map_node : std::false_type {};
template <class F, class Cin, class... B>
struct is_bound_map_node<bound_map<F, Cin, B...>> : std::true_type {};

// The index of the child of bound node kind B whose slot range holds `slot`
// (B itself not that slot's node), its number of children if none.
template <std::size_t slot, class... C>
constexpr std::size_t slot_child_in(type_list<C...>) {
  constexpr bool holds[] = {(slots_of<C> > 0 && first_slot_of<C> <= slot && slot < first_slot_of<C> + slots_of<C>)...,
                            true};
  std::size_t k = 0;
  while (!holds[k]) ++k;
  return k;
}
template <class B, std::size_t slot>
inline constexpr std::size_t slot_child_v = slot_child_in<slot>(child_types_t<B>{});

//! The row-reduction node of slot `slot` inside bound tree b. Only the path
//! to it is entered: a lookup instantiates one function per node on that
//! path, not one per node that holds slots.
template <std::size_t slot, class B>
LOOM_HD const auto& slot_node(const B& b) {
  if constexpr (slot_number<B>::value == slot) {
    return b;
  } else {
    static_assert(slot_child_v<B, slot> < child_count_v<B>, "loom: internal error: no row reduction of this slot");
    return slot_node<slot>(child<slot_child_v<B, slot>>(b));
  }
}

//! What binding learned about the operands.
struct bind_info {
  bool contiguous = true;  // every leaf contiguous and not broadcast
  bool aligned = true;     // every leaf pointer 16-byte aligned
  bool linear = true;      // every leaf contiguous or periodic: at_linear(i) serves output element i
  index_t period_gcd = 0;  // gcd of the periods of the periodic leaves (0: none)
};

// The period of a view broadcast to an output's shape when it repeats a
// dense block: leading axes of stride 0 (or extent 1) over a dense suffix;
// output element i (row-major) is then element i % period of the block.
// 0 when the view is not of that form.
template <class T, std::size_t R, class S>
index_t broadcast_period(const view<T, R, S>& b) {
  std::size_t k = R;
  index_t expect = 1;
  while (k > 0 && (b.extent(k - 1) == 1 || b.stride(k - 1) == expect)) {
    expect *= b.extent(k - 1);
    --k;
  }
  for (std::size_t d = 0; d != k; ++d)
    if (b.extent(d) != 1 && b.stride(d) != 0) return 0;
  return expect;
}

// Records leaf `b` (already broadcast to the output's shape) in `info` and
// returns its kernel-side form.
template <class T, std::size_t R, class S>
bound_leaf<std::remove_const_t<T>, R> bind_leaf_view(const view<T, R, S>& b, bind_info& info) {
  bound_leaf<std::remove_const_t<T>, R> l{b.data(), b.strides()};
  const bool contiguous = b.is_contiguous();
  info.contiguous = info.contiguous && contiguous;
  info.aligned = info.aligned && reinterpret_cast<std::uintptr_t>(b.data()) % 16 == 0;
  if (!contiguous) {
    const index_t per = b.size() > 0 ? broadcast_period(b) : 0;
    if (per > 0) {
      l.periodic = true;
      l.period = fast_divmod(static_cast<std::uint64_t>(per));
      info.period_gcd = std::gcd(info.period_gcd, per);
    } else {
      info.linear = false;
    }
  }
  return l;
}

template <class A, class B, std::size_t R, class S>
bool same_index_map(const view<A, R, S>& a, const view<B, R, S>& b) {
  if (static_cast<const void*>(a.data()) != static_cast<const void*>(b.data()) || sizeof(A) != sizeof(B)) return false;
  for (std::size_t d = 0; d != R; ++d)
    if (a.extent(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

//! A shape to bind an expression to when nothing is written (reductions read
//! an expression without an output view).
template <std::size_t R, class S>
struct read_only_target {
  using space = S;
  shape<R> ext;
  const shape<R>& extents() const { return ext; }
};

//! Number of row-reduction nodes in a node tree (0 for purely elementwise trees).
template <class N>
struct node_slots : std::integral_constant<std::size_t, tree_sum_v<N, is_row_reduction>> {};

template <std::size_t I, class... Ch>
constexpr std::size_t slots_before() {
  constexpr std::size_t counts[] = {node_slots<Ch>::value..., 0};
  std::size_t s = 0;
  for (std::size_t k = 0; k != I; ++k) s += counts[k];
  return s;
}

template <std::size_t R>
LOOM_COLD void throw_overlap(const shape<R>& out_ext, const shape<R>& out_str, const shape<R>& in_str) {
  throw aliasing_error("loom: the output (shape " + shape_string(out_ext) + ", strides " + shape_string(out_str) +
                       ") overlaps an input (strides " + shape_string(in_str) +
                       ") under a different index map; evaluate into a new tensor (loom::materialize) first");
}

//! What the bound form of every node kind provides: it enters a kernel by
//! value (trivially copyable), says the type it computes in (`compute`) and
//! how many row-reduction slots its subtree holds (`slots`); its children
//! are stated by children_of. Checked where a node binds itself.
template <class B>
concept bound_node_protocol = std::is_trivially_copyable_v<B> && requires {
  typename B::compute;
  { B::slots } -> std::convertible_to<std::size_t>;
};

// Binds a node tree to an output view (or a read_only_target): broadcasts
// leaves to the output's shape, checks aliasing, and returns the kernel-side
// tree. Row reductions get slots Base, Base + 1, ... in post-order, so a
// reduction's own dependencies have smaller slots.
struct binder {
  template <std::size_t Base, class T, std::size_t R, class S, class Tag, std::size_t RO>
  static auto bind(const leaf_node<T, R, S, Tag>& l, const read_only_target<RO, S>& out, bind_info& info) {
    return bind_leaf_view(l.v.broadcast_to(out.extents()), info);
  }
  template <std::size_t Base, class T, std::size_t R, class S, class Tag, class O, std::size_t RO>
  static auto bind(const leaf_node<T, R, S, Tag>& l, const view<O, RO, S>& out, bind_info& info) {
    const auto b = l.v.broadcast_to(out.extents());
    if (may_overlap(b, out) && !same_index_map(b, out)) throw_overlap(out.extents(), out.strides(), b.strides());
    return bind_leaf_view(b, info);
  }
  template <std::size_t Base, class C, class Out>
  static auto bind(const scalar_node<C>& s, const Out&, bind_info&) {
    return bound_scalar<C>{s.value};
  }
  template <std::size_t Base, class E, std::size_t R, class Out>
  static auto bind(const broadcast_node<E, R>& b, const Out& out, bind_info& info) {
    return bind<Base>(b.e, out, info);
  }
  template <std::size_t Base, class F, class... Ch, class Out>
  static auto bind(const map_node<F, Ch...>& m, const Out& out, bind_info& info) {
    return bind_map<Base>(m, out, info, std::index_sequence_for<Ch...>{});
  }
  // Other node kinds (row reductions, indexing, random, ...) bind themselves.
  template <std::size_t Base, class N, class Out>
    requires requires(const N& n, const Out& o, bind_info& i) { n.template bind_node<Base>(o, i); }
  static auto bind(const N& n, const Out& out, bind_info& info) {
    using bound = decltype(n.template bind_node<Base>(out, info));
    static_assert(bound_node_protocol<bound>,
                  "loom: the bound form of this node kind must be trivially copyable and state `using compute = ...;` "
                  "and `static constexpr std::size_t slots` (docs/architecture.md, 'adding a node kind')");
    return n.template bind_node<Base>(out, info);
  }
  template <std::size_t Base, class N, class Out>
  static auto bind(const N&, const Out&, bind_info&) {
    static_assert(always_false<N>,
                  "loom: this node kind cannot be bound into a kernel: give it a member `template <std::size_t Base, "
                  "class Out> auto bind_node(const Out& out, bind_info& info) const` returning its bound form "
                  "(docs/architecture.md, 'adding a node kind')");
  }
  template <std::size_t Base, class F, class... Ch, class Out, std::size_t... I>
  static auto bind_map(const map_node<F, Ch...>& m, const Out& out, bind_info& info, std::index_sequence<I...>) {
    using cin = typename map_node<F, Ch...>::types::cin;
    using children = tuple<decltype(bind<Base + slots_before<I, Ch...>()>(detail::get<I>(m.children), out, info))...>;
    using result =
        bound_map<F, cin, decltype(bind<Base + slots_before<I, Ch...>()>(detail::get<I>(m.children), out, info))...>;
    return result{m.f, children(bind<Base + slots_before<I, Ch...>()>(detail::get<I>(m.children), out, info)...)};
  }
};

//! Binds expression `e` for reading over its own shape (or a broadcast
//! shape `s`): the kernel-side tree (at_linear(i) / at(idx) give element
//! values in compute precision) plus what binding learned. For reductions
//! and other readers that write no elementwise output.
template <class E, std::size_t R>
auto bind_for_read(const E& e, const shape<R>& s, bind_info& info) {
  const auto n = as_node(e);
  using S = typename decltype(n)::space;
  static_assert(node_slots<std::remove_const_t<decltype(n)>>::value == 0,
                "loom: this operation cannot read an expression that contains row reductions (row_sum, row_max, ...); "
                "materialize it first");
  return binder::bind<0>(n, read_only_target<R, S>{s}, info);
}

//! The fewest bits per element among a tree's leaves (128 when it has none):
//! the device's contiguous path moves 16 bytes of that type per thread, so
//! each expression compiles for one vector width.
template <class N>
struct min_leaf_bits : std::integral_constant<std::size_t, tree_min_v<N, leaf_bits>> {};
//! Elements per 16-byte vector of the narrowest of a tree's leaves and an
//! output of `out_bytes` bytes per element (0: no output).
template <class N, std::size_t out_bytes = 0>
inline constexpr int vector_width_of =
    128 / static_cast<int>(out_bytes != 0 && 8 * out_bytes < min_leaf_bits<N>::value ? 8 * out_bytes
                                                                                       : min_leaf_bits<N>::value);
}  // namespace loom::detail
