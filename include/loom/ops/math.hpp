// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/math.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"

namespace loom {
namespace fn {
// Floating-point functions: integer and bool inputs are computed in float32
// (PyTorch's rule); half and bf16 in float.
// Each states its derivative (loom::grad, docs/08_gradients.md): `derivative`
// gives d f / d x at x.
#define LOOM_FLOAT_FN(name, body, slope)   \
  struct name {                            \
    static constexpr bool floating = true; \
    template <class T>                     \
    LOOM_HD T operator()(T x) const {      \
      return body;                         \
    }                                      \
    template <int, class T>                \
    LOOM_HD T derivative(T x) const {      \
      return slope;                        \
    }                                      \
  };
LOOM_FLOAT_FN(exp2, math::exp2(x), math::exp2(x) * T(0.69314718055994530942))
LOOM_FLOAT_FN(log, math::log(x), T(1) / x)
LOOM_FLOAT_FN(log1p, math::log1p(x), T(1) / (T(1) + x))
LOOM_FLOAT_FN(log2, math::log2(x), T(1) / (x * T(0.69314718055994530942)))
LOOM_FLOAT_FN(sqrt, math::sqrt(x), T(0.5) / math::sqrt(x))
LOOM_FLOAT_FN(rsqrt, math::rsqrt(x), T(-0.5) * math::rsqrt(x) / x)
LOOM_FLOAT_FN(sin, math::sin(x), math::cos(x))
LOOM_FLOAT_FN(cos, math::cos(x), -math::sin(x))
LOOM_FLOAT_FN(tanh, math::tanh(x), T(1) - math::tanh(x) * math::tanh(x))
LOOM_FLOAT_FN(erf, math::erf(x), T(1.12837916709551257390) * math::exp(-x * x))
#undef LOOM_FLOAT_FN

//! e^x. Its derivative is its own value: the rule multiplies the adjoint by
//! the node itself, so a gradient holds the same `exp(...)` subtree as the
//! forward, which the row executor computes once per row and keeps
//! (docs/04_layers.md), instead of an exp of its own.
struct exp {
  static constexpr bool floating = true;
  template <class T>
  LOOM_HD T operator()(T x) const {
    return math::exp(x);
  }
  template <std::size_t I, class Y, class A>
  static auto grad(const Y& y, const A& a) {
    return a * y;
  }
};

//! |x|. Derivative: sign(x), 0 at 0 (as PyTorch).
struct abs {
  template <int, class T>
  LOOM_HD T derivative(T x) const {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
  template <class T>
  LOOM_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return math::fabs(x);
    else if constexpr (std::is_same_v<T, bool> || std::is_unsigned_v<T>)
      return x;
    else
      return x < 0 ? static_cast<T>(detail::wrapping_t<T>(0) - static_cast<detail::wrapping_t<T>>(x)) : x;
  }
};
//! -1, 0 or 1; NaN gives NaN (as NumPy; PyTorch currently gives 0). No
//! gradient flows through it (its derivative is 0 where it exists).
struct sign {
  static constexpr bool piecewise_constant = true;
  template <class T>
  LOOM_HD T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (x != x) return x;
      return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    } else {
      return static_cast<T>((T(0) < x) - (x < T(0)));
    }
  }
};
//! The identity, through which no gradient flows: loom::grad treats its
//! operand as a constant (as JAX's lax.stop_gradient and PyTorch's detach).
struct stop_gradient {
  static constexpr bool piecewise_constant = true;
  template <class T>
  LOOM_HD T operator()(T x) const {
    return x;
  }
};
#define LOOM_ROUNDING_FN(name, call)                  \
  struct name {                                       \
    static constexpr bool piecewise_constant = true;  \
    template <class T>                                \
    LOOM_HD T operator()(T x) const {                 \
      if constexpr (std::is_floating_point_v<T>)      \
        return math::call(x);                    \
      else                                            \
        return x;                                     \
    }                                                 \
  };
LOOM_ROUNDING_FN(floor, floor)
LOOM_ROUNDING_FN(ceil, ceil)
//! Rounds half to even, like torch.round.
LOOM_ROUNDING_FN(round, rint)
#undef LOOM_ROUNDING_FN

