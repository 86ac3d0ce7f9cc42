// SPDX-License-Identifier: Apache-2.0
#pragma once

// Row reductions that one tree holds many copies of. A gradient tree
// (loom::grad) copies a forward row reduction into every rule that needs its
// value, and the reduction of an adjoint into every term below it; as a tree
// the copies would each take a slot and a pass of the row kernel. Such a
// reduction is wrapped in shared_row_node<Id, N>, Id naming it within one
// derivation. Before binding, resolve_shared keeps the first copy in
// post-order as an ordinary row reduction (one slot, one pass) and replaces
// every later copy with a slot_ref_node that reads that slot: a row kernel
// has one slot per distinct reduction, not per copy.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/traverse.hpp"

namespace loom {
namespace detail {
//! A fresh number for each derivation (copies from two derivations are never
//! merged, even when their types agree).
inline std::uint64_t next_derivation() {
  static std::atomic<std::uint64_t> n{0};
  return ++n;
}
}  // namespace detail

//! Row reduction N, one of several copies of the same value within the
//! derivation `origin`: copies with the same Id and origin are computed once.
template <class Id, class N>
struct shared_row_node : detail::node_tag {
  using id = Id;
  using value_type = typename N::value_type;
  using space = typename N::space;
  static constexpr std::size_t rank = N::rank;
  N n;
  std::uint64_t origin;

  shared_row_node(const N& n_, std::uint64_t origin_) : n(n_), origin(origin_) {}
  shape<rank> extents() const { return n.extents(); }
};

//! A later copy of a shared row reduction: the value of row slot Slot, whose
//! row reduction has value type V and accumulator A.
template <class V, class A, std::size_t R, class S, std::size_t Slot>
struct slot_ref_node : detail::node_tag {
  using value_type = V;
  using space = S;
  static constexpr std::size_t rank = R;
  shape<R> ext;

  explicit slot_ref_node(const shape<R>& s) : ext(s) {}
  shape<R> extents() const { return ext; }
  template <std::size_t Base, class Out>
  auto bind_node(const Out&, detail::bind_info& info) const;
};

namespace detail {
template <class Id, class N>
struct children_of<shared_row_node<Id, N>> {
  using types = type_list<N>;
  template <std::size_t, class M>
  LOOM_HD static auto& get(M& s) {
    return s.n;
  }
  template <class C>
  using rebind = shared_row_node<Id, C>;
  template <class C>
  static auto rebuild(const shared_row_node<Id, N>& s, const C& c) {
    return shared_row_node<Id, C>(c, s.origin);
  }
};
template <class V, class A, std::size_t R, class S, std::size_t Slot>
struct children_of<slot_ref_node<V, A, R, S, Slot>> : no_children<slot_ref_node<V, A, R, S, Slot>> {};

// Kernel side: reads slot Slot of the row context (computed by an earlier
// pass: the first copy precedes every later one in post-order, and passes
// run in slot order).
template <class A, std::size_t Slot>
struct bound_slot_ref {
  using compute = A;
  template <int vector_width>
  struct regs {};
  static constexpr std::size_t slots = 0;

