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
#include "loom/exec/rows/colsum.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/row_nodes.hpp"
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
template <std::size_t RO>
[[noreturn]] LOOM_NOINLINE void throw_adjoint_shapes(const shape<RO>& a, const shape<RO>& b) {
  throw shape_error("loom: grad: the adjoints of two inputs asked for together have shapes " + shape_string(a) +
                    " and " + shape_string(b) +
                    ", which one row kernel does not take; ask for their gradients in separate calls");
}
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
  //! shape, or loom::skip) in one row kernel: the gradients of inputs of the
  //! output's rank as its row outputs (each written element by element, or
  //! as row sums for an input [..., 1], told at launch), and the first two
  //! gradients of rank-1 inputs of lower rank (weights [C] or [1]) as its
  //! per-block column sums, then the kernel that adds the partial sums (2
  //! kernels in all, as layer_norm_backward; a whole sum adds one). The
  //! others (a scalar's whole sum, a third weight, an input of rank 2 or
  //! more under an output of higher rank, a scatter) take their own
  //! (gradient_kind). Every output's shape and every gradient's
  //! kind are checked first. Returns what ran (also loom::last_grad()).
  template <class... Out>
  grad_info into(Out&&... outs) const {
    static_assert(sizeof...(Out) == sizeof...(G),
                  "loom: grad: into() takes one output (or loom::skip) per input asked for");
    grad_info gi;
    run(gi, std::make_tuple(detail::autodiff::output_of(outs)...), std::index_sequence_for<G...>{});
    return detail::last_slot<grad_info>() = gi;
  }

 private:
  // A gradient the shared kernel may take (not a scatter, which takes its own).
  template <class Outs, std::size_t K>
  static constexpr bool wanted =
      !std::is_same_v<std::tuple_element_t<K, Outs>, detail::autodiff::skip_t> &&
      detail::autodiff::has_adjoint<std::tuple_element_t<K, std::tuple<G...>>> &&
      !detail::autodiff::is_scatter<decltype(std::tuple_element_t<K, std::tuple<G...>>::adjoint)>;

  // The shared kernel's plan, fixed at compile time so that one row kernel
  // is compiled for it: its row outputs are the wanted gradients of inputs
  // of the adjoint's rank, its column sums the first two of rank-1 inputs of
  // lower rank (weights [C], broadcast over the rows).
  template <std::size_t K>
  using part_t = std::tuple_element_t<K, std::tuple<G...>>;
  struct plan_t {
    std::size_t rows[sizeof...(G)] = {};
    std::size_t sums[sizeof...(G)] = {};
    std::size_t n_rows = 0, n_sums = 0;
    constexpr bool has(std::size_t k) const {
      for (std::size_t i = 0; i != n_rows; ++i)
        if (rows[i] == k) return true;
      for (std::size_t i = 0; i != n_sums; ++i)
        if (sums[i] == k) return true;
      return false;
    }
  };
  template <class Outs, std::size_t... K>
  static constexpr plan_t make_plan(std::index_sequence<K...>) {
    const bool row[] = {(wanted<Outs, K> && part_t<K>::in_rank == part_t<K>::out_rank)...};
    const bool sum[] = {(wanted<Outs, K> && part_t<K>::in_rank == 1 && part_t<K>::in_rank < part_t<K>::out_rank)...};
    plan_t p;
    for (std::size_t k = 0; k != sizeof...(K); ++k) {
      if (row[k]) p.rows[p.n_rows++] = k;
      if (sum[k] && p.n_sums < 2) p.sums[p.n_sums++] = k;
    }
    return p;
  }
  template <class Outs>
  static constexpr plan_t plan = make_plan<Outs>(std::index_sequence_for<G...>{});

  template <class Outs, std::size_t... K>
  void run(grad_info& gi, const Outs& outs, std::index_sequence<K...>) const {
    constexpr plan_t p = plan<Outs>;
    // Every output's shape and every gradient's kind first: a bad one throws
    // before anything is written.
    (check<K>(std::get<K>(outs)), ...);
    if constexpr (p.n_rows + p.n_sums > 0)
      [&]<std::size_t... R>(std::index_sequence<R...>) {
        [&]<std::size_t... Q>(std::index_sequence<Q...>) {
          shared(gi, outs, std::index_sequence<plan<Outs>.rows[R]...>{}, std::index_sequence<plan<Outs>.sums[Q]...>{});
        }(std::make_index_sequence<p.n_sums>{});
      }(std::make_index_sequence<p.n_rows>{});
    (rest<K, p.has(K)>(gi, std::get<K>(outs)), ...);
  }
  template <std::size_t K, class V>
  void check(const V& v) const {
    if constexpr (!std::is_same_v<V, detail::autodiff::skip_t>) {
      detail::autodiff::check_gradient_output(std::get<K>(parts), v);
      (void)std::get<K>(parts).kind();
    }
  }
  // A gradient the shared kernel does not take: its own kernels.
  template <std::size_t K, bool Shared, class V>
  void rest(grad_info& gi, const V& v) const {
    if constexpr (!std::is_same_v<V, detail::autodiff::skip_t> && !Shared)
      detail::autodiff::assign_one(std::get<K>(parts), v, gi);
  }
  // The shared kernel: row outputs R..., column sums Q...; then the sums'
  // second kernel. Its rows have the adjoints' shape; an adjoint of shape
  // [..., 1] under longer rows (a layer ending in a row reduction, such as
  // cross-entropy rows with a per-row weight) is constant along them and
  // its gradient (same-shape) is stored once per row.
  template <class Outs, std::size_t... R, std::size_t... Q>
  void shared(grad_info& gi, const Outs& outs, std::index_sequence<R...>, std::index_sequence<Q...>) const {
    constexpr std::size_t ids[] = {R..., Q...};
    constexpr std::size_t RO = part_t<ids[0]>::out_rank;
    shape<RO> rows = std::get<ids[0]>(parts).out_shape;
    [[maybe_unused]] const auto per_row = [&](const shape<RO>& a, const shape<RO>& b) {
      for (std::size_t d = 0; d + 1 < RO; ++d)
        if (a[d] != b[d]) return false;
      return a[RO - 1] == 1;
    };
    [[maybe_unused]] const auto widen = [&](const auto& g) {
      if (per_row(rows, g.out_shape)) rows = g.out_shape;
    };
    (widen(std::get<R>(parts)), ...);
    [[maybe_unused]] const auto fits = [&](const auto& g, bool row_output) {
      if (g.out_shape != rows && !(row_output && per_row(g.out_shape, rows)))
        detail::autodiff::throw_adjoint_shapes(rows, g.out_shape);
    };
    (fits(std::get<R>(parts), true), ...);
    (fits(std::get<Q>(parts), false), ...);
    [[maybe_unused]] const auto row_out = [&](const auto& g, const auto& v) {
      using W = detail::rows::row_write;
      const auto o = detail::autodiff::lift_view<RO>(v);
      const W w = g.out_shape != rows ? W::first : g.kind() == gradient_kind::same_shape ? W::each : W::sum;
      return detail::row_output<std::remove_const_t<decltype(o)>>{o, w};
    };
    auto r = detail::assign_rows<true>("grad", rows, std::make_tuple(row_out(std::get<R>(parts), std::get<R>(outs))...),
                                       std::make_tuple(std::get<R>(parts).adjoint...), std::get<Q>(parts).adjoint...);
    int kernels = r.info.kernels;
    if constexpr (sizeof...(Q) > 0) {
      const gradient_kind kinds[] = {std::get<Q>(parts).kind()...};
      constexpr bool pair = sizeof...(Q) == 2;
      if (pair && kinds[0] == gradient_kind::column_sums && kinds[sizeof...(Q) - 1] == gradient_kind::column_sums) {
        // Both column sums in one kernel, as layer_norm_backward.
        if constexpr (pair)
          kernels += detail::finish_column_sums(r.partials,
                                                detail::autodiff::last_axis_view(std::get<Q>(outs))...);
      } else {
        index_t k = 0;
        ((kernels += detail::autodiff::finish_sum(kinds[k], std::get<Q>(outs), r.partials, k), ++k), ...);
      }
      gi.column_sum_groups += 1;
    }
    gi.rows = r.info.rows;
    gi.kernels += kernels;
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
