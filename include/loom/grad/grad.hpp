// SPDX-License-Identifier: Apache-2.0
#pragma once

// loom::grad: the gradients of a layer's inputs, derived from the layer's
// expression at compile time (grad/derive.hpp) and assigned in the fewest
// kernels the data allows (docs/08_gradients.md).

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/eval_info.hpp"
#include "loom/exec/row_colsum.hpp"
#include "loom/exec/rows.hpp"
#include "loom/grad/derive.hpp"
#include "loom/grad/input_gradient.hpp"
#include "loom/grad/saved.hpp"
#include "loom/nn/embedding.hpp"
#include "loom/nn/layer.hpp"
#include "loom/reduce/api.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
namespace detail::autodiff {
//! loom::skip's type.
struct skip_t {};
template <class X>
auto output_of(X&& x) {
  if constexpr (std::is_same_v<std::remove_cvref_t<X>, skip_t>)
    return skip_t{};
  else
    return as_view(x);
}
}  // namespace detail::autodiff

//! Stands for a gradient that is not wanted in gradients::into.
inline constexpr detail::autodiff::skip_t skip{};

//! The gradients of several inputs of a layer, lazily; `into(outs...)`
//! assigns them (one output per input asked for, in order).
template <class... G>
struct gradients {
  std::tuple<G...> parts;

  //! The gradient of the K-th input asked for (assignable: `dw = g.get<1>();`).
  template <std::size_t K>
  const auto& get() const {
    return std::get<K>(parts);
  }

  //! Assigns every gradient to its output (a tensor or view of the input's
  //! shape, or loom::skip). The first two gradients of inputs of lower rank
  //! but not rank 0 (weights [C] or [1]) share a row kernel that sums them
  //! per block of rows, then the kernel that adds the partial sums (2 in
  //! all, as layer_norm_backward; a whole sum adds two); the first gradient
  //! of an input of the output's rank is that row kernel's output when it
  //! has the output's shape. The others take their own (gradient_kind).
  //! Every output's shape and every gradient's kind are checked first.
  //! Returns what ran (also loom::last_grad()).
  template <class... Out>
  grad_info into(Out&&... outs) const {
    static_assert(sizeof...(Out) == sizeof...(G),
                  "loom: grad: into() takes one output (or loom::skip) per input asked for");
    grad_info gi;
    run(gi, std::make_tuple(detail::autodiff::output_of(outs)...), std::index_sequence_for<G...>{});
    return detail::last_slot<grad_info>() = gi;
  }

 private:
  static constexpr std::size_t none = ~std::size_t{0};
  // A gradient the shared kernel may take (not a scatter, which takes its own).
  template <class Outs, std::size_t K>
  static constexpr bool wanted =
      !std::is_same_v<std::tuple_element_t<K, Outs>, detail::autodiff::skip_t> &&
      detail::autodiff::has_adjoint<std::tuple_element_t<K, std::tuple<G...>>> &&
      !detail::autodiff::is_scatter<decltype(std::tuple_element_t<K, std::tuple<G...>>::adjoint)>;

  // The shared kernel's plan, fixed at compile time so that one row kernel
  // is compiled for it: the row output is the first wanted gradient of an
  // input of the adjoint's rank, the column sums the first two of inputs of
  // lower rank (weights [C], broadcast over the rows).
  template <std::size_t K>
  using part_t = std::tuple_element_t<K, std::tuple<G...>>;
  template <class Outs, std::size_t K>
  static constexpr bool may_lead = wanted<Outs, K> && part_t<K>::in_rank == part_t<K>::out_rank;
  template <class Outs, std::size_t K>
  static constexpr bool may_sum = wanted<Outs, K> && part_t<K>::in_rank > 0 && part_t<K>::in_rank < part_t<K>::out_rank;
  template <class Outs, std::size_t... K>
  static constexpr auto plan(std::index_sequence<K...>) {
    std::array<std::size_t, 3> p{none, none, none};  // row output, first sum, second sum
    const bool lead[] = {may_lead<Outs, K>...};
    const bool summed[] = {may_sum<Outs, K>...};
    int n = 0;
    for (std::size_t k = 0; k != sizeof...(K); ++k) {
      if (lead[k] && p[0] == none) p[0] = k;
      if (summed[k] && n < 2) p[1 + n++] = k;
    }
    return p;
  }

