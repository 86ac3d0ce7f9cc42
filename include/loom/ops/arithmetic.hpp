// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/math.hpp"
#include "loom/exec/assign.hpp"  // so that `y = x + 1` needs no other header
#include "loom/expr/expression.hpp"

namespace loom {
namespace fn {
// Each op states its derivative rule for loom::grad (docs/08_gradients.md):
// `grad<I>(y, a)` is the adjoint of operand I of node y given y's adjoint a.

//! a + b (integers wrap in their type, as PyTorch's do).
struct add {
  template <std::size_t I, class Y, class A>
  static auto grad(const Y&, const A& a) {
    return a;
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    using W = detail::wrapping_t<T>;
    return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
  }
};
//! a - b.
struct sub {
  template <std::size_t I, class Y, class A>
  static auto grad(const Y&, const A& a) {
    if constexpr (I == 0)
      return a;
    else
      return -a;
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    using W = detail::wrapping_t<T>;
    return static_cast<T>(static_cast<W>(a) - static_cast<W>(b));
  }
};
//! a * b.
struct mul {
  template <std::size_t I, class Y, class A>
  static auto grad(const Y& y, const A& a) {
    return a * detail::get<1 - I>(y.children);
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    using W = detail::wrapping_t<T>;
    return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
  }
};
//! True division: integer operands give float32, as in PyTorch.
struct div {
  static constexpr bool floating = true;
  //! d/da = 1 / b; d/db = -(a / b) / b.
  template <std::size_t I, class Y, class A>
  static auto grad(const Y& y, const A& a) {
    if constexpr (I == 0)
      return a / detail::get<1>(y.children);
    else
      return -(a * (detail::get<0>(y.children) / detail::get<1>(y.children))) / detail::get<1>(y.children);
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    return a / b;
  }
};
//! Python-style remainder: the result has the sign of the divisor (PyTorch's
//! remainder). Integer remainder by zero gives 0 (a kernel cannot raise).
struct mod {
  //! d/da = 1; d/db = -floor(a / b) (as PyTorch's remainder).
  template <int I, class T>
  LOOM_HD T derivative(T a, T b) const {
    if constexpr (I == 0)
      return T(1);
    else
      return -math::floor(a / b);
  }
  template <class T>
  LOOM_HD T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a && !b;
    } else if constexpr (std::is_integral_v<T>) {
      // b == -1 too: the lowest value % -1 overflows (and traps on x86).
      if (b == 0 || (std::is_signed_v<T> && b == static_cast<T>(-1))) return T(0);
      T r = static_cast<T>(a % b);
      if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    } else {
      T r = math::fmod(a, b);
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
      return r;
    }
  }
};
//! -a.
struct neg {
  template <std::size_t, class Y, class A>
  static auto grad(const Y&, const A& a) {
    return -a;
  }
  template <class T>
  LOOM_HD T operator()(T a) const {
    static_assert(!std::is_same_v<T, bool>, "loom: negation of a bool tensor; use logical_not (operator!)");
    if constexpr (std::is_integral_v<T>) {
      using W = detail::wrapping_t<T>;
      return static_cast<T>(W(0) - static_cast<W>(a));
    } else {
      return -a;  // -0.0 for 0.0, as IEEE negation
    }
  }
};
}  // namespace fn

#define LOOM_BINARY_OPERATOR(op, functor)                               \
  template <operand A, operand B>                                       \
    requires(expression<A> || expression<B>)                            \
  [[nodiscard]] auto operator op(const A& a, const B& b) {              \
    return map(fn::functor{}, a, b);                                    \
  }

//! Elementwise arithmetic with NumPy broadcasting and PyTorch promotion; lazy.
//! Example: `y = x * w + b;`
LOOM_BINARY_OPERATOR(+, add)
LOOM_BINARY_OPERATOR(-, sub)
LOOM_BINARY_OPERATOR(*, mul)
LOOM_BINARY_OPERATOR(/, div)
LOOM_BINARY_OPERATOR(%, mod)

//! Elementwise negation; lazy.
template <expression E>
[[nodiscard]] auto operator-(const E& e) {
  return map(fn::neg{}, e);
}
}  // namespace loom