  template <class Ctx>
  LOOM_HD A at(const index_t*, const Ctx& ctx) const {
    return static_cast<A>(ctx.v[Slot]);
  }
  template <int vector_width>
  LOOM_HD void row_load(const index_t*, index_t, regs<vector_width>&) const {}
  template <int vector_width, class Ctx>
  LOOM_HD A elem(const regs<vector_width>&, int, const Ctx& ctx) const {
    return static_cast<A>(ctx.v[Slot]);
  }
  bool same_as(const bound_slot_ref&) const { return true; }
};
template <class A, std::size_t Slot>
struct children_of<bound_slot_ref<A, Slot>> : no_children<bound_slot_ref<A, Slot>> {};
template <std::size_t Slot>
struct capability<cap::double_valued, bound_slot_ref<double, Slot>> : std::true_type {};

template <class N>
struct is_shared_row : std::false_type {};
template <class Id, class N>
struct is_shared_row<shared_row_node<Id, N>> : std::true_type {};
template <class N>
inline constexpr bool has_shared_rows = tree_any_v<N, is_shared_row>;
}  // namespace detail

template <class V, class A, std::size_t R, class S, std::size_t Slot>
template <std::size_t Base, class Out>
auto slot_ref_node<V, A, R, S, Slot>::bind_node(const Out&, detail::bind_info& info) const {
  static_assert(Slot < Base, "loom: internal error: a shared row reduction is read before its pass");
  info.contiguous = false;
  info.linear = false;
  return detail::bound_slot_ref<A, Slot>{};
}

namespace detail::shared {
// The walk's state: the next free slot and the Ids seen so far with their slots.
template <class Id, std::size_t Slot>
struct seen_entry {};
template <class... E>
struct seen_list {};

template <class Id, class L>
struct lookup : std::integral_constant<std::size_t, ~std::size_t{0}> {};
template <class Id, std::size_t Slot, class... E>
struct lookup<Id, seen_list<seen_entry<Id, Slot>, E...>> : std::integral_constant<std::size_t, Slot> {};
template <class Id, class Other, std::size_t S, class... E>
struct lookup<Id, seen_list<seen_entry<Other, S>, E...>> : lookup<Id, seen_list<E...>> {};

template <class L, class Id, std::size_t Slot>
struct append;
template <class... E, class Id, std::size_t Slot>
struct append<seen_list<E...>, Id, Slot> {
  using type = seen_list<E..., seen_entry<Id, Slot>>;
};

// The walk's state: the slot the next row reduction gets and the Ids seen.
template <std::size_t Next, class Seen>
struct resolve_state {
  static constexpr std::size_t next = Next;
  using seen = Seen;
};

// The origin every shared node of one resolved tree must have.
struct origin_check {
  std::uint64_t origin = 0;
  void operator()(std::uint64_t o) {
    if (origin == 0) origin = o;
    if (o != origin)
      throw value_error(
          "loom: grad: one assignment holds gradient expressions of two different loom::grad calls; assign each "
          "gradient by itself (or ask for several inputs in one call: loom::grad<0, 1>(layer)(...).into(...))");
  }
};

// Resolves shared row reductions (rewrite_along, post-order, children left
// to right: the order in which the binder numbers row-reduction slots, so
// the state's `next` is the slot the next reduction gets). A subtree without
// shared reductions is kept whole; a shared reduction already seen becomes
// a slot_ref_node; the first copy of one is kept, unwrapped, and its slot
// recorded.
struct resolver {
  template <class N, class S>
  static constexpr bool seen_before = [] {
    if constexpr (is_shared_row<N>::value)
      return lookup<typename N::id, typename S::seen>::value != ~std::size_t{0};
    else
      return false;
  }();
  template <class N, class S>
  static constexpr bool stops = !has_shared_rows<N> || seen_before<N, S>;
  template <class S, class N>
  static auto stop(const N& n, origin_check& check) {
    if constexpr (!has_shared_rows<N>) {
      return thread_on<resolve_state<S::next + tree_sum_v<N, is_row_reduction>, typename S::seen>>(n);
    } else {
      using M = std::remove_cvref_t<decltype(n.n)>;
      static_assert(is_row_reduction<M>::value, "loom: internal error: shared_row_node wraps a row reduction");
      check(n.origin);
      using A = row_acc_t<typename std::remove_cvref_t<decltype(n.n.e)>::value_type>;
      using ref = slot_ref_node<typename M::value_type, A, M::rank, typename M::space,
                                lookup<typename N::id, typename S::seen>::value>;
      return thread_on<S>(ref(n.extents()));
    }
  }
  template <class S, class N, class M>
  static auto finish(const N& n, const M& m, origin_check& check) {
    if constexpr (is_shared_row<N>::value) {
      check(n.origin);
      return thread_on<resolve_state<S::next, typename append<typename S::seen, typename N::id, S::next - 1>::type>>(
          m.n);
    } else {
      return thread_on<resolve_state<S::next + (is_row_reduction<N>::value ? 1 : 0), typename S::seen>>(m);
    }
  }
};
}  // namespace detail::shared

namespace detail {
//! Tree n with every shared row reduction resolved: the first copy of each
//! (post-order) kept, later copies reading its slot. The tree is the whole
//! tree of one row kernel (its slots are numbered from 0).
template <class N>
auto resolve_shared_rows(const N& n) {
  shared::origin_check check;
  return rewrite_along<shared::resolver, shared::resolve_state<0, shared::seen_list<>>>(n, check).node;
}

//! Binds the whole tree of a kernel: binder::bind<0> after resolving shared
//! row reductions.
template <class N, class Out>
auto bind_root(const N& n, const Out& out, bind_info& info) {
  if constexpr (has_shared_rows<N>)
    return binder::bind<0>(resolve_shared_rows(n), out, info);
  else
    return binder::bind<0>(n, out, info);
}
}  // namespace detail
}  // namespace loom