  template <class Outs, std::size_t... K>
  void run(grad_info& gi, const Outs& outs, std::index_sequence<K...> ks) const {
    constexpr auto p = plan<Outs>(ks);
    // Every output's shape and every gradient's kind first: a bad one throws
    // before anything is written.
    (check<K>(std::get<K>(outs)), ...);
    bool done[sizeof...(K)] = {};
    if constexpr (p[1] != none) {
      // The sums (column or whole sums: the only kinds of a wanted input of
      // lower rank) always run in the shared kernel; the row output is
      // written when it is a same-shape gradient (a per-row sum takes its
      // own kernel, and the shared one computes no row values).
      bool lead = false;
      if constexpr (p[0] != none) lead = kind_of<Outs, p[0]>() == gradient_kind::same_shape;
      if constexpr (p[2] != none)
        group(gi, outs, done, lead, constant<p[0]>{}, constant<p[1]>{}, constant<p[2]>{});
      else
        group(gi, outs, done, lead, constant<p[0]>{}, constant<p[1]>{});
    }
    (rest<K, p[0], p[1], p[2]>(gi, std::get<K>(outs), done[K]), ...);
  }
  template <std::size_t K>
  using constant = std::integral_constant<std::size_t, K>;
  template <std::size_t K, class V>
  void check(const V& v) const {
    if constexpr (!std::is_same_v<V, detail::autodiff::skip_t>) {
      detail::autodiff::check_gradient_output(std::get<K>(parts), v);
      (void)std::get<K>(parts).kind();
    }
  }
  template <class Outs, std::size_t K>
  gradient_kind kind_of() const {
    if constexpr (std::is_same_v<std::tuple_element_t<K, Outs>, detail::autodiff::skip_t>)
      return gradient_kind::zero;  // not assigned, and zero is never grouped
    else
      return std::get<K>(parts).kind();
  }
  // A gradient the shared kernel did not take. With sums in the plan, its
  // row output reaches here only as a per-row sum and its sums never do, so
  // those kernels are not compiled again.
  template <std::size_t K, std::size_t P0, std::size_t P1, std::size_t P2, class V>
  void rest(grad_info& gi, const V& v, bool done) const {
    constexpr bool planned = P1 != none;
    constexpr bool lead = planned && K == P0, summed = planned && (K == P1 || K == P2);
    if constexpr (!std::is_same_v<V, detail::autodiff::skip_t> && !summed)
      if (!done) detail::autodiff::assign_one<!lead>(std::get<K>(parts), v, gi);
  }
  template <class Outs, class P, class... S>
  void group(grad_info& gi, const Outs& outs, bool* done, bool lead, P, S...) const {
    constexpr std::size_t p = P::value;
    // The outputs' shapes were checked (run).
    const gradient_kind kinds[] = {std::get<S::value>(parts).kind()...};
    const auto& g0 = std::get<std::tuple_element_t<0, std::tuple<S...>>::value>(parts);
    using T0 = typename detail::node_t<decltype(g0.adjoint)>::value_type;
    constexpr std::size_t RO = std::tuple_size_v<std::remove_cvref_t<decltype(g0.out_shape)>>;
    const auto partial = [&](bool store, const auto& rows_out, const auto& e) {
      return detail::column_partials(store, rows_out, e, std::get<S::value>(parts).adjoint...);
    };
    auto r = [&] {
      if constexpr (p == none) {
        using Sp = typename std::remove_cvref_t<
            decltype(std::get<std::tuple_element_t<0, std::tuple<S...>>::value>(outs))>::space;
        return partial(false, view<T0, RO, Sp>(nullptr, g0.out_shape), detail::convert<T0>(0.0f));
      } else {
        // One kernel whether or not the row output is written: without it,
        // a view of the row output's type and the adjoint's shape, unread.
        const auto& g = std::get<p>(parts);
        const auto o = detail::autodiff::lift_view<RO>(std::get<p>(outs));
        using V = std::remove_const_t<decltype(o)>;
        return partial(lead, lead ? o : V(nullptr, g.out_shape), g.adjoint);
      }
    }();
    if constexpr (p != none) done[p] = lead;
    ((done[S::value] = true), ...);
    int kernels = r.info.kernels;
    constexpr bool pair = sizeof...(S) == 2;
    if (pair && kinds[0] == gradient_kind::column_sums && kinds[sizeof...(S) - 1] == gradient_kind::column_sums) {
      // Both column sums in one kernel, as layer_norm_backward.
      if constexpr (pair)
        kernels += detail::finish_column_sums(
            r.partials, detail::autodiff::last_axis_view(std::get<S::value>(outs))...);
    } else {
      index_t k = 0;
      ((kernels += detail::autodiff::finish_sum(kinds[k], std::get<S::value>(outs), r.partials, k), ++k), ...);
    }
    gi.rows = r.info.rows;
    gi.kernels += kernels;
    gi.column_sum_groups += 1;
  }
};

