// SPDX-License-Identifier: Apache-2.0
#pragma once

// One load per distinct layer argument on the device's elementwise
// contiguous path. A layer call tags the leaves of its tensor arguments by
// parameter (leaf_node's Tag, loom::layer), so every use of a parameter in
// the layer's body has the same type. From an assignment's bound tree this
// file builds a second tree in which the tagged leaves under maps read
// registers that the kernel loads once per vector step and parameter,
// instead of loading 16 bytes per use. Types only tell that two leaves may
// be the same argument (one layer called twice in one assignment tags two
// arguments alike); a run-time check of pointers and strides confirms it
// before that kernel is chosen.

#include <cstddef>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"

namespace loom::detail {
// The distinct tags of the tagged leaves of expression tree N that the
// sharing reaches (through maps and broadcasts), in pre-order. A tag names
// the layer's body type, which a kernel's template arguments cannot hold
// (a host lambda's closure type): the shared tree numbers them instead.
template <class List, class N>
struct expr_tags {
  using type = List;
};
template <class List, class T, std::size_t R, class S, class Tag>
struct expr_tags<List, leaf_node<T, R, S, Tag>> {
  using type = std::conditional_t<std::is_void_v<Tag>, List, typename append_unique<List, Tag>::type>;
};
template <class List, class E, std::size_t R>
struct expr_tags<List, broadcast_node<E, R>> : expr_tags<List, E> {};
template <class List, class F>
struct expr_tags<List, map_node<F>> {
  using type = List;
};
template <class List, class F, class C, class... Rest>
struct expr_tags<List, map_node<F, C, Rest...>>
    : expr_tags<typename expr_tags<List, C>::type, map_node<F, Rest...>> {};

//! A use of layer parameter K (bound leaf L) whose values the kernel loaded
//! once into the evaluation context: no registers or load of its own; the
//! tail and the run-time check read the leaf.
template <std::size_t K, class L>
struct bound_param {
  using compute = typename L::compute;
  using leaf_type = L;
  static constexpr std::size_t number = K;
  template <int vector_width>
  struct regs {};
  static constexpr std::size_t slots = 0;
  L leaf;

  template <bool allow_periodic = false>
  LOOM_HD compute at_linear(index_t i) const {
    return leaf.template at_linear<allow_periodic>(i);
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t, regs<vector_width>&) const {}
  template <int vector_width, class Ctx>
  LOOM_HD compute elem(const regs<vector_width>&, int j, const Ctx& ctx) const {
    return convert<compute>(detail::get<K>(ctx.r).v[j]);
  }
};
template <std::size_t K, class L>
struct children_of<bound_param<K, L>> {
  using types = type_list<>;
  template <class...>
  using rebind = bound_param<K, L>;
};
template <class N>
struct is_bound_param : std::false_type {};
template <std::size_t K, class L>
struct is_bound_param<bound_param<K, L>> : std::true_type {};
template <std::size_t K>
struct param_is {
  template <class N>
  struct pred : std::false_type {};
  template <class L>
  struct pred<bound_param<K, L>> : std::true_type {};
};

// The tree of bound tree b (bound from expression n) with every tagged leaf
// reached through maps (and broadcasts) made a bound_param numbered by its
// tag's place in Tags. Other node kinds keep their tagged leaves as leaves:
// they load them themselves.
template <class Tags>
struct param_sharer {
  template <class N, class B>
  static B share(const N&, const B& b) {
    return b;
  }
  template <class T, std::size_t R, class S, class Tag, class BT, std::size_t BR>
  static auto share(const leaf_node<T, R, S, Tag>&, const bound_leaf<BT, BR>& b) {
    if constexpr (std::is_void_v<Tag>)
      return b;
    else
      return bound_param<index_in<Tag>(Tags{}), bound_leaf<BT, BR>>{b};
  }
  template <class E, std::size_t R, class B>
  static auto share(const broadcast_node<E, R>& n, const B& b) {
    return share(n.e, b);
  }
  template <class F, class... Ch, class Cin, class... B>
  static auto share(const map_node<F, Ch...>& n, const bound_map<F, Cin, B...>& b) {
    return share_map(n, b, std::index_sequence_for<B...>{});
  }
  template <class F, class... Ch, class Cin, class... B, std::size_t... I>
  static auto share_map(const map_node<F, Ch...>& n, const bound_map<F, Cin, B...>& b, std::index_sequence<I...>) {
    using result = bound_map<F, Cin, decltype(share(detail::get<I>(n.children), detail::get<I>(b.ch)))...>;
    using children = tuple<decltype(share(detail::get<I>(n.children), detail::get<I>(b.ch)))...>;
    return result{b.f, children(share(detail::get<I>(n.children), detail::get<I>(b.ch))...)};
  }
};

//! What the device's contiguous path needs to load expression N's layer
//! parameters once: the shared tree of N bound as B, the number of
//! parameters it reads, and how many of them it uses twice or more (when 1
//! or more, its kernel loads fewer vectors than the plain one).
template <class N, class B>
struct shared_params_of {
  using tags = typename expr_tags<type_list<>, N>::type;
  using tree = decltype(param_sharer<tags>::share(std::declval<const N&>(), std::declval<const B&>()));
  static constexpr std::size_t params = tags::size;
  template <std::size_t... K>
  static constexpr int repeated(std::index_sequence<K...>) {
    return (0 + ... + int{tree_sum_v<tree, param_is<K>::template pred> >= 2});
  }
  static constexpr int repeated_count = repeated(std::make_index_sequence<params>{});
};

//! The evaluation context of the shared kernel: each parameter's vector
//! registers, loaded once per vector step (bound_param<K> reads r's K-th).
template <int vector_width, class... L>
struct param_regs {
  tuple<typename L::template regs<vector_width>...> r;
};

//! One leaf per parameter of a shared tree: what the kernel loads.
template <class... L>
struct param_loads {
  static constexpr std::size_t size = sizeof...(L);
  tuple<L...> leaves;
  template <int vector_width>
  using ctx = param_regs<vector_width, L...>;

