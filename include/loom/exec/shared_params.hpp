// SPDX-License-Identifier: Apache-2.0
#pragma once

// One load per distinct input on the device's elementwise contiguous path.
// A layer call tags the leaves of its tensor arguments by parameter
// (leaf_node's Tag, loom::layer), so every use of a parameter in the layer's
// body has the same type. In a plain expression (no layer call) of 8 loads
// or more, each leaf type and each subtree of maps over leaves that occurs
// twice or more is a parameter. From an assignment's bound tree this file
// builds a second tree in which those uses read values that the kernel
// loads (or computes) once per vector step, instead of loading 16 bytes per
// use. Types only tell that two uses may be the same data (one layer
// called twice in one assignment tags two arguments alike; `a * b` reads
// two float tensors of one type): a parameter holds a few distinct values
// in slots, and at launch a comparison of pointers and strides gives each
// use its value's slot, or turns the shared kernel down when they do not
// fit.

#include <cstddef>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/detail/tuple.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"

namespace loom::detail {
// The distinct tags of the tagged leaves of an expression tree that the
// sharing reaches (through maps and broadcasts), in pre-order
// (tree_fold_t<expr_tags, type_list<>, N>). A tag names the layer's body
// type, which a kernel's template arguments cannot hold (a host lambda's
// closure type): the shared tree numbers them instead. Other node kinds
// load their leaves themselves: the walk stops there.
struct expr_tags {
  template <class S, class N>
  struct pre : fold_step<S, elementwise_inner<N>::value> {};
  template <class S, class T, std::size_t R, class Sp, class Tag>
  struct pre<S, leaf_node<T, R, Sp, Tag>>
      : fold_step<typename std::conditional_t<std::is_void_v<Tag>, std::type_identity<S>, append_unique<S, Tag>>::type,
                  false> {};
  template <class S, class N>
  using post = fold_keep<S, N>;
};

//! The parameter that stands for every use of expression node N bound as B
//! in an expression without layer calls: an untagged leaf, or a subtree of
//! maps over leaves (a named subexpression `t = x * w + b` used in
//! `t * t * t`). A tensor of rank 1 broadcast over the rows and a matrix
//! differ in N even where they bind alike.
template <class N, class B>
struct plain_param {};

//! Whether bound tree B is maps over leaves only: a subtree whose values
//! one run-time comparison (same_as) and one computation per vector step
//! can share. Scalars are left out: `0.5f * t` and `2.0f * t` have one type,
//! and counting them as one subtree would fail the run-time check; the walk
//! enters such subtrees and shares what repeats inside.
template <class B>
struct not_leaf_or_map : std::true_type {};
template <class T, std::size_t R>
struct not_leaf_or_map<bound_leaf<T, R>> : std::false_type {};
template <class F, class Cin, class... B>
struct not_leaf_or_map<bound_map<F, Cin, B...>> : std::false_type {};
template <class B>
struct pure_map : std::bool_constant<!tree_any_v<B, not_leaf_or_map>> {};

// The plain_params of the untagged leaves and the pure map subtrees of an
// expression tree N (bound as B) that the sharing reaches, with repeats, in
// pre-order (a map before its children): zip_fold_t<plain_nodes,
// type_list<>, N, B>.
struct plain_nodes {
  template <class S, class N, class B>
  struct pre : fold_step<S, false> {};
  template <class... L, class T, std::size_t R, class Sp, class BT, std::size_t BR>
  struct pre<type_list<L...>, leaf_node<T, R, Sp, void>, bound_leaf<BT, BR>>
      : fold_step<type_list<L..., plain_param<leaf_node<T, R, Sp, void>, bound_leaf<BT, BR>>>, false> {};
  template <class... L, class F, class... Ch, class Cin, class... B>
  struct pre<type_list<L...>, map_node<F, Ch...>, bound_map<F, Cin, B...>>
      : fold_step<std::conditional_t<pure_map<bound_map<F, Cin, B...>>::value,
                                     type_list<L..., plain_param<map_node<F, Ch...>, bound_map<F, Cin, B...>>>,
                                     type_list<L...>>,
                  true> {};
  template <class S, class N, class B>
  using post = fold_keep<S, N>;
};

template <class T, class... L>
constexpr int count_in(type_list<L...>) {
  return (0 + ... + int{std::is_same_v<T, L>});
}

//! A parameter: Key (a layer's tag or a plain_param) and the number of
//! distinct values its uses may have at run time, each held in a slot of
//! the kernel's context and loaded (or computed) once per vector step.
template <class Key, std::size_t Slots>
struct param_group {
  using key = Key;
  static constexpr std::size_t slots = Slots;
};
//! The index of the param_group of Key in type_list Groups (its size if none).
template <class Key, class... G>
constexpr std::size_t group_index(type_list<G...>) {
  return index_in<Key>(type_list<typename G::key...>{});
}
//! The slots of the param_group of Key in Groups (0 if none).
template <class Key, class... G>
constexpr std::size_t group_slots(type_list<G...>) {
  constexpr std::size_t slots[] = {G::slots..., 0};
  return slots[group_index<Key>(type_list<G...>{})];
}

//! The most distinct tensors one leaf type of a plain expression may name:
//! trees whose leaves of one type name up to 3 tensors (`a`, `b` and `c`
//! used 13 times) load each once. With more, the run-time check turns the
//! shared kernel down. Every slot holds registers whether the launch fills
//! it or not, so a repeated subtree (a named subexpression, `t` in
//! `t * t * t`) has 2: its copies are one value, or two of one form (`a * d`
//! and `b * c` have one type), else the plain kernel runs.
inline constexpr int plain_param_slots = 3;
inline constexpr int plain_subtree_slots = 2;

// The parameters of a plain expression N (bound as B) in pre-order, given
// All (plain_nodes of the whole tree): each outermost leaf or pure subtree
// that occurs twice or more in the tree, once, with as many slots as it
// occurs, at most plain_param_slots for a leaf and plain_subtree_slots for
// a subtree; the walk does not enter it.
template <class Key, class All, int most>
using plain_group =
    param_group<Key, static_cast<std::size_t>(count_in<Key>(All{}) < most ? count_in<Key>(All{}) : most)>;
template <class All>
struct plain_params {
  template <class Key, class Out, int most>
  using add = std::conditional_t<(count_in<Key>(All{}) >= 2),
                                 typename append_unique<Out, plain_group<Key, All, most>>::type, Out>;
  template <class S, class N, class B>
  struct pre : fold_step<S, false> {};
  template <class S, class T, std::size_t R, class Sp, class BT, std::size_t BR>
  struct pre<S, leaf_node<T, R, Sp, void>, bound_leaf<BT, BR>>
      : fold_step<add<plain_param<leaf_node<T, R, Sp, void>, bound_leaf<BT, BR>>, S, plain_param_slots>, false> {};
  template <class S, class F, class... Ch, class Cin, class... B>
  struct pre<S, map_node<F, Ch...>, bound_map<F, Cin, B...>> {
    using key = plain_param<map_node<F, Ch...>, bound_map<F, Cin, B...>>;
    static constexpr bool enter = count_in<key>(All{}) < 2;
    using type = add<key, S, plain_subtree_slots>;
  };
  template <class S, class N, class B>
  using post = fold_keep<S, N>;
};

//! Below this many 16-byte loads per vector step (leaves of the bound tree) a
//! plain expression gets no shared kernel: its loads hold fewer than 32
//! registers, so loading a repeat once changes little, and the kernel would
//! be compiled for every small tree that names two tensors of one type.
inline constexpr int plain_sharing_min_loads = 8;

template <class N, class B>
struct plain_sharing {
  using type = zip_fold_t<plain_params<zip_fold_t<plain_nodes, type_list<>, N, B>>, type_list<>, N, B>;
};
template <class List>
struct layer_groups;
template <class... Tag>
struct layer_groups<type_list<Tag...>> {
  using type = type_list<param_group<Tag, 1>...>;
};
//! The parameters whose uses expression N (bound as B) may load or compute
//! once per vector step, as param_groups: a layer call's tags when it has
//! any (then only those; one slot each: every use of a parameter is one
//! argument), else (at plain_sharing_min_loads loads or more) each
//! outermost leaf or subtree of maps over leaves that occurs twice or more.
template <class N, class B>
struct sharing_tags {
  using layer_tags = tree_fold_t<expr_tags, type_list<>, N>;
  using type = typename std::conditional_t<
      (layer_tags::size > 0), layer_groups<layer_tags>,
      std::conditional_t<(tree_sum_v<B, is_bound_leaf> >= plain_sharing_min_loads), plain_sharing<N, B>,
                         std::type_identity<type_list<>>>>::type;
};

//! A use of parameter K (bound leaf or pure subtree L, with D slots) whose
//! values the kernel loaded (or computed) once into the evaluation context:
//! no registers or load of its own; it reads slot `slot`, which the launch
//! sets (collect_params). The tail and the run-time check read L.
template <std::size_t K, class L, std::size_t D>
struct bound_param {
  using compute = typename L::compute;
  using leaf_type = L;
  static constexpr std::size_t number = K;
  static constexpr std::size_t param_slots = D;
  template <int vector_width>
  struct regs {};
  static constexpr std::size_t slots = 0;
  L leaf;
  unsigned char slot = 0;