namespace detail::autodiff {
template <class F>
decltype(auto) body_of(const F& f) {
  if constexpr (requires { f.f; })
    return (f.f);
  else
    return (f);
}

// A tensor given to with_saved: its leaf, or no_saved for loom::skip.
template <class X>
auto saved_leaf(const X& x) {
  if constexpr (std::is_same_v<X, skip_t>)
    return no_saved{};
  else
    return as_node(x);
}

// The gradients of inputs I... of layer f at args (the last is dy), reading
// the values loom::saved<K> names from the K-th tensor of `saved` (a tuple of
// leaves, no_saved where none is given).
template <class F, class Saved, std::size_t... I>
struct grad_fn {
  F f;
  Saved saved;

  template <operand... X>
  auto operator()(const X&... x) const {
    static_assert(sizeof...(X) >= 2, "loom: grad: call with the layer's inputs and then the output's gradient dy");
    return call(std::forward_as_tuple(x...), std::make_index_sequence<sizeof...(X) - 1>{});
  }

  //! The same gradients, reading the value the layer names loom::saved<K>
  //! from the K-th tensor (or not, for loom::skip) instead of computing it.
  template <class... T>
  auto with_saved(const T&... t) const {
    static_assert(std::tuple_size_v<Saved> == 0, "loom: grad: with_saved is given once");
    static_assert(sizeof...(T) > 0, "loom: grad: with_saved takes one tensor (or loom::skip) per saved value");
    static_assert(((expression<T> || std::is_same_v<T, skip_t>) && ...),
                  "loom: grad: with_saved takes tensors or views (or loom::skip)");
    auto leaves = std::make_tuple(saved_leaf(t)...);
    return grad_fn<F, decltype(leaves), I...>{f, leaves};
  }

