// SPDX-License-Identifier: Apache-2.0
// An independent reference interpreter for loom's elementwise ops: each value
// is a double (or an exact integer) plus a bound on how far loom's value may
// legitimately be from it (float compute, transcendental accuracy, fused
// multiply-adds on the GPU). Ops whose result jumps (comparisons, floor,
// truncating casts, remainder) mark a value "don't care" when their input is
// within that bound of the jump, so no element is compared on a coin flip.
// Promotion follows the documented rules (PyTorch's), written again here from
// the docs, not from loom's code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <loom/core/dtype.hpp>

namespace loom_random::ref {

//! The dtypes, as the reference knows them.
enum class kind : std::uint8_t { b, i8, u8, i32, i64, f16, bf16, f32, f64 };

inline const char* kind_name(kind k) {
  switch (k) {
    case kind::b: return "bool";
    case kind::i8: return "int8";
    case kind::u8: return "uint8";
    case kind::i32: return "int32";
    case kind::i64: return "int64";
    case kind::f16: return "half";
    case kind::bf16: return "bf16";
    case kind::f32: return "float";
    case kind::f64: return "double";
  }
  return "?";
}

template <class T>
constexpr kind kind_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, bool>) return kind::b;
  else if constexpr (std::is_same_v<U, std::int8_t>) return kind::i8;
  else if constexpr (std::is_same_v<U, std::uint8_t>) return kind::u8;
  else if constexpr (std::is_same_v<U, std::int32_t>) return kind::i32;
  else if constexpr (std::is_same_v<U, std::int64_t>) return kind::i64;
  else if constexpr (std::is_same_v<U, loom::half>) return kind::f16;
  else if constexpr (std::is_same_v<U, loom::bf16>) return kind::bf16;
  else if constexpr (std::is_same_v<U, float>) return kind::f32;
  else return kind::f64;
}

constexpr int category(kind k) { return k == kind::b ? 0 : (k <= kind::i64 ? 1 : 2); }
constexpr bool is_float(kind k) { return category(k) == 2; }
constexpr int width(kind k) {
  switch (k) {
    case kind::b: case kind::i8: case kind::u8: return 1;
    case kind::f16: case kind::bf16: return 2;
    case kind::i32: case kind::f32: return 4;
    default: return 8;
  }
}

//! Two tensor dtypes together: the higher category wins; within a category
//! the wider type; int8 with uint8 is int32 (loom has no int16), half with
//! bf16 is float.
inline kind promote(kind a, kind b) {
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if (a == b) return a;
  if (width(a) != width(b)) return width(a) > width(b) ? a : b;
  return category(a) == 1 ? kind::i32 : kind::f32;
}
//! A C++ scalar does not widen a tensor of its own or a higher category; a
//! scalar of a higher category gives that category's default (int64, float).
inline kind apply_scalar(kind p, kind s) {
  if (category(s) <= category(p)) return p;
  return category(s) == 1 ? kind::i64 : kind::f32;
}
//! The type values of kind k are computed in.
inline kind compute_of(kind k) { return (k == kind::f16 || k == kind::bf16) ? kind::f32 : k; }
//! Unit roundoff of a compute kind (0 for integers: exact).
inline double unit(kind c) {
  return c == kind::f32 ? std::ldexp(1.0, -24) : (c == kind::f64 ? std::ldexp(1.0, -53) : 0.0);
}

//! Two's-complement wrap of an integer to the width of kind k.
inline std::int64_t wrap(kind k, std::int64_t v) {
  switch (k) {
    case kind::b: return v != 0;
    case kind::i8: return static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) & 0xff));
    case kind::u8: return static_cast<std::int64_t>(static_cast<std::uint64_t>(v) & 0xff);
    case kind::i32:
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) & 0xffffffffu));
    default: return v;
  }
}

