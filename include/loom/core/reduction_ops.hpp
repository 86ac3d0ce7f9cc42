// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/math.hpp"
#include "loom/core/shape.hpp"

// The one vocabulary of reduction operators, shared by the whole-tensor and
// axis reductions, the scans and the row reductions (fn::row_sum_op and the
// others in expr/row_nodes.hpp name these operators) on both executors. Each
// operator says how an element enters the accumulator (lift, which also
// receives the element's position in the reduced range), how two
// accumulators combine (operator()), the identity, and how the final
// accumulator becomes the result (finalize, which receives the element
// count). has_identity is false where an empty range has no result (max,
// min, argmax, argmin). It needs only core/, so the row nodes (expr/) and
// the reductions (reduce/) both include it from below.
namespace loom {

//! Result type of sum, prod, cumsum and cumprod over elements of type T:
//! int64 for bool and integer types (as PyTorch), else T (half stays half,
//! accumulated in float).
template <class T>
using sum_result_t = std::conditional_t<std::is_integral_v<T>, std::int64_t, T>;

//! Result type of mean, var, stddev, the norms and logsumexp over elements of
//! type T: T for floating types, float for bool and integers.
template <class T>
using float_result_t = std::conditional_t<is_floating_v<T>, T, float>;

//! Type in which sum and prod accumulate elements of type T: int64 for bool
//! and integers, float for half/bf16/float, double for double.
template <class T>
using accumulate_t = std::conditional_t<std::is_integral_v<T>, std::int64_t, compute_t<T>>;

namespace detail::reduce {
template <class F>
LOOM_HD F inf_of() {
  return std::numeric_limits<F>::infinity();
}
template <class C>
LOOM_HD C lowest_of() {
  if constexpr (std::is_floating_point_v<C>)
    return -std::numeric_limits<C>::infinity();
  else
    return std::numeric_limits<C>::lowest();
}
template <class C>
LOOM_HD C highest_of() {
  if constexpr (std::is_floating_point_v<C>)
    return std::numeric_limits<C>::infinity();
  else
    return std::numeric_limits<C>::max();
}

// a + b and a * b in the accumulator's type: integer accumulators wrap (as
// PyTorch's int64 do, and as fn::add and fn::mul) instead of overflowing
// with undefined behaviour.
template <class A>
LOOM_HD A wrapping_add(A a, A b) {
  using W = wrapping_t<A>;
  return static_cast<A>(static_cast<W>(a) + static_cast<W>(b));
}
template <class A>
LOOM_HD A wrapping_mul(A a, A b) {
  using W = wrapping_t<A>;
  return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
}

template <class T>
struct sum_op {
  static constexpr bool has_identity = true;
  using acc = accumulate_t<T>;
  using result = sum_result_t<T>;
  LOOM_HD acc identity() const { return acc(0); }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    return static_cast<acc>(v);
  }
  LOOM_HD acc operator()(acc a, acc b) const { return wrapping_add(a, b); }
  LOOM_HD result finalize(acc a, index_t) const { return convert<result>(a); }
};

template <class T>
struct prod_op : sum_op<T> {
  using acc = accumulate_t<T>;
  LOOM_HD acc identity() const { return acc(1); }
  LOOM_HD acc operator()(acc a, acc b) const { return wrapping_mul(a, b); }
};

// Integers of up to 32 bits and bool are summed exactly in int64 (no
// overflow below 2^32 elements) and divided once in double, so the float
// mean is the double quotient rounded once, exact to half a float ulp while
// the sum's magnitude is below 2^53 (summed in float, the mean of {2^24 + 1,
// 2^25 + 3, 2^25 + 3} would be 27962030 in any order, not 27962028). 64-bit
// integers are summed in double: an int64 sum of values near 2^62 would
// wrap. Floating types sum in compute_t.
template <class T>
using mean_acc_t = std::conditional_t<std::is_integral_v<T>, std::conditional_t<(sizeof(T) <= 4), std::int64_t, double>,
                                      compute_t<float_result_t<T>>>;
template <class T>
struct mean_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using acc = mean_acc_t<T>;
  LOOM_HD acc identity() const { return acc(0); }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    return static_cast<acc>(v);
  }
  LOOM_HD acc operator()(acc a, acc b) const { return wrapping_add(a, b); }
  // An empty mean is 0/0 = NaN, as in PyTorch.
  LOOM_HD result finalize(acc a, index_t n) const {
    if constexpr (std::is_integral_v<T>)
      return convert<result>(static_cast<double>(a) / static_cast<double>(n));
    else
      return convert<result>(a / static_cast<acc>(n));
  }
};