  template <int vector_width, bool allow_periodic>
  LOOM_HD void load(index_t i0, ctx<vector_width>& c) const {
    load_impl<vector_width, allow_periodic>(i0, c, std::index_sequence_for<L...>{});
  }

 private:
  template <int vector_width, bool allow_periodic, std::size_t... I>
  LOOM_HD void load_impl(index_t i0, ctx<vector_width>& c, std::index_sequence<I...>) const {
    (detail::get<I>(leaves).template load<vector_width, allow_periodic>(i0, detail::get<I>(c.r)), ...);
  }
};
template <class B, class Seq>
struct param_loads_for;
template <class B, std::size_t... K>
struct param_loads_for<B, std::index_sequence<K...>> {
  using type = param_loads<typename tree_find_t<B, param_is<K>::template pred>::leaf_type...>;
};
//! The loads of shared tree B with `params` parameters.
template <class B, std::size_t params>
using param_loads_t = typename param_loads_for<B, std::make_index_sequence<params>>::type;

//! One vector step of the shared contiguous path: output elements
//! [v * vector_width, (v + 1) * vector_width) of shared tree e, whose
//! parameters `params` loads once. The device's contiguous_shared_kernel
//! runs it (the host tests run it too).
template <int vector_width, class O, class B, class P>
LOOM_HD void shared_vector_step(O* out, const B& e, const P& params, index_t v) {
  typename B::template regs<vector_width> r;
  typename P::template ctx<vector_width> c;
  params.template load<vector_width, true>(v * vector_width, c);
  e.template load<vector_width, true>(v * vector_width, r);
  vec_regs<O, vector_width> o;
  LOOM_UNROLL
  for (int j = 0; j < vector_width; ++j) o.v[j] = convert<O>(e.template elem<vector_width>(r, j, c));
  vec_store<O, vector_width>(out + v * vector_width, o);
}

//! Fills `loads` with the first use of each parameter of shared tree b and
//! returns whether every other use of it reads the same data the same way
//! (same pointer and strides): only then may the kernel load it once.
template <class B, class P>
bool collect_params(const B& b, P& loads) {
  bool same = true;
  bool seen[P::size] = {};
  visit_if<is_bound_param>(b, [&](const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    auto& first = detail::get<M::number>(loads.leaves);
    if (!seen[M::number]) {
      first = m.leaf;
      seen[M::number] = true;
    } else {
      same = same && first.same_as(m.leaf) && first.periodic == m.leaf.periodic;
    }
  });
  return same;
}
}  // namespace loom::detail