struct format {
  int p;          // significand bits, the leading one included
  int emin;       // exponent of the smallest normal
  double max;     // largest finite value
};
inline format format_of(kind k) {
  if (k == kind::f16) return {11, -14, 65504.0};
  if (k == kind::bf16) return {8, -126, 3.3895313892515355e38};
  if (k == kind::f32) return {24, -126, static_cast<double>(std::numeric_limits<float>::max())};
  return {53, -1022, std::numeric_limits<double>::max()};
}
//! The spacing of kind k's values near v (subnormals included).
inline double quantum(kind k, double v) {
  const format f = format_of(k);
  int ex = 0;
  std::frexp(v, &ex);
  const int e = std::max(ex - 1, f.emin);
  return std::ldexp(1.0, e - (f.p - 1));
}
//! v rounded to the nearest value of floating kind k, ties to even, with
//! overflow to infinity as IEEE prescribes; written from the definition.
inline double round_to(kind k, double v) {
  if (!std::isfinite(v) || v == 0 || k == kind::f64) return v;
  const format f = format_of(k);
  const double q = quantum(k, v);
  const double r = std::nearbyint(v / q) * q;
  if (std::fabs(r) > f.max) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return r;
}

//! A reference value.
struct rv {
  double v = 0;         // the value (float kinds; integers also keep it as a double)
  std::int64_t i = 0;   // the exact value of bool and integer kinds
  double e = 0;         // bound on |loom's value - v| for floating kinds
  kind k = kind::f32;   // the dtype of the value (value_type of the node)
  bool scalar = false;  // a C++ scalar ("wrapped number")
  bool dc = false;      // depends on rounding: not compared
};

template <class T>
rv leaf(T x) {
  rv r;
  r.k = kind_of<T>();
  if constexpr (std::is_integral_v<T>) {
    r.i = static_cast<std::int64_t>(x);
    r.v = static_cast<double>(x);
  } else if constexpr (std::is_same_v<T, loom::half> || std::is_same_v<T, loom::bf16>) {
    r.v = static_cast<double>(static_cast<float>(x));
  } else {
    r.v = static_cast<double>(x);
  }
  return r;
}

template <class S>
  requires std::is_arithmetic_v<S>
rv lift(S s) {
  rv r;
  if constexpr (std::is_same_v<S, bool>) {
    r.k = kind::b;
    r.i = s;
    r.v = s;
  } else if constexpr (std::is_integral_v<S>) {
    r.k = kind::i64;
    r.i = static_cast<std::int64_t>(s);
    r.v = static_cast<double>(s);
  } else {
    r.k = std::is_same_v<S, double> ? kind::f64 : kind::f32;
    r.v = static_cast<double>(s);
  }
  r.scalar = true;
  return r;
}
inline rv lift(const rv& r) { return r; }

inline rv dont_care(kind k) {
  rv r;
  r.k = k;
  r.dc = true;
  return r;
}

//! The promoted dtype of an op's operands: tensors first, then scalars;
//! `floating` ops turn a non-floating result into float.
template <class... X>
kind promoted(bool floating, const X&... x) {
  kind p = kind::b;
  bool any = false;
  auto tensor = [&](const rv& y) {
    if (y.scalar) return;
    p = any ? promote(p, y.k) : y.k;
    any = true;
  };
  (tensor(x), ...);
  auto wrapped = [&](const rv& y) {
    if (y.scalar) p = apply_scalar(p, y.k);
  };
  (wrapped(x), ...);
  if (floating && !is_float(p)) p = kind::f32;
  return p;
}

//! x converted to compute kind c (what the functor receives).
inline rv to_compute(rv x, kind c) {
  if (!is_float(c)) {
    x.i = wrap(c, x.i);
    x.v = static_cast<double>(x.i);
  } else if (!is_float(x.k)) {
    x.v = c == kind::f32 ? static_cast<double>(static_cast<float>(x.i)) : static_cast<double>(x.i);
    x.e = 0;
  } else if (c == kind::f32 && x.k == kind::f64) {
    if (x.e == 0)
      x.v = static_cast<double>(static_cast<float>(x.v));
    else
      x.e += unit(c) * std::fabs(x.v);
  }
  return x;
}