 private:
  static constexpr bool has_saved = std::tuple_size_v<Saved> > 0;
  template <std::size_t K, class N>
  static auto mark(const N& n) {
    // With saved values, every floating input is marked, so that a saved
    // value's copies are told apart from other subtrees by their types.
    if constexpr (((K == I) || ...) || (has_saved && is_floating_v<typename N::value_type>))
      return input_node<K, N>(n);
    else
      return n;
  }
  // The saved tensors' bindings to the operand types of their marks in the
  // forward tree y; each is checked against its value's shape.
  template <class Y, std::size_t... K>
  auto bindings(const Y& y, std::index_sequence<K...>) const {
    return std::make_tuple(bind_saved<K>(y)...);
  }
  template <std::size_t K, class Y>
  auto bind_saved(const Y& y) const {
    using Leaf = std::remove_cvref_t<std::tuple_element_t<K, Saved>>;
    if constexpr (std::is_same_v<Leaf, no_saved>) {
      return no_saved{};
    } else {
      using List = saved_operands_t<K, Y>;
      static_assert(List::size > 0,
                    "loom: grad: with_saved gives a tensor for loom::saved<K> (K its position, counted from 0) but "
                    "the layer names no value loom::saved<K>");
      static_assert(std::is_same_v<typename Leaf::space, typename Y::space>,
                    "loom: grad: a saved tensor must be in the memory space of the layer's inputs");
      static_assert(Leaf::rank == std::remove_cvref_t<decltype(find_node<is_saved<K>::template test>(y))>::rank,
                    "loom: grad: a saved tensor must have the rank of the value it stands for (a row reduction "
                    "of [..., C] has shape [..., 1])");
      const auto& leaf = std::get<K>(saved);
      check_saved_shape(find_node<is_saved<K>::template test>(y), leaf);
      return saved_binding<List, Leaf>{leaf};
    }
  }
  template <class N, class Bs>
  static auto with_bindings(const N& n, const Bs& bs) {
    if constexpr (std::is_same_v<N, no_grad>)
      return n;
    else if constexpr (is_scatter<N>) {
      const auto node = with_bindings(n.node, bs);
      const auto a = with_bindings(n.adjoint, bs);
      return scatter_adjoint<std::remove_cvref_t<decltype(node)>, std::remove_cvref_t<decltype(a)>>{node, a};
    } else
      return std::apply([&](const auto&... b) { return replace_saved(n, b...); }, bs);
  }
  template <class Args, std::size_t... K>
  auto call(const Args& args, std::index_sequence<K...>) const {
    constexpr std::size_t n = sizeof...(K);
    static_assert(((I < n) && ...), "loom: grad: an input position is past the layer's inputs");
    (check_input<K, std::remove_cvref_t<std::tuple_element_t<K, Args>>>(), ...);
    const auto forward = body_of(f)(mark<K>(as_node(std::get<K>(args)))...);
    using Y = std::remove_cvref_t<decltype(forward)>;
    static_assert(is_node<Y>, "loom: grad: the layer must return an expression");
    static_assert(Y::rank >= 1, "loom: grad: the layer's output needs a rank of 1 or more");
    const auto y = tag_rows<forward_ids, 0>(forward, next_derivation()).node;
    const auto bs = bindings(y, std::make_index_sequence<std::tuple_size_v<Saved>>{});
    const auto dy = as_node(std::get<n>(args));
    using D = std::remove_cvref_t<decltype(dy)>;
    static_assert(D::rank == Y::rank, "loom: grad: dy must have the layer output's rank");
    const auto out_shape = y.extents();
    if (dy.extents() != out_shape)
      throw shape_error("loom: grad: dy has shape " + shape_string(dy.extents()) + " but the layer's output has shape " +
                        shape_string(out_shape));
    const auto one = [&](auto i) {
      constexpr std::size_t k = decltype(i)::value;
      const auto adj = [&] {
        if constexpr (has_saved)
          return with_bindings(adjoint<k>(y, dy), bs);
        else
          return adjoint<k>(y, dy);
      }();
      auto plain = [&] {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(adj)>, no_grad>)
          return adj;
        else
          return unmark(adj);
      }();
      const auto in = as_node(std::get<k>(args));
      using G = input_gradient<decltype(plain), Y::rank, decltype(in)::rank>;
      static_assert(decltype(in)::rank <= Y::rank, "loom: grad: an input has a higher rank than the layer's output");
      // The adjoint's own shape: the output's, or more where the layer
      // reduces (a layer ending in row_max(x) gives x's rows an adjoint).
      if constexpr (std::is_same_v<decltype(plain), no_grad>)
        return G{plain, out_shape, in.extents()};
      else
        return G{plain, plain.extents(), in.extents()};
    };
    if constexpr (sizeof...(I) == 1)
      return one(std::integral_constant<std::size_t, I...>{});
    else
      return gradients<decltype(one(std::integral_constant<std::size_t, I>{}))...>{
          std::make_tuple(one(std::integral_constant<std::size_t, I>{})...)};
  }
  template <std::size_t K, class X>
  static constexpr void check_input() {
    if constexpr (((K == I) || ...)) {
      static_assert(expression<X>, "loom: grad: a C++ scalar argument has no gradient; pass it as a rank-0 tensor");
      if constexpr (expression<X>)
        static_assert(is_floating_v<typename node_t<X>::value_type>,
                      "loom: grad: an integer or bool input has no gradient; ask only for floating inputs "
                      "(loom::grad<I...>(layer))");
    }
  }
};

