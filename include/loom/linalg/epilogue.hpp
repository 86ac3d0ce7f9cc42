// SPDX-License-Identifier: Apache-2.0
#pragma once

// Epilogue matching: the root forms act(alpha * matmul + s0 * X0 + s1 * X1)
// that one cuBLASLt call computes, matched on the node types.

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
#include "loom/linalg/host_gemm.hpp"
#include "loom/linalg/node.hpp"
#include "loom/ops/activations.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::linalg {
template <class C>
double scalar_value(const C& v) {
  if constexpr (std::is_same_v<C, half> || std::is_same_v<C, bf16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

// The epilogue form act(alpha * M + s0 * X0 + s1 * X1), matched on the node
// types; the addends X are leaves of the output's type, broadcast to its shape.
template <class O, std::size_t RO, class S>
struct epilogue_match {
  double alpha = 1;
  int count = 0;
  view<const O, RO, S> addend[2];
  double scale[2] = {1, 1};
  matmul_activation act = matmul_activation::none;
  shape<RO> ext;
};

template <class N, class Match>
bool match_scaled(const N&, Match&) {
  return false;
}
template <class T, std::size_t RA, std::size_t RB, class S, class Match>
bool match_scaled(const matmul_node<T, RA, RB, S>&, Match&) {
  return true;
}
template <class C, class T, std::size_t RA, std::size_t RB, class S, class Match>
bool match_scaled(const map_node<fn::mul, scalar_node<C>, matmul_node<T, RA, RB, S>>& n, Match& m) {
  m.alpha *= scalar_value(get<0>(n.children).value);
  return true;
}
template <class C, class T, std::size_t RA, std::size_t RB, class S, class Match>
bool match_scaled(const map_node<fn::mul, matmul_node<T, RA, RB, S>, scalar_node<C>>& n, Match& m) {
  m.alpha *= scalar_value(get<1>(n.children).value);
  return true;
}

template <class N, class Match>
bool match_addend(const N&, Match&, double) {
  return false;
}
template <class T, std::size_t R, class S, class Tag, class O, std::size_t RO>
bool match_addend(const leaf_node<T, R, S, Tag>& l, epilogue_match<O, RO, S>& m, double s) {
  if constexpr (std::is_same_v<T, O> && R <= RO) {
    if (m.count == 2) return false;
    m.addend[m.count] = l.v.broadcast_to(m.ext);
    m.scale[m.count++] = s;
    return true;
  } else {
    return false;
  }
}
template <class C, class Operand, class Match>
bool match_addend(const map_node<fn::mul, scalar_node<C>, Operand>& n, Match& m, double s) {
  return match_addend(get<1>(n.children), m, s * scalar_value(get<0>(n.children).value));
}
template <class C, class Operand, class Match>
bool match_addend(const map_node<fn::mul, Operand, scalar_node<C>>& n, Match& m, double s) {
  return match_addend(get<0>(n.children), m, s * scalar_value(get<1>(n.children).value));
}

template <class N, class Match>
bool match_sum(const N& n, Match& m) {
  return match_scaled(n, m);
}
template <class A, class B, class Match>
bool match_sum(const map_node<fn::add, A, B>& n, Match& m) {
  if constexpr (matmul_count<A>::value > 0)
    return match_sum(get<0>(n.children), m) && match_addend(get<1>(n.children), m, 1.0);
  else
    return match_sum(get<1>(n.children), m) && match_addend(get<0>(n.children), m, 1.0);
}
template <class A, class B, class Match>
bool match_sum(const map_node<fn::sub, A, B>& n, Match& m) {
  if constexpr (matmul_count<A>::value > 0)
    return match_sum(get<0>(n.children), m) && match_addend(get<1>(n.children), m, -1.0);
  else
    return false;
}

template <class N, class Match>
bool match_root(const N& n, Match& m) {
  return match_sum(n, m);
}
template <class X, class Match>
bool match_root(const map_node<fn::relu, X>& n, Match& m) {
  m.act = matmul_activation::relu;
  return match_sum(get<0>(n.children), m);
}
template <class X, class Match>
bool match_root(const map_node<fn::gelu, X>& n, Match& m) {
  // cuBLASLt's GELU epilogue is the tanh form; exact GELU takes two kernels.
  if (!n.f.tanh_form) return false;
  m.act = matmul_activation::gelu_tanh;
  return match_sum(get<0>(n.children), m);
}

}  // namespace loom::detail::linalg
