// SPDX-License-Identifier: Apache-2.0
#pragma once

// The matmul node: the lazy product of two views, and how the traversal
// finds it in a tree (it has no expression children: cuBLASLt or the host
// GEMM reads its operands from memory).

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/tensor/view.hpp"

namespace loom {

//! Options of one matrix product.
//! Example: `y = matmul(x, w, {.allow_tf32 = true});`
struct matmul_options {
  //! float products may round their inputs to TF32 (10-bit mantissa) on Tensor
  //! Cores: several times faster, about 1e-3 relative error. Off by default, as
  //! in PyTorch. No effect on the host, on half/bf16 (always Tensor Cores, float
  //! accumulation) or on double.
  bool allow_tf32 = false;
};

//! The lazy product of two views: `[..., M, K] x [..., K, N] -> [..., M, N]`,
//! batch axes broadcast as in NumPy/torch.matmul. Not an elementwise node: the
//! assignment that contains it splits the work at it (see loom::matmul).
template <class T, std::size_t RA, std::size_t RB, class S>
struct matmul_node : detail::node_tag {
  using value_type = T;
  using space = S;
  static constexpr std::size_t rank = RA > RB ? RA : RB;
  view<const T, RA, S> a;
  view<const T, RB, S> b;
  matmul_options options;

  matmul_node(const view<const T, RA, S>& a_, const view<const T, RB, S>& b_, matmul_options o)
      : a(a_), b(b_), options(o) {}