template <class F, class Saved>
struct grad_all {
  F f;
  Saved saved;
  template <operand... X>
  auto operator()(const X&... x) const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return grad_fn<F, Saved, I...>{f, saved}(x...);
    }(std::make_index_sequence<sizeof...(X) - 1>{});
  }
  //! As grad_fn::with_saved.
  template <class... T>
  auto with_saved(const T&... t) const {
    static_assert(std::tuple_size_v<Saved> == 0, "loom: grad: with_saved is given once");
    auto leaves = grad_fn<F, std::tuple<>>{f, {}}.with_saved(t...).saved;
    return grad_all<F, decltype(leaves)>{f, leaves};
  }
};

//! The forward value loom::saved<K> names in layer f at args, as an
//! expression: taken from the layer's own call, so that its row reductions
//! have the types of those in `f(args...)` (an assignment holding both, such
//! as assign_with_row_stat, computes each once per row).
template <std::size_t K, class F>
struct saved_value_fn {
  F f;
  template <operand... X>
  auto operator()(const X&... x) const {
    const auto forward = [&] {
      if constexpr (requires { f.f; })
        return f(x...);
      else
        return f(as_node(x)...);
    }();
    using Y = std::remove_cvref_t<decltype(forward)>;
    static_assert(tree_any_v<Y, is_saved<K>::template test>, "loom: saved_value: the layer names no value loom::saved<K>");
    const auto e = child<0>(find_node<is_saved<K>::template test>(forward));
    return e;
  }
};
}  // namespace detail::autodiff

//! The gradients of a layer (loom::layer, or any callable from expressions
//! to an expression) with respect to its inputs at positions I...:
//! `loom::grad<0, 1>(layer)(x, w, dy)` gives the gradients of x and w for
//! the output gradient dy, lazily. One position gives one input_gradient
//! (`dx = loom::grad<0>(layer)(x, w, dy);`); several give a gradients object
//! (`.into(dx, dw)`). Without positions, every input.
//! Example:
//!   constexpr auto rms = loom::layer([](auto x, auto w) { return x * rsqrt(row_mean(x * x) + 1e-6f) * w; });
//!   loom::grad<0, 1>(rms)(x, w, dy).into(dx, dw);  // 2 kernels
template <std::size_t... I, class F>
[[nodiscard]] constexpr auto grad(const F& layer) {
  if constexpr (sizeof...(I) == 0)
    return detail::autodiff::grad_all<F, std::tuple<>>{layer, {}};
  else
    return detail::autodiff::grad_fn<F, std::tuple<>, I...>{layer, {}};
}

//! The value that layer names loom::saved<K> (docs/08_gradients.md), as an
//! expression of the layer's inputs: `m = loom::saved_value<0>(layer)(x);`
//! computes what the backward reads with
//! `loom::grad<...>(layer).with_saved(m, ...)`.
template <std::size_t K, class F>
[[nodiscard]] constexpr auto saved_value(const F& layer) {
  return detail::autodiff::saved_value_fn<K, F>{layer};
}
}  // namespace loom
