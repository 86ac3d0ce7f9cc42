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
struct double_valued<bound_slot_ref<double, Slot>> : std::true_type {};

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

// A resolved subtree and the state after it.
template <class N, std::size_t Next, class Seen>
struct walked {
  static constexpr std::size_t next = Next;
  using seen = Seen;
  N node;
};
template <std::size_t Next, class Seen, class N>
walked<N, Next, Seen> make_walked(const N& n) {
  return walked<N, Next, Seen>{n};
}

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

template <std::size_t Next, class Seen, class N>
auto resolve(const N& n, origin_check& check);

template <std::size_t K, std::size_t Next, class Seen, class N, class... Done>
auto resolve_children(const N& n, origin_check& check, const Done&... done) {
  if constexpr (K == child_count_v<N>) {
    constexpr std::size_t next = Next + (is_row_reduction<N>::value ? 1 : 0);
    return make_walked<next, Seen>(children_of<N>::rebuild(n, done.node...));
  } else {
    const auto c = resolve<Next, Seen>(child<K>(n), check);
    using C = std::remove_cvref_t<decltype(c)>;
    return resolve_children<K + 1, C::next, typename C::seen>(n, check, done..., c);
  }
}

template <std::size_t Next, class Seen, class Id, class M>
auto resolve_shared(const shared_row_node<Id, M>& s, origin_check& check) {
  static_assert(is_row_reduction<M>::value, "loom: internal error: shared_row_node wraps a row reduction");
  check(s.origin);
  constexpr std::size_t at = lookup<Id, Seen>::value;
  if constexpr (at != ~std::size_t{0}) {
    using A = row_acc_t<typename std::remove_cvref_t<decltype(s.n.e)>::value_type>;
    using ref = slot_ref_node<typename M::value_type, A, M::rank, typename M::space, at>;
    return make_walked<Next, Seen>(ref(s.extents()));
  } else {
    const auto c = resolve<Next, Seen>(s.n, check);
    using C = std::remove_cvref_t<decltype(c)>;
    return make_walked<C::next, typename append<typename C::seen, Id, C::next - 1>::type>(c.node);
  }
}

// Post-order, children left to right: the order in which the binder numbers
// row-reduction slots, so `Next` is the slot the next reduction gets.
template <std::size_t Next, class Seen, class N>
auto resolve(const N& n, origin_check& check) {
  if constexpr (!has_shared_rows<N>)
    return make_walked<Next + tree_sum_v<N, is_row_reduction>, Seen>(n);
  else if constexpr (is_shared_row<N>::value)
    return resolve_shared<Next, Seen>(n, check);
  else
    return resolve_children<0, Next, Seen>(n, check);
}
}  // namespace detail::shared

namespace detail {
//! Tree n with every shared row reduction resolved: the first copy of each
//! (post-order) kept, later copies reading its slot. The tree is the whole
//! tree of one row kernel (its slots are numbered from 0).
template <class N>
auto resolve_shared_rows(const N& n) {
  shared::origin_check check;
  return shared::resolve<0, shared::seen_list<>>(n, check).node;
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