template <class T, bool Max>
struct extreme_op {
  static constexpr bool has_identity = false;
  using acc = compute_t<T>;
  using result = T;
  LOOM_HD acc identity() const { return Max ? lowest_of<acc>() : highest_of<acc>(); }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    return static_cast<acc>(v);
  }
  LOOM_HD acc operator()(acc a, acc b) const { return nan_extreme<acc, Max>(a, b); }
  LOOM_HD result finalize(acc a, index_t) const { return convert<result>(a); }
};
template <class T>
using max_op = extreme_op<T, true>;
template <class T>
using min_op = extreme_op<T, false>;

//! A value and its position, the accumulator of argmax/argmin and cummax/cummin.
template <class C>
struct value_index {
  C v;
  index_t i;
};

// Orders (value, index) pairs so that the combine is commutative and
// associative: NaN beats everything (the first NaN wins), then the larger
// (smaller) value, then, for reductions, the smaller index (argmax of ties is
// the first index, as in PyTorch).
template <class C, bool Max>
LOOM_HD value_index<C> arg_combine(const value_index<C>& a, const value_index<C>& b) {
  // One select, no branch (see nan_extreme).
  const bool an = a.v != a.v, bn = b.v != b.v, earlier = b.i < a.i;
  const bool better = Max ? b.v > a.v : b.v < a.v;
  const bool b_wins = (an & bn & earlier) | ((!an) & (bn | better | ((b.v == a.v) & earlier)));
  return b_wins ? b : a;
}

template <class T, bool Max>
struct arg_op {
  static constexpr bool has_identity = false;
  static constexpr bool positional = true;  // lift uses the element's position
  using acc = value_index<compute_t<T>>;
  using result = std::int64_t;
  LOOM_HD acc identity() const {
    return {Max ? lowest_of<compute_t<T>>() : highest_of<compute_t<T>>(), std::numeric_limits<index_t>::max()};
  }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t i) const {
    return {static_cast<compute_t<T>>(v), i};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const { return arg_combine<compute_t<T>, Max>(a, b); }
  LOOM_HD result finalize(const acc& a, index_t) const { return a.i; }
};
template <class T>
using argmax_op = arg_op<T, true>;
template <class T>
using argmin_op = arg_op<T, false>;

template <class T>
struct any_op {
  static constexpr bool has_identity = true;
  using acc = bool;
  using result = bool;
  LOOM_HD acc identity() const { return false; }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    return v != Value(0);
  }
  LOOM_HD acc operator()(acc a, acc b) const { return a || b; }
  LOOM_HD result finalize(acc a, index_t) const { return a; }
};
template <class T>
struct all_op : any_op<T> {
  LOOM_HD bool identity() const { return true; }
  LOOM_HD bool operator()(bool a, bool b) const { return a && b; }
};
template <class T>
struct count_nonzero_op {
  static constexpr bool has_identity = true;
  using acc = std::int64_t;
  using result = std::int64_t;
  LOOM_HD acc identity() const { return 0; }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    return v != Value(0) ? 1 : 0;
  }
  LOOM_HD acc operator()(acc a, acc b) const { return a + b; }
  LOOM_HD result finalize(acc a, index_t) const { return a; }
};

// The norms: |x| summed (L1), x^2 summed then the square root (L2), and the
// NaN-propagating max of |x| (Linf; 0 when empty). norm_p is 1, 2, or 0 for
// infinity.
template <class T, int norm_p>
struct norm_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using acc = compute_t<result>;
  LOOM_HD acc identity() const { return acc(0); }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    const acc x = static_cast<acc>(v);
    return norm_p == 2 ? x * x : ::loom::math::fabs(x);
  }
  LOOM_HD acc operator()(acc a, acc b) const {
    if constexpr (norm_p == 0)
      return nan_extreme<acc, true>(a, b);
    else
      return a + b;
  }
  LOOM_HD result finalize(acc a, index_t) const { return convert<result>(norm_p == 2 ? ::loom::math::sqrt(a) : a); }
};
template <class T>
using l1_op = norm_op<T, 1>;
template <class T>
using l2_op = norm_op<T, 2>;
template <class T>
using linf_op = norm_op<T, 0>;