  template <bool allow_periodic = false>
  LOOM_HD compute at_linear(index_t i) const {
    return leaf.template at_linear<allow_periodic>(i);
  }
  template <int vector_width, bool allow_periodic = false>
  LOOM_HD void load(index_t, regs<vector_width>&) const {}
  template <int vector_width, class Ctx>
  LOOM_HD compute elem(const regs<vector_width>&, int j, const Ctx& ctx) const {
    const auto& g = detail::get<K>(ctx.r);
    if constexpr (D == 1) {
      return convert<compute>(g.s[0].v[j]);
    } else {
      // The launch's slot picked among values already converted: a
      // selection of registers. (Picking among the stored elements first
      // let the compiler pick an address instead and keep the slots of
      // 16-bit types in local memory.)
      compute v = convert<compute>(g.s[0].v[j]);
      LOOM_UNROLL
      for (std::size_t d = 1; d < D; ++d) {
        const compute w = convert<compute>(g.s[d].v[j]);
        if (slot == d) v = w;
      }
      return v;
    }
  }
};
template <std::size_t K, class L, std::size_t D>
struct children_of<bound_param<K, L, D>> : no_children<bound_param<K, L, D>> {};
template <class N>
struct is_bound_param : std::false_type {};
template <std::size_t K, class L, std::size_t D>
struct is_bound_param<bound_param<K, L, D>> : std::true_type {};
template <std::size_t K>
struct param_is {
  template <class N>
  struct pred : std::false_type {};
  template <class L, std::size_t D>
  struct pred<bound_param<K, L, D>> : std::true_type {};
};

// The tree of bound tree b (bound from expression n) with every leaf or
// subtree reached through maps (and broadcasts) whose tag, or plain_param
// of its types, has a param_group in Groups made a bound_param numbered by
// its place there. The walk enters the kinds that compute each element from
// their children's at the same coordinates (elementwise_inner: maps,
// broadcasts) and stops at every other kind, which loads its leaves itself;
// an elementwise_inner kind without a rule here stops the build. This walk
// is written out by kind: built by a generic rewrite beside the expression
// tree, the shared tree reaches nvcc's host stub as shared_params_of<N,
// B>::tree, a name that holds N and so a layer's tag (a host lambda's
// closure type), which the stub cannot compile.
template <class Groups>
struct param_sharer {
  template <class Key, class L>
  static auto param_or(const L& b, auto otherwise) {
    constexpr std::size_t k = group_index<Key>(Groups{});
    if constexpr (k < Groups::size) {
      return bound_param<k, L, group_slots<Key>(Groups{})>{b};
    } else {
      return otherwise();
    }
  }
  template <class N, class B>
    requires(!elementwise_inner<N>::value)
  static B share(const N&, const B& b) {
    return b;
  }
  template <class N, class B>
    requires(elementwise_inner<N>::value)
  static B share(const N&, const B& b) {
    static_assert(always_false<N>,
                  "loom: the shared kernel's walk (param_sharer) enters this elementwise node kind but has no rule "
                  "for it: give it a share overload in exec/shared_params.hpp (docs/architecture.md, 'adding a node "
                  "kind')");
    return b;
  }
  template <class T, std::size_t R, class S, class Tag, class BT, std::size_t BR>
  static auto share(const leaf_node<T, R, S, Tag>&, const bound_leaf<BT, BR>& b) {
    using key = std::conditional_t<std::is_void_v<Tag>, plain_param<leaf_node<T, R, S, Tag>, bound_leaf<BT, BR>>, Tag>;
    return param_or<key>(b, [&] { return b; });
  }
  template <class E, std::size_t R, class B>
  static auto share(const broadcast_node<E, R>& n, const B& b) {
    return share(n.e, b);
  }
  template <class F, class... Ch, class Cin, class... B>
  static auto share(const map_node<F, Ch...>& n, const bound_map<F, Cin, B...>& b) {
    using key = plain_param<map_node<F, Ch...>, bound_map<F, Cin, B...>>;
    return param_or<key>(b, [&] { return share_map(n, b, std::index_sequence_for<B...>{}); });
  }
  template <class F, class... Ch, class Cin, class... B, std::size_t... I>
  static auto share_map(const map_node<F, Ch...>& n, const bound_map<F, Cin, B...>& b, std::index_sequence<I...>) {
    using result = bound_map<F, Cin, decltype(share(detail::get<I>(n.children), detail::get<I>(b.ch)))...>;
    using children = tuple<decltype(share(detail::get<I>(n.children), detail::get<I>(b.ch)))...>;
    return result{b.f, children(share(detail::get<I>(n.children), detail::get<I>(b.ch))...)};
  }
};

//! What the device's contiguous path needs to load expression N's
//! parameters once: the shared tree of N bound as B, the number of
//! parameters it reads, and how many of them it uses twice or more (when 1
//! or more, its kernel may load fewer vectors than the plain one).
template <class N, class B>
struct shared_params_of {
  using tags = typename sharing_tags<N, B>::type;
  using tree = decltype(param_sharer<tags>::share(std::declval<const N&>(), std::declval<const B&>()));
  static constexpr std::size_t params = tags::size;
  template <std::size_t... K>
  static constexpr int repeated(std::index_sequence<K...>) {
    return (0 + ... + int{tree_sum_v<tree, param_is<K>::template pred> >= 2});
  }
  static constexpr int repeated_count = repeated(std::make_index_sequence<params>{});
};

//! The values of a pure subtree parameter at one vector step's elements.
template <class C, int vector_width>
struct param_values {
  C v[vector_width];
};
//! What the context holds for one value of parameter L: a leaf's vector
//! registers, a subtree's computed values.
template <class L, int vector_width>
struct param_slot {
  using type = param_values<typename L::compute, vector_width>;
};
template <class T, std::size_t R, int vector_width>
struct param_slot<bound_leaf<T, R>, vector_width> {
  using type = typename bound_leaf<T, R>::template regs<vector_width>;
};
//! The D values of one parameter in the context.
template <class L, std::size_t D, int vector_width>
struct param_slots {
  typename param_slot<L, vector_width>::type s[D];
};

//! The evaluation context of the shared kernel: each parameter's values,
//! loaded or computed once per vector step (bound_param<K> reads r's K-th).
template <int vector_width, class... G>
struct param_regs {
  tuple<param_slots<typename G::leaf_type, G::param_slots, vector_width>...> r;
};

//! The distinct values of one parameter: `used` of its D leaves (or
//! subtrees), which collect_params fills.
template <class L, std::size_t D>
struct param_values_of {
  using leaf_type = L;
  static constexpr std::size_t param_slots = D;
  L s[D];
  unsigned char used = 0;
};

//! The values of each parameter of a shared tree: what the kernel loads
//! (and computes) once per vector step.
template <class... G>
struct param_loads {
  static constexpr std::size_t size = sizeof...(G);
  tuple<G...> leaves;
  template <int vector_width>
  using ctx = param_regs<vector_width, G...>;

