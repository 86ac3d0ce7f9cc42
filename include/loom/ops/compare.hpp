// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "loom/config.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"

namespace loom {
namespace fn {
#define LOOM_COMPARE_FN(name, op)                      \
  struct name {                                        \
    template <class T>                                 \
    LOOM_HD bool operator()(T a, T b) const {          \
      return a op b;                                   \
    }                                                  \
  };
LOOM_COMPARE_FN(equal, ==)
LOOM_COMPARE_FN(not_equal, !=)
LOOM_COMPARE_FN(less, <)
LOOM_COMPARE_FN(less_equal, <=)
LOOM_COMPARE_FN(greater, >)
LOOM_COMPARE_FN(greater_equal, >=)
#undef LOOM_COMPARE_FN
//! Non-zero operands are true.
struct logical_and {
  template <class T>
  LOOM_HD bool operator()(T a, T b) const {
    return a != T(0) && b != T(0);
  }
};
struct logical_or {
  template <class T>
  LOOM_HD bool operator()(T a, T b) const {
    return a != T(0) || b != T(0);
  }
};
struct logical_not {
  template <class T>
  LOOM_HD bool operator()(T a) const {
    return a == T(0);
  }
};
}  // namespace fn

//! Elementwise comparisons giving bool (IEEE: any comparison with NaN is
//! false except !=); operands are promoted together first. Lazy.
//! Example: `auto mask = x > 0;`
LOOM_BINARY_OPERATOR(==, equal)
LOOM_BINARY_OPERATOR(!=, not_equal)
LOOM_BINARY_OPERATOR(<, less)
LOOM_BINARY_OPERATOR(<=, less_equal)
LOOM_BINARY_OPERATOR(>, greater)
LOOM_BINARY_OPERATOR(>=, greater_equal)
//! Elementwise logical and/or (non-zero is true; no short-circuit). Lazy.
LOOM_BINARY_OPERATOR(&&, logical_and)
LOOM_BINARY_OPERATOR(||, logical_or)

//! Elementwise logical not (x == 0), giving bool. Lazy.
template <expression E>
[[nodiscard]] auto operator!(const E& e) {
  return map(fn::logical_not{}, e);
}
//! Named forms of the logical operators.
template <operand A, operand B>
  requires(expression<A> || expression<B>)
[[nodiscard]] auto logical_and(const A& a, const B& b) {
  return map(fn::logical_and{}, a, b);
}
template <operand A, operand B>
  requires(expression<A> || expression<B>)
[[nodiscard]] auto logical_or(const A& a, const B& b) {
  return map(fn::logical_or{}, a, b);
}
template <expression E>
[[nodiscard]] auto logical_not(const E& e) {
  return map(fn::logical_not{}, e);
}
}  // namespace loom