// a * b for error terms, where 0 * inf is 0.
inline double emul(double a, double b) { return (a == 0 || b == 0) ? 0.0 : a * b; }

//! Finishes a floating result r of compute kind c: adds `rel` roundings of r
//! (plus `absr` units, for functions whose error scales with their input),
//! overflows like the compute type, and gives up on error bounds that are
//! not finite.
inline rv finish(kind k, kind c, double r, double eprop, double rel, double absr = 0) {
  rv out;
  out.k = k;
  out.v = r;
  if (!std::isfinite(r)) return out;  // inf and NaN must match exactly
  const double u = unit(c);
  // Results below the smallest normal may lose all their digits (1 / (1 + exp(96))
  // in float is 0: exp overflows first), so the bound never drops below it.
  double e = eprop + rel * u * std::fabs(r) + absr * u + std::ldexp(1.0, format_of(c).emin);
  if (!std::isfinite(e)) return dont_care(k);
  const double mx = format_of(c).max;
  if (std::fabs(r) - e > mx) {
    out.v = std::copysign(std::numeric_limits<double>::infinity(), r);
    return out;
  }
  if (std::fabs(r) + e > mx) return dont_care(k);
  out.e = e;
  return out;
}

inline rv int_result(kind k, kind c, std::int64_t v) {
  rv out;
  out.k = k;
  out.i = wrap(c, v);
  out.v = static_cast<double>(out.i);
  return out;
}