  template <int vector_width, bool allow_periodic>
  LOOM_HD void load(index_t i0, ctx<vector_width>& c) const {
    load_impl<vector_width, allow_periodic>(i0, c, std::index_sequence_for<G...>{});
  }

 private:
  template <int vector_width, bool allow_periodic, std::size_t... I>
  LOOM_HD void load_impl(index_t i0, ctx<vector_width>& c, std::index_sequence<I...>) const {
    (load_group<vector_width, allow_periodic>(detail::get<I>(leaves), i0, detail::get<I>(c.r)), ...);
  }
  template <int vector_width, bool allow_periodic, class L, std::size_t D>
  LOOM_HD static void load_group(const param_values_of<L, D>& g, index_t i0, param_slots<L, D, vector_width>& out) {
    load_one<vector_width, allow_periodic>(g.s[0], i0, out.s[0]);
    LOOM_UNROLL
    for (std::size_t d = 1; d < D; ++d)
      if (d < g.used) load_one<vector_width, allow_periodic>(g.s[d], i0, out.s[d]);
  }
  template <int vector_width, bool allow_periodic, class T, std::size_t R>
  LOOM_HD static void load_one(const bound_leaf<T, R>& l, index_t i0,
                               typename bound_leaf<T, R>::template regs<vector_width>& r) {
    l.template load<vector_width, allow_periodic>(i0, r);
  }
  template <int vector_width, bool allow_periodic, class M>
  LOOM_HD static void load_one(const M& m, index_t i0, param_values<typename M::compute, vector_width>& out) {
    typename M::template regs<vector_width> r;
    m.template load<vector_width, allow_periodic>(i0, r);
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) out.v[j] = m.template elem<vector_width>(r, j);
  }
};
template <class B, class Seq>
struct param_loads_for;
template <class B, std::size_t... K>
struct param_loads_for<B, std::index_sequence<K...>> {
  template <class P>
  using values = param_values_of<typename P::leaf_type, P::param_slots>;
  using type = param_loads<values<tree_find_t<B, param_is<K>::template pred>>...>;
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

// Whether two uses of a parameter read the same values: the same pointers
// and strides (and, for a leaf, the same periodic form).
template <class L>
bool same_param_values(const L& a, const L& b) {
  if constexpr (is_bound_leaf<L>::value)
    return a.same_as(b) && a.periodic == b.periodic;
  else
    return a.same_as(b);
}

//! Fills `loads` with the distinct values of each parameter of shared tree
//! b, sets each use's slot to its value's, and returns how many values are
//! used twice or more (each then loaded once per vector step), or -1 when a
//! parameter has more distinct values than slots. The plain kernel runs
//! unless this is 1 or more.
template <class B, class P>
int collect_params(B& b, P& loads) {
  bool fits = true;
  int uses[P::size][plain_param_slots > plain_subtree_slots ? plain_param_slots : plain_subtree_slots] = {};
  visit_if<is_bound_param>(b, [&](auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    auto& g = detail::get<M::number>(loads.leaves);
    std::size_t d = 0;
    while (d < g.used && !same_param_values(g.s[d], m.leaf)) ++d;
    if (d == g.used) {
      if (d == M::param_slots) {
        fits = false;
        return;
      }
      g.s[d] = m.leaf;
      ++g.used;
    }
    m.slot = static_cast<unsigned char>(d);
    ++uses[M::number][d];
  });
  if (!fits) return -1;
  int repeated = 0;
  for (const auto& u : uses)
    for (int n : u) repeated += n >= 2;
  return repeated;
}
}  // namespace loom::detail
