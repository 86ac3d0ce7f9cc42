// SPDX-License-Identifier: Apache-2.0
#pragma once

// Attention's score_mod and mask kinds (docs/15_attention.md), and the dual
// numbers that derive a score_mod's derivatives: the backward evaluates the
// user's score_mod once on a dual number (value, derivative), so d f / d s
// and d f / d extra[h] come from the functions the lambda calls, each through
// the derivative rule loom states beside the op (ops/math.hpp).

#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/math.hpp"
#include "loom/core/shape.hpp"
#include "loom/ops/math.hpp"

namespace loom {
namespace detail::attn {
//! A forward-mode dual number: v + d ε with ε² = 0.
template <class T>
struct dual {
  T v{}, d{};
};
template <class X>
inline constexpr bool is_dual = false;
template <class T>
inline constexpr bool is_dual<dual<T>> = true;
template <class U>
concept plain_number = std::is_arithmetic_v<U>;

template <class T>
constexpr dual<T> operator-(dual<T> a) { return {-a.v, -a.d}; }
template <class T>
constexpr dual<T> operator+(dual<T> a, dual<T> b) { return {a.v + b.v, a.d + b.d}; }
template <class T>
constexpr dual<T> operator-(dual<T> a, dual<T> b) { return {a.v - b.v, a.d - b.d}; }
template <class T>
constexpr dual<T> operator*(dual<T> a, dual<T> b) { return {a.v * b.v, a.d * b.v + a.v * b.d}; }
template <class T>
constexpr dual<T> operator/(dual<T> a, dual<T> b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
template <class T, plain_number U>
constexpr dual<T> operator+(dual<T> a, U b) { return {a.v + T(b), a.d}; }
template <class T, plain_number U>
constexpr dual<T> operator+(U a, dual<T> b) { return {T(a) + b.v, b.d}; }
template <class T, plain_number U>
constexpr dual<T> operator-(dual<T> a, U b) { return {a.v - T(b), a.d}; }
template <class T, plain_number U>
constexpr dual<T> operator-(U a, dual<T> b) { return {T(a) - b.v, -b.d}; }
template <class T, plain_number U>
constexpr dual<T> operator*(dual<T> a, U b) { return {a.v * T(b), a.d * T(b)}; }
template <class T, plain_number U>
constexpr dual<T> operator*(U a, dual<T> b) { return {T(a) * b.v, T(a) * b.d}; }
template <class T, plain_number U>
constexpr dual<T> operator/(dual<T> a, U b) { return {a.v / T(b), a.d / T(b)}; }
template <class T, plain_number U>
constexpr dual<T> operator/(U a, dual<T> b) { return {T(a) / b.v, -T(a) * b.d / (b.v * b.v)}; }
//! The value and (derivative_of) the derivative part of a score_mod's result (a plain number
//! has derivative 0: it does not depend on the dual input).
template <class X>
constexpr auto value_of(X x) {
  if constexpr (is_dual<X>)
    return x.v;
  else
    return x;
}
// Comparisons look at the value (a branch of the score_mod is taken as in the forward).
template <class A, class B>
  requires(is_dual<A> || is_dual<B>)
constexpr bool operator<(A a, B b) { return value_of(a) < value_of(b); }
template <class A, class B>
  requires(is_dual<A> || is_dual<B>)
constexpr bool operator>(A a, B b) { return value_of(a) > value_of(b); }
template <class A, class B>
  requires(is_dual<A> || is_dual<B>)
constexpr bool operator<=(A a, B b) { return value_of(a) <= value_of(b); }
template <class A, class B>
  requires(is_dual<A> || is_dual<B>)
constexpr bool operator>=(A a, B b) { return value_of(a) >= value_of(b); }

template <class A, class X>
constexpr A derivative_of(X x) {
  if constexpr (is_dual<X>)
    return static_cast<A>(x.d);
  else
    return A(0);
}

// f(dual) through functor F's value and its derivative rule.
template <class F, class T>
constexpr dual<T> chain(dual<T> x) {
  return {F{}(x.v), F{}.template derivative<0>(x.v) * x.d};
}
}  // namespace detail::attn

namespace math {
// The scalar math of a score_mod on dual numbers (the backward's derivative).
#define LOOM_ATTN_DUAL_FN(name, functor)                                   \
  template <class T>                                                       \
  constexpr detail::attn::dual<T> name(detail::attn::dual<T> x) {          \
    return detail::attn::chain<fn::functor>(x);                            \
  }
LOOM_ATTN_DUAL_FN(tanh, tanh)
LOOM_ATTN_DUAL_FN(log, log)
LOOM_ATTN_DUAL_FN(log1p, log1p)
LOOM_ATTN_DUAL_FN(sqrt, sqrt)
LOOM_ATTN_DUAL_FN(rsqrt, rsqrt)
LOOM_ATTN_DUAL_FN(sin, sin)
LOOM_ATTN_DUAL_FN(cos, cos)
LOOM_ATTN_DUAL_FN(erf, erf)
LOOM_ATTN_DUAL_FN(exp2, exp2)
LOOM_ATTN_DUAL_FN(fabs, abs)
#undef LOOM_ATTN_DUAL_FN
//! e^x on a dual number (its derivative is its value).
template <class T>
constexpr detail::attn::dual<T> exp(detail::attn::dual<T> x) {
  const T e = math::exp(x.v);
  return {e, e * x.d};
}
}  // namespace math

//! A score function: f(s, b, h, q, kv, extra...) -> the modified score, for
//! the scaled score s, batch b, query head h, query row q and key row kv
//! (index_t), and the extra arguments of the call (each `x[h]`). Write it
//! with arithmetic and loom::math functions on s (the backward calls it with
//! a dual number in place of s to derive f').
//! Example: `constexpr auto cap = loom::score_mod([](auto s, auto...) { return 30.f * loom::math::tanh(s / 30.f); });`
template <class F>
struct score_mod_fn {
  F f;
};
template <class F>
[[nodiscard]] constexpr score_mod_fn<F> score_mod(F f) {
  return {f};
}
namespace detail::attn {
struct identity_score {
  template <class S, class... I>
  constexpr S operator()(S s, I...) const {
    return s;
  }
};
}  // namespace detail::attn
//! The identity score_mod (plain attention).
inline constexpr score_mod_fn<detail::attn::identity_score> no_score_mod{};

//! How a mask kind sees a tile of query rows [q0, q1) and key rows [k0, k1)
//! of batch b and query head h (`classify(b, h, q0, q1, k0, k1)`).
enum class tile_kind { empty, partial, full };

//! A mask from the user's predicate m(b, h, q, kv) -> bool (true: the key is
//! attended). Every tile is partial: the predicate runs on every element.
//! Example: `auto doc = loom::mask_mod([=](auto, auto, auto q, auto kv) { return doc_id[q] == doc_id[kv]; });`
template <class F>
struct mask_mod_fn {
  F f;
  constexpr bool operator()(index_t b, index_t h, index_t q, index_t kv) const { return static_cast<bool>(f(b, h, q, kv)); }
  static constexpr tile_kind classify(index_t, index_t, index_t, index_t, index_t, index_t) { return tile_kind::partial; }
};
template <class F>
[[nodiscard]] constexpr mask_mod_fn<F> mask_mod(F f) {
  return {f};
}

//! No mask: every tile is full.
struct no_mask_t {
  constexpr bool operator()(index_t, index_t, index_t, index_t) const { return true; }
  static constexpr tile_kind classify(index_t, index_t, index_t, index_t, index_t, index_t) { return tile_kind::full; }
};
inline constexpr no_mask_t no_mask{};

//! Causal mask, top-left aligned: query q attends keys kv <= q (also when
//! Sq != Skv). Tiles are classified analytically: those above the diagonal
//! are skipped, those below take no mask test.
struct causal_t {
  constexpr bool operator()(index_t, index_t, index_t q, index_t kv) const { return kv <= q; }
  static constexpr tile_kind classify(index_t, index_t, index_t q0, index_t q1, index_t k0, index_t k1) {
    if (q1 - 1 < k0) return tile_kind::empty;
    return k1 - 1 <= q0 ? tile_kind::full : tile_kind::partial;
  }
};
inline constexpr causal_t causal{};

//! Sliding-window causal mask: query q attends keys q - w < kv <= q (w keys,
//! itself included). Tiles classified analytically, as causal's.
struct sliding_window_t {
  index_t w = 1;
  constexpr bool operator()(index_t, index_t, index_t q, index_t kv) const { return kv <= q && q - kv < w; }
  constexpr tile_kind classify(index_t, index_t, index_t q0, index_t q1, index_t k0, index_t k1) const {
    if (q1 - 1 < k0 || q0 - (k1 - 1) >= w) return tile_kind::empty;
    return (k1 - 1 <= q0 && (q1 - 1) - k0 < w) ? tile_kind::full : tile_kind::partial;
  }
};
//! Example: `constexpr auto attn = loom::attention(loom::sliding_window(256));`
[[nodiscard]] constexpr sliding_window_t sliding_window(index_t w) { return {w}; }
}  // namespace loom