//! Count, mean and sum of squared deviations of a set of values.
template <class F>
struct moments {
  index_t n;
  F mean;
  F m2;
};

// Variance by Welford's update, merged with Chan et al.'s pairwise formula:
// stable where the two-pass sum of squares minus square of sums cancels.
template <class T, bool Std>
struct var_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using F = compute_t<result>;
  using acc = moments<F>;
  F correction_ = 1;
  LOOM_HD acc identity() const { return {0, F(0), F(0)}; }
  // m2 starts as f - f: 0 for a finite value, NaN for an infinity or a NaN,
  // so a range holding one has a NaN variance whatever its length, position
  // or correction (as in PyTorch), not 0 for one element or inf for a last one.
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    const F f = static_cast<F>(v);
    return {1, f, f - f};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const index_t n = a.n + b.n;
    const F delta = b.mean - a.mean;
    const F fb = static_cast<F>(b.n) / static_cast<F>(n);
    return {n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * static_cast<F>(a.n) * fb};
  }
  // An empty range has no mean: NaN for any correction (d = 0, and m2 is 0),
  // also a negative one, whose divisor -c would give 0.
  LOOM_HD result finalize(const acc& a, index_t) const {
    F d = static_cast<F>(a.n) - correction_;
    if (d < F(0) || a.n == 0) d = F(0);
    const F v = a.m2 / d;
    return convert<result>(Std ? ::loom::math::sqrt(v) : v);
  }
};
template <class T>
using variance_op = var_op<T, false>;
template <class T>
using stddev_op = var_op<T, true>;

//! A running maximum and the sum of exp(x - maximum).
template <class F>
struct max_sumexp {
  F m;
  F s;
};

// logsumexp in one pass: the running maximum rescales the running sum, so
// nothing overflows; exp(x - max) <= 1 always.
template <class T>
struct logsumexp_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using F = compute_t<result>;
  using acc = max_sumexp<F>;
  LOOM_HD acc identity() const { return {-inf_of<F>(), F(0)}; }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t) const {
    return {static_cast<F>(v), F(1)};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const {
    // The general value is computed always and the special cases are
    // selected over it, highest priority last: no branch (see nan_extreme).
    // In priority order: a NaN maximum (a's first), an empty side (s == 0),
    // an infinite maximum, which decides the result (inf - inf would be NaN).
    const F mx = a.m > b.m ? a.m : b.m;
    acc r{mx, a.s * ::loom::math::exp(a.m - mx) + b.s * ::loom::math::exp(b.m - mx)};
    if (mx == inf_of<F>() || mx == -inf_of<F>()) r = acc{mx, F(1)};
    if (b.s == F(0)) r = a;
    if (a.s == F(0)) r = b;
    if (b.m != b.m) r = b;
    if (a.m != a.m) r = a;
    return r;
  }
  LOOM_HD result finalize(const acc& a, index_t) const { return convert<result>(a.m + ::loom::math::log(a.s)); }
};

// cummax/cummin: a later element wins ties (PyTorch's cummax gives the last
// index of equal values) and a NaN, once met, stays, with the index of the
// latest NaN, as PyTorch does. Associative, so block and device scans agree.
// The identity (what an exclusive scan writes first) is the lowest value of
// the type for cummax (-inf for floating types; the highest for cummin) with
// index -1: no element. Every element wins against it.
template <class T, bool Max>
struct cum_extreme_op {
  static constexpr const char* name = Max ? "cummax" : "cummin";
  using acc = value_index<compute_t<T>>;
  using result = T;
  LOOM_HD acc identity() const { return {Max ? lowest_of<compute_t<T>>() : highest_of<compute_t<T>>(), -1}; }
  template <class Value>
  LOOM_HD acc lift(Value v, index_t i) const {
    return {static_cast<compute_t<T>>(v), i};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const {
    // One select, no branch (see nan_extreme): a NaN wins, the later first.
    const bool b_wins = (b.v != b.v) | ((!(a.v != a.v)) & (Max ? b.v >= a.v : b.v <= a.v));
    return b_wins ? b : a;
  }
  LOOM_HD result finalize(const acc& a, index_t) const { return convert<result>(a.v); }
};
}  // namespace detail::reduce
}  // namespace loom