// Wrapping integer arithmetic in 64 bits (the reference's own, in unsigned).
inline std::int64_t wadd(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline std::int64_t wsub(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
inline std::int64_t wmul(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}

enum class aop { add, sub, mul };

inline rv arith(aop op, rv a, rv b) {
  const kind p = promoted(false, a, b), c = compute_of(p);
  if (a.dc || b.dc) return dont_care(p);
  a = to_compute(a, c);
  b = to_compute(b, c);
  if (c == kind::b) {
    const bool x = a.i != 0, y = b.i != 0;
    return int_result(p, c, op == aop::add ? (x || y) : (op == aop::sub ? (x != y) : (x && y)));
  }
  if (!is_float(c)) return int_result(p, c, op == aop::add ? wadd(a.i, b.i) : (op == aop::sub ? wsub(a.i, b.i) : wmul(a.i, b.i)));
  if (op == aop::mul)
    return finish(p, c, a.v * b.v, emul(std::fabs(a.v), b.e) + emul(std::fabs(b.v), a.e) + a.e * b.e, 1);
  return finish(p, c, op == aop::add ? a.v + b.v : a.v - b.v, a.e + b.e, 1);
}

inline rv divide(rv a, rv b) {
  const kind p = promoted(true, a, b), c = compute_of(p);
  if (a.dc || b.dc) return dont_care(p);
  a = to_compute(a, c);
  b = to_compute(b, c);
  if (b.e > 0 && std::fabs(b.v) <= 2 * b.e) return dont_care(p);
  const double r = a.v / b.v;
  const double ep = (a.e + emul(std::fabs(r), b.e)) / (std::fabs(b.v) - b.e);
  return finish(p, c, r, std::isfinite(r) ? ep : 0, 1);
}

// Python's remainder: the sign of the divisor; integer remainder by 0 is 0 (documented).
inline rv remainder(rv a, rv b) {
  const kind p = promoted(false, a, b), c = compute_of(p);
  if (a.dc || b.dc) return dont_care(p);
  a = to_compute(a, c);
  b = to_compute(b, c);
  if (c == kind::b) return int_result(p, c, a.i != 0 && b.i == 0);
  if (!is_float(c)) {
    if (b.i == 0) return int_result(p, c, 0);
    std::int64_t r = a.i % b.i;
    if (r != 0 && ((r < 0) != (b.i < 0))) r += b.i;
    return int_result(p, c, r);
  }
  const double t = a.v / b.v;
  if (a.e > 0 || b.e > 0) {
    const double dt = (a.e + std::fabs(t) * b.e) / std::max(std::fabs(b.v) - b.e, 1e-300);
    if (std::fabs(t - std::nearbyint(t)) <= 2 * dt + 1e-6 * std::max(1.0, std::fabs(t))) return dont_care(p);
  }
  double r = std::fmod(a.v, b.v);
  bool added = false;
  if (r != 0 && ((r < 0) != (b.v < 0))) r += b.v, added = true;
  return finish(p, c, r, a.e + emul(std::fabs(std::floor(t)) + 1, b.e), added ? 1 : 0);
}

enum class cmp { lt, le, gt, ge, eq, ne };

inline rv compare(cmp op, rv a, rv b) {
  const kind p = promoted(false, a, b), c = compute_of(p);
  if (a.dc || b.dc) return dont_care(kind::b);
  a = to_compute(a, c);
  b = to_compute(b, c);
  bool r;
  if (!is_float(c)) {
    const std::int64_t x = a.i, y = b.i;
    r = op == cmp::lt ? x < y : op == cmp::le ? x <= y : op == cmp::gt ? x > y : op == cmp::ge ? x >= y
                                                                                  : op == cmp::eq ? x == y : x != y;
  } else {
    if ((a.e > 0 || b.e > 0) && std::fabs(a.v - b.v) <= 2 * (a.e + b.e)) return dont_care(kind::b);
    const double x = a.v, y = b.v;
    r = op == cmp::lt ? x < y : op == cmp::le ? x <= y : op == cmp::gt ? x > y : op == cmp::ge ? x >= y
                                                                                  : op == cmp::eq ? x == y : x != y;
  }
  rv out;
  out.k = kind::b;
  out.i = r;
  out.v = r;
  return out;
}

// Truthiness: 1 true, 0 false, -1 unknown (within the error bound of 0).
inline int truth(const rv& x) {
  if (x.dc) return -1;
  if (!is_float(x.k)) return x.i != 0;
  if (x.e > 0 && std::fabs(x.v) <= 2 * x.e) return -1;
  return x.v != 0;
}

inline rv boolean(int t) {
  if (t < 0) return dont_care(kind::b);
  rv out;
  out.k = kind::b;
  out.i = t;
  out.v = t;
  return out;
}

// ---- operators and functions, found by argument-dependent lookup -----------

#define LOOM_REF_BINARY(op, body)                                                                 \
  template <class A, class B>                                                                     \
    requires(std::is_same_v<A, rv> || std::is_same_v<B, rv>)                                      \
  rv operator op(const A& a_, const B& b_) {                                                      \
    const rv a = lift(a_), b = lift(b_);                                                          \
    return body;                                                                                  \
  }
LOOM_REF_BINARY(+, arith(aop::add, a, b))
LOOM_REF_BINARY(-, arith(aop::sub, a, b))
LOOM_REF_BINARY(*, arith(aop::mul, a, b))
LOOM_REF_BINARY(/, divide(a, b))
LOOM_REF_BINARY(%, remainder(a, b))
LOOM_REF_BINARY(<, compare(cmp::lt, a, b))
LOOM_REF_BINARY(<=, compare(cmp::le, a, b))
LOOM_REF_BINARY(>, compare(cmp::gt, a, b))
LOOM_REF_BINARY(>=, compare(cmp::ge, a, b))
LOOM_REF_BINARY(==, compare(cmp::eq, a, b))
LOOM_REF_BINARY(!=, compare(cmp::ne, a, b))
LOOM_REF_BINARY(&&, boolean(truth(a) == 0 || truth(b) == 0 ? 0 : (truth(a) < 0 || truth(b) < 0 ? -1 : 1)))
LOOM_REF_BINARY(||, boolean(truth(a) == 1 || truth(b) == 1 ? 1 : (truth(a) < 0 || truth(b) < 0 ? -1 : 0)))
#undef LOOM_REF_BINARY

inline rv operator!(const rv& a) {
  const int t = truth(a);
  return boolean(t < 0 ? -1 : !t);
}

inline rv operator-(rv a) {
  const kind c = compute_of(a.k);
  if (a.dc) return a;
  a = to_compute(a, c);
  if (!is_float(c)) return int_result(a.k, c, wsub(0, a.i));
  a.v = -a.v;
  return a;
}

inline rv abs(rv a) {
  const kind c = compute_of(a.k);
  if (a.dc) return a;
  a = to_compute(a, c);
  if (c == kind::b || c == kind::u8) return a;
  if (!is_float(c)) return int_result(a.k, c, a.i < 0 ? wsub(0, a.i) : a.i);
  a.v = std::fabs(a.v);
  return a;
}

inline rv relu(rv a) {
  const kind c = compute_of(a.k);
  if (a.dc) return a;
  a = to_compute(a, c);
  if (!is_float(c)) return int_result(a.k, c, a.i < 0 ? 0 : a.i);
  if (a.v < 0) a.v = 0;  // NaN stays NaN
  return a;
}

inline rv sign(rv a) {
  const kind c = compute_of(a.k);
  if (a.dc) return a;
  a = to_compute(a, c);
  if (!is_float(c)) return int_result(a.k, c, (0 < a.i) - (a.i < 0));
  if (std::isnan(a.v)) return a;
  if (a.e > 0 && std::fabs(a.v) <= 2 * a.e) return dont_care(a.k);
  a.v = a.v > 0 ? 1 : (a.v < 0 ? -1 : 0);
  a.e = 0;
  return a;
}

// floor, ceil, round: exact on exact inputs; don't care near the jumps.
enum class rnd { floor, ceil, round };
inline rv rounding(rnd m, rv a) {
  const kind c = compute_of(a.k);
  if (a.dc || !is_float(c)) return a;
  a = to_compute(a, c);
  if (!std::isfinite(a.v)) return a;
  // Where the compute type holds only integers, rounding leaves values as they are.
  if (std::fabs(a.v) - a.e >= std::ldexp(1.0, format_of(c).p - 1)) return a;
  if (a.e > 0) {
    const double jump = m == rnd::round ? std::floor(a.v) + 0.5 : std::nearbyint(a.v);
    if (std::fabs(a.v - jump) <= 2 * a.e) return dont_care(a.k);
  }
  a.v = m == rnd::floor ? std::floor(a.v) : (m == rnd::ceil ? std::ceil(a.v) : std::nearbyint(a.v));
  a.e = 0;
  return a;
}
inline rv floor(const rv& a) { return rounding(rnd::floor, a); }
inline rv ceil(const rv& a) { return rounding(rnd::ceil, a); }
inline rv round(const rv& a) { return rounding(rnd::round, a); }

//! A floating function of one argument: value f, error gain `gain(x, r)`
//! (|f'| bound near x), `rel` roundings of the result and `absr` of the input.
template <class F, class G>
rv unary_float(rv a, F f, G gain, double rel, double absr_scale = 0) {
  const kind p = promoted(true, a), c = compute_of(p);
  if (a.dc) return dont_care(p);
  a = to_compute(a, c);
  const double r = f(a.v);
  return finish(p, c, r, std::isfinite(r) ? emul(gain(a.v, r), a.e) : 0, rel, absr_scale * std::fabs(a.v));
}

inline rv exp(const rv& a) {
  return unary_float(a, [](double x) { return std::exp(x); }, [](double, double r) { return std::fabs(r) * 1.01; }, 8);
}
inline rv exp2(const rv& a) {
  return unary_float(a, [](double x) { return std::exp2(x); }, [](double, double r) { return std::fabs(r) * 0.7; }, 8);
}
inline rv tanh(const rv& a) {
  return unary_float(a, [](double x) { return std::tanh(x); }, [](double, double) { return 1.0; }, 8);
}
inline rv sin(const rv& a) {
  return unary_float(a, [](double x) { return std::sin(x); }, [](double, double) { return 1.0; }, 8, 1);
}
inline rv cos(const rv& a) {
  return unary_float(a, [](double x) { return std::cos(x); }, [](double, double) { return 1.0; }, 8, 1);
}
inline rv erf(const rv& a) {
  return unary_float(a, [](double x) { return std::erf(x); }, [](double, double) { return 1.13; }, 8, 1);
}
inline rv sigmoid(const rv& a) {
  return unary_float(a, [](double x) { return 1 / (1 + std::exp(-x)); }, [](double, double) { return 0.26; }, 8);
}
inline rv silu(const rv& a) {
  return unary_float(a, [](double x) { return x / (1 + std::exp(-x)); }, [](double, double) { return 1.1; }, 8, 2);
}
inline rv gelu(const rv& a) {
  return unary_float(a, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
                     [](double, double) { return 1.13; }, 8, 4);
}
inline rv softplus(const rv& a) {
  return unary_float(a, [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); },
                     [](double, double) { return 1.0; }, 8, 1);
}
inline rv mish(const rv& a) {
  return unary_float(a, [](double x) { return x * std::tanh(x > 20 ? x : std::log1p(std::exp(x))); },
                     [](double, double) { return 1.2; }, 16, 4);
}
inline rv leaky_relu(rv a, double slope) {
  const kind p = promoted(true, a), c = compute_of(p);
  if (a.dc) return dont_care(p);
  a = to_compute(a, c);
  const double s = c == kind::f32 ? static_cast<double>(static_cast<float>(slope)) : slope;
  if (!(a.v < 0)) {
    a.k = p;
    return a;
  }
  return finish(p, c, a.v * s, a.e * std::fabs(s), 1);
}
// Functions with a domain edge: don't care where the error bound reaches it.
inline rv log(rv a) {
  const kind p = promoted(true, a), c = compute_of(p);
  if (a.dc) return dont_care(p);
  a = to_compute(a, c);
  if (a.e > 0 && a.v <= 2 * a.e) return dont_care(p);
  return finish(p, c, std::log(a.v), a.v > 0 ? a.e / (a.v - a.e) : 0, 8);
}
inline rv log1p(rv a) {
  const kind p = promoted(true, a), c = compute_of(p);
  if (a.dc) return dont_care(p);
  a = to_compute(a, c);
  if (a.e > 0 && a.v + 1 <= 2 * a.e) return dont_care(p);
  return finish(p, c, std::log1p(a.v), a.v > -1 ? a.e / (1 + a.v - a.e) : 0, 8);
}
inline rv sqrt(rv a) {
  const kind p = promoted(true, a), c = compute_of(p);
  if (a.dc) return dont_care(p);
  a = to_compute(a, c);
  if (a.e > 0 && a.v <= 4 * a.e) return dont_care(p);
  return finish(p, c, std::sqrt(a.v), a.v > 0 ? a.e / (2 * std::sqrt(a.v - a.e)) : 0, 2);
}

template <class A, class B>
  requires(std::is_same_v<A, rv> || std::is_same_v<B, rv>)
rv pow(const A& a_, const B& b_) {
  rv a = lift(a_), b = lift(b_);
  const kind p = promoted(false, a, b), c = compute_of(p);
  if (a.dc || b.dc) return dont_care(p);
  a = to_compute(a, c);
  b = to_compute(b, c);
  if (c == kind::b) return int_result(p, c, a.i != 0 || b.i == 0);
  if (!is_float(c)) {
    if (b.i < 0) return int_result(p, c, a.i == 1 ? 1 : (a.i == -1 ? ((b.i % 2) ? -1 : 1) : 0));
    std::int64_t r = 1, base = a.i;
    for (std::int64_t k = b.i; k > 0; k >>= 1) {
      if (k & 1) r = wmul(r, base);
      base = wmul(base, base);
    }
    return int_result(p, c, r);  // products modulo 2^64, then wrapped to the type
  }
  if (a.e > 0 && std::fabs(a.v) <= 2 * a.e) return dont_care(p);
  const double r = std::pow(a.v, b.v);
  const double ep = emul(std::fabs(r), emul(std::fabs(b.v / a.v), a.e) + emul(std::fabs(std::log(std::fabs(a.v))), b.e));
  return finish(p, c, r, std::isfinite(r) ? ep : 0, 8);
}

// NaN-propagating minimum and maximum.
inline rv minmax(bool is_max, rv a, rv b) {
  const kind p = promoted(false, a, b), c = compute_of(p);
  if (a.dc || b.dc) return dont_care(p);
  a = to_compute(a, c);
  b = to_compute(b, c);
  if (!is_float(c)) return int_result(p, c, is_max ? std::max(a.i, b.i) : std::min(a.i, b.i));
  rv out;
  out.k = p;
  if (std::isnan(a.v) || std::isnan(b.v)) {
    out.v = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  out.v = is_max ? std::max(a.v, b.v) : std::min(a.v, b.v);
  out.e = std::max(a.e, b.e);
  return out;
}
template <class A, class B>
  requires(std::is_same_v<A, rv> || std::is_same_v<B, rv>)
rv maximum(const A& a, const B& b) {
  return minmax(true, lift(a), lift(b));
}
template <class A, class B>
  requires(std::is_same_v<A, rv> || std::is_same_v<B, rv>)
rv minimum(const A& a, const B& b) {
  return minmax(false, lift(a), lift(b));
}
// clamp promotes its three operands together, then clamps in that type.
template <class X, class L, class H>
  requires(std::is_same_v<X, rv>)
rv clamp(const X& x_, const L& lo_, const H& hi_) {
  rv x = lift(x_), lo = lift(lo_), hi = lift(hi_);
  const kind p = promoted(false, x, lo, hi), c = compute_of(p);
  x = to_compute(x, c);
  lo = to_compute(lo, c);
  hi = to_compute(hi, c);
  x.scalar = lo.scalar = hi.scalar = false;
  x.k = lo.k = hi.k = p;
  return minmax(false, minmax(true, x, lo), hi);
}

//! cond ? a : b; a and b are promoted together (the documented rule), cond
//! is any type, non-zero is true.
template <class C, class A, class B>
  requires(std::is_same_v<C, rv> || std::is_same_v<A, rv> || std::is_same_v<B, rv>)
rv where(const C& c_, const A& a_, const B& b_) {
  rv c = lift(c_), a = lift(a_), b = lift(b_);
  const kind p = promoted(false, a, b), k = compute_of(p);
  const int t = truth(c);
  if (t < 0) return dont_care(p);
  rv r = to_compute(t ? a : b, k);
  if (r.dc) return dont_care(p);
  r.k = p;
  r.scalar = false;
  return r;
}

//! Conversion to T: rounding to a floating T, truncation to an integer T
//! (don't care near an integer), != 0 for bool.
template <class T>
rv cast(rv a) {
  constexpr kind t = kind_of<T>();
  if (a.dc) return dont_care(t);
  a = to_compute(a, compute_of(a.k));
  if constexpr (t == kind::b) {
    return boolean(truth(a));
  } else if constexpr (is_float(t)) {
    rv out;
    out.k = t;
    if (!is_float(a.k)) {
      out.v = round_to(t, static_cast<double>(a.i));
      return out;
    }
    if (a.e == 0) {
      out.v = round_to(t, a.v);
      return out;
    }
    out.v = a.v;
    out.e = a.e + quantum(t, std::fabs(a.v) + a.e);
    return out;
  } else {
    if (!is_float(a.k)) return int_result(t, t, a.i);
    if (!std::isfinite(a.v)) return dont_care(t);
    const double tr = std::trunc(a.v);
    if (a.e > 0 && (std::fabs(a.v - tr) <= 2 * a.e || std::fabs(a.v - tr) >= 1 - 2 * a.e)) return dont_care(t);
    return int_result(t, t, static_cast<std::int64_t>(tr));
  }
}
}  // namespace loom_random::ref