//! a ** b. Integers stay integers; a negative integer exponent gives 0 unless
//! |a| == 1 (PyTorch raises instead). Derivatives as PyTorch's: d/da is 0
//! where b == 0; d/db is 0 where a == 0 and b >= 0.
struct pow {
  //! Takes the wide copies of the host's loops (core/simd/dispatch.hpp), as `floating` ops do.
  static constexpr bool vector_math = true;
  template <int I, class T>
  LOOM_HD T derivative(T a, T b) const {
    if constexpr (I == 0)
      return b == T(0) ? T(0) : b * math::pow(a, b - T(1));
    else
      return (a == T(0) && b >= T(0)) ? T(0) : math::pow(a, b) * math::log(a);
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return math::pow(a, b);
    } else if constexpr (std::is_same_v<T, bool>) {
      return a || !b;
    } else {
      if (b < 0) return static_cast<T>(a == 1 ? 1 : (a == -1 ? ((b % 2) ? -1 : 1) : 0));
      using W = detail::wrapping_t<T>;  // wraps in T, as the other integer ops
      W r = 1, base = static_cast<W>(a);
      for (T e = b; e > 0; e = static_cast<T>(e >> 1)) {
        if (e & 1) r = static_cast<W>(r * base);
        base = static_cast<W>(base * base);
      }
      return static_cast<T>(r);
    }
  }
};
//! The smaller of a and b; NaN if either is NaN (torch.minimum). A tie
//! sends half the gradient to each operand (as PyTorch).
struct minimum {
  template <int I, class T>
  LOOM_HD T derivative(T a, T b) const {
    const T mine = I == 0 ? a : b, other = I == 0 ? b : a;
    return mine < other ? T(1) : (mine == other ? T(0.5) : T(0));
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (a != a || b != b) return a + b;
    return b < a ? b : a;
  }
};
//! The larger of a and b; NaN if either is NaN (torch.maximum). A tie
//! sends half the gradient to each operand (as PyTorch).
struct maximum {
  template <int I, class T>
  LOOM_HD T derivative(T a, T b) const {
    const T mine = I == 0 ? a : b, other = I == 0 ? b : a;
    return mine > other ? T(1) : (mine == other ? T(0.5) : T(0));
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (a != a || b != b) return a + b;
    return a < b ? b : a;
  }
};
//! min(max(x, lo), hi), NaN-propagating (torch.clamp). The gradient goes
//! to x where lo <= x <= hi, to lo where x < lo, to hi where x > hi (as PyTorch).
struct clamp {
  template <int I, class T>
  LOOM_HD T derivative(T x, T lo, T hi) const {
    if constexpr (I == 0)
      return (x >= lo && x <= hi) ? T(1) : T(0);
    else if constexpr (I == 1)
      return x < lo ? T(1) : T(0);
    else
      return x > hi ? T(1) : T(0);
  }
  template <class T>
  LOOM_HD T operator()(T x, T lo, T hi) const {
    return minimum{}(maximum{}(x, lo), hi);
  }
};
}  // namespace fn

#define LOOM_UNARY_FUNCTION(name)               \
  template <expression E>                       \
  [[nodiscard]] auto name(const E& e) {         \
    return map(fn::name{}, e);                  \
  }
//! Elementwise math, lazy; integer inputs compute in float32, half/bf16 in float.
//! Example: `y = exp(x - 1) + sqrt(abs(x));`
LOOM_UNARY_FUNCTION(exp)
LOOM_UNARY_FUNCTION(exp2)
LOOM_UNARY_FUNCTION(log)
LOOM_UNARY_FUNCTION(log1p)
LOOM_UNARY_FUNCTION(log2)
LOOM_UNARY_FUNCTION(sqrt)
LOOM_UNARY_FUNCTION(rsqrt)
LOOM_UNARY_FUNCTION(sin)
LOOM_UNARY_FUNCTION(cos)
LOOM_UNARY_FUNCTION(tanh)
LOOM_UNARY_FUNCTION(erf)
LOOM_UNARY_FUNCTION(abs)
LOOM_UNARY_FUNCTION(sign)
LOOM_UNARY_FUNCTION(floor)
LOOM_UNARY_FUNCTION(ceil)
LOOM_UNARY_FUNCTION(round)
//! e's values, as a constant to loom::grad: no gradient flows through it
//! (docs/08_gradients.md). The softmax family shifts by
//! `stop_gradient(row_max(x))`: the result does not depend on the shift, so
//! its gradient is exact and needs no pass for row_max's own rule.
//! Example: `auto e = exp(x - stop_gradient(row_max(x)));`
LOOM_UNARY_FUNCTION(stop_gradient)

#define LOOM_BINARY_FUNCTION(name, functor)              \
  template <operand A, operand B>                        \
    requires(expression<A> || expression<B>)             \
  [[nodiscard]] auto name(const A& a, const B& b) {      \
    return map(fn::functor{}, a, b);                     \
  }
//! Elementwise a ** b, lazy. Example: `y = pow(x, 2.0f);`
LOOM_BINARY_FUNCTION(pow, pow)
//! Elementwise NaN-propagating minimum and maximum, lazy (also spelled min/max).
LOOM_BINARY_FUNCTION(minimum, minimum)
LOOM_BINARY_FUNCTION(maximum, maximum)
LOOM_BINARY_FUNCTION(min, minimum)
LOOM_BINARY_FUNCTION(max, maximum)
#undef LOOM_BINARY_FUNCTION

//! Elementwise clamp to [lo, hi], lazy. Example: `y = clamp(x, -1.0f, 1.0f);`
template <operand E, operand L, operand H>
  requires(expression<E> || expression<L> || expression<H>)
[[nodiscard]] auto clamp(const E& x, const L& lo, const H& hi) {
  return map(fn::clamp{}, x, lo, hi);
}
}  // namespace loom