  //! The result's shape; throws shape_error naming both operand shapes.
  shape<rank> extents() const {
    const auto& ea = a.extents();
    const auto& eb = b.extents();
    auto fail = [&](const std::string& why) {
      throw shape_error("loom: matmul of shapes " + shape_string(ea) + " and " + shape_string(eb) + ": " + why);
    };
    if (ea[RA - 1] != eb[RB - 2])
      fail("the inner extents differ (" + std::to_string(ea[RA - 1]) + " columns vs " + std::to_string(eb[RB - 2]) +
           " rows)");
    shape<rank> s{};
    for (std::size_t i = 0; i + 2 < rank; ++i) {
      const std::size_t back = rank - i;  // position counted from the end
      const index_t x = back <= RA ? ea[RA - back] : 1;
      const index_t y = back <= RB ? eb[RB - back] : 1;
      if (x != y && x != 1 && y != 1)
        fail("batch axis " + std::to_string(i) + " does not broadcast (" + std::to_string(x) + " vs " +
             std::to_string(y) + ")");
      s[i] = x == 1 ? y : x;
    }
    s[rank - 2] = ea[RA - 2];
    s[rank - 1] = eb[RB - 1];
    return s;
  }
};

//! The matrix product of two tensors or views, lazily: `[..., M, K] x
//! [..., K, N] -> [..., M, N]` with batch axes broadcast (torch.matmul for
//! rank >= 2; make a vector a matrix with unsqueeze). float, double, half and
//! bf16; half/bf16 accumulate in float. Transposed and strided views enter
//! cuBLASLt as layouts, never copied. Assignment decides the work:
//!  - `y = act(alpha * matmul(a, b) + beta * c + bias)` (every part optional;
//!    act is relu or gelu(..., approximate::tanh); bias a row of y's last
//!    extent, c laid out like y): one cuBLASLt call, the rest in its epilogue;
//!  - any other expression with one matmul: the GEMM into y, then one fused
//!    elementwise kernel (two launches, no temporary);
//!  loom::explain(y, e) tells which, before running; loom::last_matmul() after.
//! Throws shape_error naming both shapes when they do not match.
//! Example: `y = gelu(matmul(x, w) + b, approximate::tanh);`
template <tensor_like A, tensor_like B>
[[nodiscard]] auto matmul(const A& a, const B& b, matmul_options options = {}) {
  auto va = detail::as_view(a);
  auto vb = detail::as_view(b);
  using VA = decltype(va);
  using VB = decltype(vb);
  using T = typename VA::value_type;
  static_assert(VA::rank >= 2 && VB::rank >= 2,
                "loom: matmul needs operands of rank 2 or more; make a vector a matrix with .unsqueeze(0) or "
                ".unsqueeze(1)");
  static_assert(std::is_same_v<T, typename VB::value_type>,
                "loom: matmul needs operands of one element type; convert one first: "
                "loom::materialize(loom::cast<T>(x))");
  static_assert(
      std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> || std::is_same_v<T, bf16>,
      "loom: matmul supports float, double, half and bf16 operands");
  static_assert(std::is_same_v<typename VA::space, typename VB::space>,
                "loom: matmul of a host and a device tensor; copy one side first with loom::to_device(x) or "
                "loom::to_host(x)");
  using S = typename VA::space;
  matmul_node<T, VA::rank, VB::rank, S> n(view<const T, VA::rank, S>(va), view<const T, VB::rank, S>(vb), options);
  (void)n.extents();  // shape errors at the call, where the user wrote the product
  return n;
}

namespace detail {
// Whether an operand of matmul is, or holds, a loom::layer's argument.
template <class X>
constexpr bool holds_layer_argument() {
  if constexpr (is_node<X>)
    return tree_any_v<X, is_layer_argument>;
  else
    return false;
}
}  // namespace detail

//! Operands that are expressions rather than tensors do not compile: cuBLASLt
//! reads memory. Inside a loom::layer (or a layer under loom::grad) the
//! message says how to split the layer at the product.
template <operand A, operand B>
  requires(!(tensor_like<A> && tensor_like<B>))
auto matmul(const A&, const B&, matmul_options = {}) {
  constexpr bool in_layer = detail::holds_layer_argument<A>() || detail::holds_layer_argument<B>();
  static_assert(!in_layer,
                "loom: matmul inside a loom::layer: a layer is one fused kernel and loom::grad differentiates "
                "elementwise and row expressions, while a matmul is a GEMM of its own; split the layer at the "
                "product into the steps of a loom::model, which derives the backward of all of them: "
                "`loom::step(h) = loom::linear(x, w, b, loom::matmul_activation::relu)` for the product with its "
                "bias and activation (one GEMM with its epilogue), then `loom::step(y) = loom::apply(my_layer, h, "
                "...)` for the rest (loom/model/model.hpp, docs/13_models.md)");
  static_assert(in_layer || detail::always_false<A, B>,
                "loom: matmul operands must be tensors or views; evaluate an expression first: "
                "loom::matmul(loom::materialize(x * 2), w)");
}

namespace detail {
// A matmul node has no expression children: its operands are views that
// cuBLASLt (or the host GEMM) reads.
template <class T, std::size_t RA, std::size_t RB, class S>
struct children_of<matmul_node<T, RA, RB, S>> : no_children<matmul_node<T, RA, RB, S>> {};
template <class N>
struct is_matmul : std::false_type {};
template <class T, std::size_t RA, std::size_t RB, class S>
struct is_matmul<matmul_node<T, RA, RB, S>> : std::true_type {};
template <class N>
struct broadcasts_matmul : std::false_type {};
template <class E, std::size_t R>
struct broadcasts_matmul<broadcast_node<E, R>> : std::bool_constant<tree_any_v<E, is_matmul>> {};

// How many matmul nodes a tree holds (0 for an operand that is not a node:
// a tensor or view), and whether one sits under a broadcast.
template <class N>
struct matmul_count : std::integral_constant<int, 0> {};
template <class N>
  requires is_node<N>
struct matmul_count<N> : std::integral_constant<int, static_cast<int>(tree_sum_v<N, is_matmul>)> {};
template <class N>
inline constexpr bool matmul_broadcast = tree_any_v<N, broadcasts_matmul>;
}  // namespace detail

//! Satisfied by expressions whose tree contains a matmul node.
template <class E>
concept contains_matmul = detail::matmul_count<std::remove_cvref_t<E>>::value > 0;

namespace detail {
template <class N>
const auto& find_matmul(const N& n) {
  return find_node<is_matmul>(n);
}

// The tree with its matmul node replaced by a leaf (the output, or a zero).
template <class Leaf, class N>
auto replace_matmul(const N& n, const Leaf& leaf) {
  return transform(n, [&](const auto& m) {
    if constexpr (is_matmul<std::remove_cvref_t<decltype(m)>>::value)
      return leaf;
    else
      return m;
  });
}

}  // namespace detail
}  // namespace loom
