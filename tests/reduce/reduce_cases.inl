// SPDX-License-Identifier: Apache-2.0
// Reductions checked on both executors against plain double loops. The
// including file defines LOOM_TEST_SPACE, LOOM_TEST_TAG and LOOM_REDUCE_TYPES, and
// LOOM_REDUCE_PART (0, 1, 2) to compile one part of the cases (all without it).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <loom/reduce/reduce.hpp>

#include "loom_test.hpp"

using loom::index_t;
using space_t = LOOM_TEST_SPACE;

namespace {
constexpr bool on_device = std::is_same_v<space_t, loom::device>;
const double nan_v = std::numeric_limits<double>::quiet_NaN();
const double inf_v = std::numeric_limits<double>::infinity();

template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space(const loom::host_tensor<T, R>& h) {
  if constexpr (on_device)
    return loom::to_device(h);
  else
    return h;
}

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g, double lo = -4, double hi = 4) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::random_value<T>(g, lo, hi);
  return h;
}

// Sets about one element in `every` to zero (+0 or -0 for floating types),
// so that count_nonzero, any and all see zeros in every type; bool data is
// left as it is (half false already).
template <class T, std::size_t R>
void with_zeros(loom::host_tensor<T, R>& h, std::mt19937_64& g, unsigned every = 8) {
  if constexpr (!std::is_same_v<T, bool>)
    for (index_t i = 0; i < h.size(); ++i)
      if (g() % every == 0) h.data()[i] = (g() & 1) ? T(-0.0f) : T(0.0f);
}

// A result as doubles in row-major order, with its extents.
struct result {
  std::vector<double> v;
  std::vector<index_t> ext;
};
template <class X>
result values(const X& t) {
  const auto h = loom::to_host(t);
  result r;
  for (index_t i = 0; i < h.size(); ++i) r.v.push_back(loom_test::as_double(h.data()[i]));
  for (auto e : h.extents()) r.ext.push_back(e);
  return r;
}

const std::vector<std::string> all_ops = {"sum",   "mean",          "amax",    "amin",    "argmax",   "argmin",
                                          "any",   "all",           "count",   "l1",      "l2",       "linf",
                                          "var",   "stddev",        "var0",    "logsumexp", "prod"};

[[maybe_unused]] bool needs_elements(const std::string& op) {
  return op == "amax" || op == "amin" || op == "argmax" || op == "argmin";
}

// The op over the whole expression.
template <class X>
result run_full(const std::string& op, const X& e) {
  using namespace loom;
  if (op == "sum") return values(sum(e));
  if (op == "mean") return values(mean(e));
  if (op == "amax") return values(max(e));
  if (op == "amin") return values(min(e));
  if (op == "argmax") return values(argmax(e));
  if (op == "argmin") return values(argmin(e));
  if (op == "any") return values(any(e));
  if (op == "all") return values(all(e));
  if (op == "count") return values(count_nonzero(e));
  if (op == "l1") return values(l1_norm(e));
  if (op == "l2") return values(l2_norm(e));
  if (op == "linf") return values(linf_norm(e));
  if (op == "var") return values(var(e));
  if (op == "stddev") return values(stddev(e));
  if (op == "var0") return values(var(e, correction{0}));
  if (op == "logsumexp") return values(logsumexp(e));
  if (op == "prod") return values(prod(e));
  FAIL("unknown op " << op);
  return {};
}

// The op along one axis, with or without keepdims.
template <class X>
result run_axis(const std::string& op, const X& e, int axis, bool keep) {
  using namespace loom;
#define LOOM_AXIS_CASE(name, call)                                                      \
  if (op == name) return keep ? values(call(e, axis, keepdims)) : values(call(e, axis));
  LOOM_AXIS_CASE("sum", sum)
  LOOM_AXIS_CASE("mean", mean)
  LOOM_AXIS_CASE("amax", amax)
  LOOM_AXIS_CASE("amin", amin)
  LOOM_AXIS_CASE("argmax", argmax)
  LOOM_AXIS_CASE("argmin", argmin)
  LOOM_AXIS_CASE("any", any)
  LOOM_AXIS_CASE("all", all)
  LOOM_AXIS_CASE("count", count_nonzero)
  LOOM_AXIS_CASE("l1", l1_norm)
  LOOM_AXIS_CASE("l2", l2_norm)
  LOOM_AXIS_CASE("linf", linf_norm)
  LOOM_AXIS_CASE("var", var)
  LOOM_AXIS_CASE("stddev", stddev)
  LOOM_AXIS_CASE("logsumexp", logsumexp)
  LOOM_AXIS_CASE("prod", prod)
#undef LOOM_AXIS_CASE
  if (op == "var0") return keep ? values(var(e, axis, keepdims, correction{0})) : values(var(e, axis, correction{0}));
  FAIL("unknown op " << op);
  return {};
}

// The double reference of each op over the values of one reduced range.
[[maybe_unused]] double ref_op(const std::string& op, const std::vector<double>& v) {
  const auto n = static_cast<double>(v.size());
  double s = 0, a = 0, q = 0, p = 1;
  bool has_nan = false, any_nz = false, all_nz = true;
  double count = 0;
  for (double x : v) {
    s += x;
    a += std::fabs(x);
    q += x * x;
    p *= x;
    has_nan = has_nan || std::isnan(x);
    any_nz = any_nz || x != 0;
    all_nz = all_nz && x != 0;
    count += x != 0;
  }
  if (op == "sum") return s;
  if (op == "prod") return p;
  if (op == "mean") return s / n;
  if (op == "any") return any_nz;
  if (op == "all") return all_nz;
  if (op == "count") return count;
  if (op == "l1") return a;
  if (op == "l2") return std::sqrt(q);
  if (op == "amax" || op == "amin" || op == "linf" || op == "argmax" || op == "argmin") {
    const bool mx = op != "amin" && op != "argmin";
    std::size_t best = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double x = op == "linf" ? std::fabs(v[i]) : v[i];
      const double b = op == "linf" ? std::fabs(v[best]) : v[best];
      if (std::isnan(b)) break;
      if (std::isnan(x) || (mx ? x > b : x < b)) best = i;
    }
    if (op == "argmax" || op == "argmin") return static_cast<double>(best);
    if (v.empty()) return 0;  // linf of nothing
    return op == "linf" ? std::fabs(v[best]) : v[best];
  }
  if (op == "var" || op == "stddev" || op == "var0") {
    // Two passes in long double: a million-element double variance is then
    // the reference's error-free part, not a second rounding to compare with.
    long double ls = 0, m2 = 0;
    for (double x : v) ls += x;
    const long double mean = ls / n;
    for (double x : v) m2 += (x - mean) * (x - mean);
    const double var = static_cast<double>(m2 / std::max(0.0, n - (op == "var0" ? 0 : 1)));
    return op == "stddev" ? std::sqrt(var) : var;
  }
  if (op == "logsumexp") {
    if (v.empty()) return -inf_v;
    double mx = -inf_v;
    for (double x : v) mx = std::max(mx, x);
    if (has_nan) return nan_v;
    if (std::isinf(mx)) return mx;
    double e = 0;
    for (double x : v) e += std::exp(x - mx);
    return mx + std::log(e);
  }
  FAIL("unknown op " << op);
  return 0;
}

// Rounding of a result stored as T, relative to its magnitude.
template <class T>
double store_eps() {
  if constexpr (std::is_same_v<T, loom::half>)
    return 1.0 / 1024;
  else if constexpr (std::is_same_v<T, loom::bf16>)
    return 1.0 / 128;
  else
    return 0;
}
// Accumulation error, relative to the sum of magnitudes that entered.
template <class T>
double acc_eps() {
  return std::is_same_v<T, double> ? 1e-13 : 2e-6;
}

// The allowed error of op over values v (elements of type T) for a result
// `want`; `plain`: v are stored elements (not an expression's values), so
// max, min and the L-inf norm pick one of them and must match it exactly.
template <class T>
double tolerance(const std::string& op, const std::vector<double>& v, double want, bool plain) {
  if (std::isnan(want) || std::isinf(want)) return 0;
  const bool fl = loom::is_floating_v<T>;
  double a = 0, q = 0;
  for (double x : v) a += std::fabs(x), q += x * x;
  const double n = std::max<double>(1, static_cast<double>(v.size()));
  const double se = fl ? store_eps<T>() : 0;
  const double ae = acc_eps<T>();
  if (op == "sum") return fl ? se * std::fabs(want) + ae * a : 0;
  if (op == "l1") return se * want + ae * a + (fl ? 0 : 1e-6 * a);
  // Integers are summed exactly (in double for 64-bit ones, exact below
  // 2^53) and divided once: half an ulp of float, and the double division's.
  if (op == "mean") return fl ? se * std::fabs(want) + ae * a / n + 1e-7 * a / n : 0x1.0001p-24 * std::fabs(want);
  if (op == "l2") return se * want + 4 * ae * want;
  if (op == "var" || op == "var0") return se * want + 8 * ae * q / n;
  if (op == "stddev") return se * want + 8 * ae * std::sqrt(q / n);
  if (op == "logsumexp") return se * std::fabs(want) + 8 * ae * (1 + std::fabs(want));
  // Each factor rounds once (the tests' long products are of +-1 only, exact).
  if (op == "prod") return fl ? se * std::fabs(want) + 4 * ae * std::min(n, 64.0) * std::fabs(want) : 0;
  if (op == "amax" || op == "amin" || op == "linf") return plain ? 0 : se * std::fabs(want);  // rounds once on store
  return 0;  // arg*, any, all, count: exact
}

[[maybe_unused]] bool close(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol;
}

// Coordinates of row-major position i in shape s.
template <std::size_t R>
std::array<index_t, R> unravel(index_t i, const loom::shape<R>& s) {
  std::array<index_t, R> c{};
  for (std::size_t d = R; d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

// Reference of op over the axes marked in `red` of a rank-R array given by
// val(coords): one vector of values per output, in row-major output order.
template <std::size_t R, class Val>
std::vector<std::vector<double>> gather_ref(const loom::shape<R>& ext, const std::array<bool, R>& red, Val val) {
  index_t outputs = 1;
  for (std::size_t d = 0; d != R; ++d)
    if (!red[d]) outputs *= ext[d];
  std::vector<std::vector<double>> segs(static_cast<std::size_t>(outputs));
  index_t n = 1;
  for (auto e : ext) n *= e;
  for (index_t i = 0; i < n; ++i) {
    const auto c = unravel(i, ext);
    index_t o = 0;
    for (std::size_t d = 0; d != R; ++d)
      if (!red[d]) o = o * ext[d] + c[d];
    segs[static_cast<std::size_t>(o)].push_back(val(c));
  }
  return segs;
}

template <class T>
void check_result(const std::string& op, const result& got, const std::vector<std::vector<double>>& segs,
                  bool plain = false) {
  REQUIRE(got.v.size() == segs.size());
  for (std::size_t o = 0; o < segs.size(); ++o) {
    double want = ref_op(op, segs[o]);
    // A result beyond half's range is stored as an infinity.
    if (std::is_same_v<T, loom::half> && std::fabs(want) > 65519.0 && op != "argmax" && op != "argmin" &&
        op != "count")
      want = want > 0 ? inf_v : -inf_v;
    const double tol = tolerance<T>(op, segs[o], want, plain);
    if (!close(got.v[o], want, tol)) {
      INFO(op << ": output " << o << " of " << segs.size() << " (" << segs[o].size() << " elements): got "
              << got.v[o] << ", want " << want << ", off by " << got.v[o] - want << ", tolerance " << tol);
      CHECK(close(got.v[o], want, tol));
    }
  }
}
// Values far from zero: c + U(-w, w) with c large against the spread, so
// that E[x^2] - E[x]^2 in the accumulation type loses the variance (float:
// c = 1000, w = 1, relative error about 0.2; double: c = 1e8; half: c =
// 30000 in steps of 16) where a Welford / Chan merge keeps it. bf16's 8
// bits cannot hold such a ratio (c / w is at most about 256): a sanity check.
template <class T>
std::pair<double, double> far_center() {
  if constexpr (std::is_same_v<T, double>)
    return {1e8, 1};
  else if constexpr (std::is_same_v<T, loom::half>)
    return {30000, 16};
  else if constexpr (std::is_same_v<T, loom::bf16>)
    return {1000, 64};
  else
    return {1000, 1};
}
template <class T, std::size_t R>
loom::host_tensor<T, R> far_from_zero(const loom::shape<R>& s, std::mt19937_64& g, double sign = 1) {
  const auto [c, w] = far_center<T>();
  return random_host<T, R>(s, g, sign * c - w, sign * c + w);
}
// The variance's own error bound: relative to the result, not to E[x^2]
// (measured on the host, 2026-12-02: at most 2.6e-5 for float, 1.7e-8 for
// double, beside the rounding of a half or bf16 result).
template <class T>
void check_moment(const std::string& op, const result& got, const std::vector<std::vector<double>>& segs) {
  REQUIRE(got.v.size() == segs.size());
  // Plus the result's own rounding when it is stored as half or bf16.
  const double rel = (std::is_same_v<T, double> ? 1e-6 : 2e-3) + store_eps<T>();
  for (std::size_t o = 0; o < segs.size(); ++o) {
    const double want = ref_op(op, segs[o]);
    if (std::isnan(want)) {  // a range holding a NaN
      CHECK(std::isnan(got.v[o]));
      continue;
    }
    if (!(std::fabs(got.v[o] - want) <= rel * want)) {
      INFO(op << ": output " << o << " of " << segs.size() << ": got " << got.v[o] << ", want " << want
              << ", relative error " << (got.v[o] - want) / want << ", allowed " << rel);
      CHECK(std::fabs(got.v[o] - want) <= rel * want);
    }
  }
}
}  // namespace

#if !defined(LOOM_REDUCE_PART) || LOOM_REDUCE_PART == 0
TEMPLATE_TEST_CASE("every reduction of the whole tensor matches a double reference at every length",
                   "[reduce]" LOOM_TEST_TAG, LOOM_REDUCE_TYPES) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("reduce full"));
  // 1024: whole tiles of CUB's kernels, so a read past a tile's end would
  // leave the tensor (compute-sanitizer runs this test on a GPU).
  for (index_t n : {index_t{0}, index_t{1}, index_t{31}, index_t{32}, index_t{33}, index_t{1000}, index_t{1024},
                    (index_t{1} << 20) + 3}) {
    auto h = random_host<T, 1>({n}, g);
    // prod of many values over- or underflows: its inputs are short or +-1.
    // Integer products of up to 40 factors in [-4, 4] pass int64's range
    // (4^33 = 2^66) and a double reference stops being exact, so a test of
    // them passed only because each tensor held a 0 (until 2026-12-02).
    // Factors of +-1 and +-2, never 0: at most 2^40, exact in both. Longer
    // products (and bool's) are of +-1 only: exactly +-1 whatever the order.
    loom::host_tensor<T, 1> hp({n});
    for (index_t i = 0; i < n; ++i) {
      const T pm1 = std::is_same_v<T, bool> ? T(true) : static_cast<T>(g() % 2 ? 1 : -1);
      if (n > 40)
        hp.data()[i] = pm1;
      else
        hp.data()[i] = std::is_integral_v<T> && !std::is_same_v<T, bool>
                           ? static_cast<T>(static_cast<int>(g() % 2 + 1) * (g() % 2 ? 1 : -1))
                           : h.data()[i];
    }
    auto xp = in_space(hp);
    with_zeros(h, g);  // not in prod's inputs
    auto x = in_space(h);
    for (const auto& op : all_ops) {
      INFO(op << " of " << n << " elements of " << loom::dtype_name(loom::dtype_of<T>));
      const auto& hin = op == "prod" ? hp : h;
      const auto& xin = op == "prod" ? xp : x;
      if (n == 0 && needs_elements(op)) {
        CHECK_THROWS_AS(run_full(op, xin), loom::value_error);
        continue;
      }
      const auto got = run_full(op, xin);
      CHECK(got.ext.empty());  // a 0-d tensor
      std::vector<double> v;
      for (index_t i = 0; i < n; ++i) v.push_back(loom_test::as_double(hin.data()[i]));
      check_result<T>(op, got, {v}, true);
      // The same tensor one element in: contiguous but not 16-byte aligned
      // (on the device CUB's pointer kernel then loads element by element,
      // or the expression takes the coordinates path).
      if (n > 1) {
        const auto got1 = run_full(op, xin.view().slice(loom::range(1, loom::none)));
        check_result<T>(op, got1, {std::vector<double>(v.begin() + 1, v.end())}, true);
      }
    }
  }
}

TEST_CASE("a whole reduction of a plain tensor of 4- or 8-byte numbers hands CUB the tensor's pointer",
          "[reduce]" LOOM_TEST_TAG) {
  // The device then runs CUB's own vectorized kernel (docs/03_reductions.md);
  // fused expressions, 1- and 2-byte types and argmax/argmin (whose items
  // carry their position) hand CUB 16-byte items instead.
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using leaf_f = node_t<loom::tensor<float, 2, space_t>>;
  using leaf_view_i = node_t<loom::view<const std::int32_t, 3, space_t>>;
  using leaf_h = node_t<loom::tensor<loom::half, 1, space_t>>;
  using leaf_b = node_t<loom::tensor<bool, 1, space_t>>;
  using fused = node_t<decltype(std::declval<const loom::tensor<float, 2, space_t>&>() * 2.0f)>;
  STATIC_REQUIRE(reduces_by_pointer<sum_op<float>, leaf_f>);
  STATIC_REQUIRE(reduces_by_pointer<max_op<float>, leaf_f>);
  STATIC_REQUIRE(reduces_by_pointer<var_op<float, false>, leaf_f>);  // a 16-byte accumulator
  STATIC_REQUIRE(reduces_by_pointer<logsumexp_op<double>, node_t<loom::tensor<double, 1, space_t>>>);  // 16 bytes
  // var of double: a 24-byte accumulator, fewer items per thread than CUB's vectors hold.
  STATIC_REQUIRE_FALSE(reduces_by_pointer<var_op<double, false>, node_t<loom::tensor<double, 1, space_t>>>);
  STATIC_REQUIRE_FALSE(reduces_by_pointer<var_op<double, true>, node_t<loom::tensor<double, 1, space_t>>>);
  STATIC_REQUIRE(reduces_by_pointer<sum_op<std::int32_t>, leaf_view_i>);
  STATIC_REQUIRE(reduces_by_pointer<sum_op<double>, node_t<loom::tensor<double, 1, space_t>>>);
  STATIC_REQUIRE_FALSE(reduces_by_pointer<argmax_op<float>, leaf_f>);
  STATIC_REQUIRE_FALSE(reduces_by_pointer<sum_op<loom::half>, leaf_h>);
  STATIC_REQUIRE_FALSE(reduces_by_pointer<any_op<bool>, leaf_b>);
  STATIC_REQUIRE_FALSE(reduces_by_pointer<sum_op<std::int8_t>, node_t<loom::tensor<std::int8_t, 1, space_t>>>);
  STATIC_REQUIRE_FALSE(reduces_by_pointer<sum_op<float>, fused>);
}


TEMPLATE_TEST_CASE("var, std and logsumexp of a whole tensor stay accurate far from zero", "[reduce]" LOOM_TEST_TAG,
                   LOOM_REDUCE_TYPES) {
  using T = TestType;
  if constexpr (loom::is_floating_v<T>) {
    std::mt19937_64 g(loom_test::seed_for("reduce far whole"));
    for (index_t n : {index_t{1000}, (index_t{1} << 20) + 3}) {
      for (double sign : {1.0, -1.0}) {
        INFO(n << " elements of " << loom::dtype_name(loom::dtype_of<T>) << " near " << sign * far_center<T>().first);
        const auto h = far_from_zero<T, 1>({n}, g, sign);
        const auto x = in_space(h);
        std::vector<double> v;
        for (index_t i = 0; i < n; ++i) v.push_back(loom_test::as_double(h.data()[i]));
        for (const std::string op : {"var", "stddev", "var0"}) check_moment<T>(op, run_full(op, x), {v});
        // exp(x) alone overflows (or underflows) float here: the running maximum comes first.
        check_result<T>("logsumexp", run_full("logsumexp", x), {v});
        for (const std::string op : {"mean", "amax", "amin", "linf"}) check_result<T>(op, run_full(op, x), {v}, true);
      }
      // Two NaNs late in the range: every NaN-propagating reduction gives
      // NaN (also where CUB combines partial results) and argmax/argmin the
      // first of them.
      auto hn = far_from_zero<T, 1>({n}, g);
      const index_t first_nan = n - n / 3 - 1;
      hn.data()[first_nan] = T(std::numeric_limits<float>::quiet_NaN());
      hn.data()[n - 2] = T(std::numeric_limits<float>::quiet_NaN());
      const auto xn = in_space(hn);
      for (const std::string op : {"amax", "amin", "linf", "logsumexp", "var", "sum"}) {
        INFO(op << " of " << n << " elements with NaNs");
        CHECK(std::isnan(run_full(op, xn).v.at(0)));
      }
      CHECK(run_full("argmax", xn).v.at(0) == static_cast<double>(first_nan));
      CHECK(run_full("argmin", xn).v.at(0) == static_cast<double>(first_nan));
    }
  }
}
#endif
#if !defined(LOOM_REDUCE_PART) || LOOM_REDUCE_PART == 1
TEMPLATE_TEST_CASE("reductions along first, middle and last axes of 3-D and 4-D views match references",
                   "[reduce]" LOOM_TEST_TAG, LOOM_REDUCE_TYPES) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("reduce axes"));
  // A 4-D base; the views below are a contiguous 3-D tensor, a strided
  // (sliced, permuted) 4-D view and an expression with a broadcast operand.
  auto h3 = random_host<T, 3>({7, 33, 5}, g);
  with_zeros(h3, g);
  auto x3 = in_space(h3);
  auto h4 = random_host<T, 4>({4, 6, 9, 34}, g);
  with_zeros(h4, g);
  auto x4 = in_space(h4);
  const auto v4 = x4.view().slice(loom::whole, loom::range(0, loom::none, 2), loom::whole, loom::range(1, 34, 2))
                      .permute({0, 2, 1, 3});  // shape [4, 9, 3, 17], strided
  auto hb = random_host<T, 1>({5}, g);
  auto b = in_space(hb);
  for (const auto& op : all_ops) {
    if (op == "prod") continue;  // checked with values near 1 below
    for (int axis : {0, 1, 2, -1}) {
      for (bool keep : {false, true}) {
        INFO(op << " along axis " << axis << (keep ? " (keepdims)" : ""));
        {
          const auto got = run_axis(op, x3, axis, keep);
          std::array<bool, 3> red{};
          red[static_cast<std::size_t>(axis < 0 ? axis + 3 : axis)] = true;
          check_result<T>(
              op, got,
              gather_ref(h3.extents(), red, [&](auto c) { return loom_test::as_double(h3(c[0], c[1], c[2])); }),
              true);
          CHECK(got.ext.size() == (keep ? 3u : 2u));
        }
        {
          const auto got = run_axis(op, v4, axis, keep);
          std::array<bool, 4> red{};
          red[static_cast<std::size_t>(axis < 0 ? axis + 4 : axis)] = true;
          check_result<T>(op, got, gather_ref(v4.extents(), red, [&](auto c) {
                            return loom_test::as_double(h4(c[0], 2 * c[2], c[1], 1 + 2 * c[3]));
                          }), true);
          if (keep) CHECK(got.ext.size() == 4u);
        }
      }
    }
  }
  // A fused expression with a broadcast operand, along each axis and a set of axes.
  if constexpr (loom::is_floating_v<T>) {
    // The expression's values in its compute type (float for half/bf16): reductions take them unrounded.
    using C = loom::compute_t<T>;
    auto val = [&](auto c) {
      return static_cast<double>(static_cast<C>(h3(c[0], c[1], c[2])) * C(2) - static_cast<C>(hb(c[2])));
    };
    for (const auto& op : {std::string("sum"), std::string("amax"), std::string("var"), std::string("argmin")}) {
      for (int axis : {0, 1, 2}) {
        INFO(op << " of x * 2 - b along axis " << axis);
        std::array<bool, 3> red{};
        red[static_cast<std::size_t>(axis)] = true;
        check_result<T>(op, run_axis(op, x3 * 2.0f - b, axis, false), gather_ref(h3.extents(), red, val));
      }
    }
    const auto got = values(loom::sum(x3 * 2.0f - b, {0, 2}));
    CHECK(got.ext == std::vector<index_t>{33});
    check_result<T>("sum", got, gather_ref(h3.extents(), std::array<bool, 3>{true, false, true}, val));
    const auto gotk = values(loom::mean(x3 * 2.0f - b, {2, 0}, loom::keepdims));
    CHECK(gotk.ext == std::vector<index_t>{1, 33, 1});
    check_result<T>("mean", gotk, gather_ref(h3.extents(), std::array<bool, 3>{true, false, true}, val));
    const auto gotm = values(loom::amax(v4, {1, 3}));
    CHECK(gotm.ext == std::vector<index_t>{4, 3});
    check_result<T>("amax", gotm, gather_ref(v4.extents(), std::array<bool, 4>{false, true, false, true}, [&](auto c) {
                      return loom_test::as_double(h4(c[0], 2 * c[2], c[1], 1 + 2 * c[3]));
                    }), true);
  }
}


TEMPLATE_TEST_CASE("reductions along long axes: far from zero, integer sums past int32, sparse zeros and +-1 products",
                   "[reduce]" LOOM_TEST_TAG, LOOM_REDUCE_TYPES) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("reduce long axes"));
  // Axis 0 (33 long, across rows) and axis 2 (1000 long, along rows) of [33, 5, 1000].
  const loom::shape<3> s{33, 5, 1000};
  auto at = [](const loom::host_tensor<T, 3>& h) {
    return [&h](auto c) { return loom_test::as_double(h(c[0], c[1], c[2])); };
  };
  auto along = [&](int axis) {
    std::array<bool, 3> red{};
    red[static_cast<std::size_t>(axis)] = true;
    return red;
  };
  if constexpr (loom::is_floating_v<T>) {
    for (double sign : {1.0, -1.0}) {
      const auto h = far_from_zero<T, 3>(s, g, sign);
      const auto x = in_space(h);
      for (int axis : {0, 2}) {
        INFO(loom::dtype_name(loom::dtype_of<T>) << " near " << sign * far_center<T>().first << ", axis " << axis);
        const auto segs = gather_ref(s, along(axis), at(h));
        for (const std::string op : {"var", "stddev", "var0"}) check_moment<T>(op, run_axis(op, x, axis, false), segs);
        for (const std::string op : {"sum", "mean", "logsumexp"}) check_result<T>(op, run_axis(op, x, axis, false), segs);
        for (const std::string op : {"amax", "amin", "argmax", "linf"})
          check_result<T>(op, run_axis(op, x, axis, false), segs, true);
      }
    }
    // Sparse NaNs (about 1 in 2000: some outputs see one, most none), across
    // and along rows: the NaN-propagating reductions and arg* against the reference.
    auto hn = far_from_zero<T, 3>(s, g);
    for (index_t i = 0; i < hn.size(); ++i)
      if (g() % 2000 == 0) hn.data()[i] = T(std::numeric_limits<float>::quiet_NaN());
    const auto xn = in_space(hn);
    for (int axis : {0, 2}) {
      INFO("sparse NaNs along axis " << axis);
      const auto segs = gather_ref(s, along(axis), at(hn));
      for (const std::string op : {"amax", "amin", "argmax", "argmin", "linf", "logsumexp"})
        check_result<T>(op, run_axis(op, xn, axis, false), segs, true);
      check_moment<T>("var", run_axis("var", xn, axis, false), segs);
    }
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Sums past T's range: int32 values near +-2^30 (a column of 33 passes
    // 2^31, a row of 1000 reaches 2^40), int8 values near +-100; exact in int64.
    loom::host_tensor<T, 3> h(s);
    const double big = sizeof(T) >= 4 ? 1073741824.0 : 100.0;
    for (index_t i = 0; i < h.size(); ++i)
      h.data()[i] = static_cast<T>((g() % 4 ? 1 : -1) * (big - static_cast<double>(g() % 27)));
    const auto x = in_space(h);
    for (int axis : {0, 2}) {
      INFO("sum of " << loom::dtype_name(loom::dtype_of<T>) << " along axis " << axis);
      check_result<T>("sum", run_axis("sum", x, axis, false), gather_ref(s, along(axis), at(h)));
    }
  }
  // Products of +-1 (true for bool) along both axes: exactly +-1.
  {
    loom::host_tensor<T, 3> h(s);
    for (index_t i = 0; i < h.size(); ++i)
      h.data()[i] = std::is_same_v<T, bool> ? T(true) : static_cast<T>(g() % 2 ? 1 : -1);
    const auto x = in_space(h);
    for (int axis : {0, 2}) {
      INFO("prod along axis " << axis);
      check_result<T>("prod", run_axis("prod", x, axis, false), gather_ref(s, along(axis), at(h)));
    }
  }
  // Sparse zeros and sparse non-zeros (+-0 for floating types; each about 1
  // in 300): any, all and count_nonzero see both outcomes along long rows.
  for (bool sparse_nonzero : {false, true}) {
    loom::host_tensor<T, 3> h(s);
    for (index_t i = 0; i < h.size(); ++i) {
      const bool nz = (g() % 300 == 0) == sparse_nonzero;
      h.data()[i] = nz ? (std::is_same_v<T, bool> ? T(true) : static_cast<T>(1 + static_cast<int>(g() % 7)))
                       : ((g() & 1) ? T(-0.0f) : T(0.0f));
    }
    const auto x = in_space(h);
    for (int axis : {0, 2}) {
      INFO((sparse_nonzero ? "sparse non-zeros" : "sparse zeros") << " along axis " << axis);
      const auto segs = gather_ref(s, along(axis), at(h));
      for (const std::string op : {"any", "all", "count"}) check_result<T>(op, run_axis(op, x, axis, false), segs);
    }
  }
}
#endif
#if !defined(LOOM_REDUCE_PART) || LOOM_REDUCE_PART == 2
TEMPLATE_TEST_CASE("prod matches a double reference along axes", "[reduce]" LOOM_TEST_TAG, float, double,
                   std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("reduce prod"));
  loom::host_tensor<T, 3> h({5, 7, 3});
  for (index_t i = 0; i < h.size(); ++i)
    h.data()[i] = std::is_integral_v<T> ? static_cast<T>(static_cast<int>(g() % 5) - 2)
                                        : static_cast<T>(0.8 + 0.4 * static_cast<double>(g() % 1000) / 1000);
  auto x = in_space(h);
  for (int axis : {0, 1, 2}) {
    std::array<bool, 3> red{};
    red[static_cast<std::size_t>(axis)] = true;
    check_result<T>("prod", run_axis("prod", x, axis, false),
                    gather_ref(h.extents(), red, [&](auto c) { return static_cast<double>(h(c[0], c[1], c[2])); }));
  }
}

TEST_CASE("axis reductions of tall, long and few-row matrices match references in one or two launches",
          "[reduce]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("reduce tall"));
  // Across rows: 1000 rows of 7 run in 15 chunks on any GPU (at most
  // 1000 / (4 lanes x 16) chunks; 16 blocks per SM wanted), so the device
  // takes two launches (partials, then their combination); along rows of
  // 4099 (every row start unaligned but the first), one; 2 rows of 40001 in
  // 4 chunks (at most 40001 / 8192), two.
  auto ht = random_host<float, 2>({1000, 7}, g);
  auto hl = random_host<float, 2>({3, 4099}, g);
  auto hf = random_host<float, 2>({2, 40001}, g);
  auto t = in_space(ht);
  auto l = in_space(hl);
  auto f = in_space(hf);
  auto at = [](const auto& h) { return [&h](auto c) { return static_cast<double>(h(c[0], c[1])); }; };
  for (const std::string op : {"sum", "argmin", "var", "logsumexp"}) {
    INFO(op);
    auto before = loom::launches();
    const auto across = run_axis(op, t * 1.5f, 0, false);
    auto after = loom::launches();
    CHECK((on_device ? after.device - before.device : after.host - before.host) == (on_device ? 2 : 1));
    check_result<float>(op, across, gather_ref(ht.extents(), std::array<bool, 2>{true, false}, [&](auto c) {
                          return static_cast<double>(ht(c[0], c[1]) * 1.5f);
                        }));
    before = loom::launches();
    const auto along = run_axis(op, l, 1, false);
    after = loom::launches();
    CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
    check_result<float>(op, along, gather_ref(hl.extents(), std::array<bool, 2>{false, true}, at(hl)));
    before = loom::launches();
    const auto few = run_axis(op, f, 1, false);
    after = loom::launches();
    CHECK((on_device ? after.device - before.device : after.host - before.host) == (on_device ? 2 : 1));
    check_result<float>(op, few, gather_ref(hf.extents(), std::array<bool, 2>{false, true}, at(hf)));
    // Many short rows: on the device a thread per output for rows of at
    // most 32 (rows of 4 are one 16-byte vector each, rows of 3 start at
    // every alignment), a warp per output for 33; one launch each.
    for (index_t cols : {3, 4, 32, 33}) {
      INFO(cols << " columns");
      auto hs = random_host<float, 2>({4099, cols}, g);
      auto sx = in_space(hs);
      before = loom::launches();
      const auto rows = run_axis(op, sx, 1, false);
      after = loom::launches();
      CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
      check_result<float>(op, rows, gather_ref(hs.extents(), std::array<bool, 2>{false, true}, at(hs)));
    }
  }
}

TEST_CASE("reductions are bitwise deterministic run to run", "[reduce]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("reduce determinism"));
  auto h = random_host<float, 2>({1025, 1027}, g);
  auto x = in_space(h);
  const float s1 = loom::item(loom::sum(x * x - 1.0f));
  const float s2 = loom::item(loom::sum(x * x - 1.0f));
  CHECK(loom_test::same_bits(s1, s2));
  const auto v1 = loom::to_host(loom::var(x, 0));
  const auto v2 = loom::to_host(loom::var(x, 0));
  CHECK(std::memcmp(v1.data(), v2.data(), v1.nbytes()) == 0);
  const auto l1 = loom::to_host(loom::logsumexp(x, 1));
  const auto l2 = loom::to_host(loom::logsumexp(x, 1));
  CHECK(std::memcmp(l1.data(), l2.data(), l1.nbytes()) == 0);
}

TEST_CASE("2^25 float ones sum to exactly 2^25 where a naive float loop stalls at 2^24", "[reduce]" LOOM_TEST_TAG) {
  const index_t n = index_t{1} << 25;
  float naive = 0;
  for (index_t i = 0; i < n; ++i) naive += 1.0f;
  CHECK(naive == 16777216.0f);  // the stall a tree reduction avoids
  loom::host_tensor<float, 1> h({n});
  std::fill(h.data(), h.data() + n, 1.0f);
  auto x = in_space(h);
  CHECK(loom::item(loom::sum(x)) == 33554432.0f);
  CHECK(loom::item(loom::mean(x)) == 1.0f);
  // Along an axis too, and over a broadcast view that holds a single 1.
  CHECK(loom::item(loom::sum(x.view().reshape(loom::shape<2>{1, n}), 1)) == 33554432.0f);
  loom::host_tensor<float, 1> one({1}, {1.0f});
  auto o = in_space(one);
  CHECK(loom::item(loom::sum(o.view().broadcast_to(loom::shape<1>{n}))) == 33554432.0f);
}

TEST_CASE("empty reductions give the identity or a clear error", "[reduce]" LOOM_TEST_TAG) {
  auto x = in_space(loom::host_tensor<float, 2>({0, 3}));
  CHECK(loom::item(loom::sum(x)) == 0.0f);
  CHECK(loom::item(loom::prod(x)) == 1.0f);
  CHECK(std::isnan(loom::item(loom::mean(x))));
  CHECK(loom::item(loom::any(x)) == false);
  CHECK(loom::item(loom::all(x)) == true);
  CHECK(loom::item(loom::count_nonzero(x)) == 0);
  CHECK(loom::item(loom::l2_norm(x)) == 0.0f);
  CHECK(loom::item(loom::logsumexp(x)) == -std::numeric_limits<float>::infinity());
  // The variance of nothing is NaN whatever the correction, a negative one
  // (divisor max(0, 0 - c) = -c) included.
  for (const double c : {1.0, 0.0, -1.0, -2.5}) {
    INFO("correction " << c);
    CHECK(std::isnan(loom::item(loom::var(x, loom::correction{c}))));
    CHECK(std::isnan(loom::item(loom::stddev(x, loom::correction{c}))));
    const auto v = values(loom::var(x, 0, loom::correction{c}));
    CHECK(v.v.size() == 3);
    for (const double e : v.v) CHECK(std::isnan(e));
  }
  CHECK_THROWS_WITH(loom::max(x), Catch::Matchers::StartsWith("loom: max() over an empty range"));
  CHECK_THROWS_WITH(loom::argmax(x), Catch::Matchers::Contains("argmax") && Catch::Matchers::Contains("[0, 3]"));
  // Reducing the empty axis: one identity per output.
  const auto s = values(loom::sum(x, 0));
  CHECK(s.v == std::vector<double>{0, 0, 0});
  CHECK_THROWS_AS(loom::amin(x, 0), loom::value_error);
  // The message names the function called (amax, not the max it shares kernels with).
  CHECK_THROWS_WITH(loom::amax(x, 0, loom::keepdims), Catch::Matchers::StartsWith("loom: amax() over an empty range"));
  // Reducing a non-empty axis of an empty tensor: an empty result, no error.
  const auto m = values(loom::amax(x, 1));
  CHECK(m.ext == std::vector<index_t>{0});
}

TEMPLATE_TEST_CASE("NaN propagates through max and min; argmax of ties is the first index", "[reduce]" LOOM_TEST_TAG,
                   float, double, loom::half, loom::bf16) {
  using T = TestType;
  loom::host_tensor<T, 2> h({2, 5}, {T(1.0f), T(3.0f), T(3.0f), T(-2.0f), T(3.0f),  //
                                     T(1.0f), T(std::numeric_limits<float>::quiet_NaN()), T(5.0f), T(-7.0f),
                                     T(std::numeric_limits<float>::quiet_NaN())});
  auto x = in_space(h);
  const auto mx = values(loom::amax(x, 1));
  CHECK(mx.v[0] == 3.0);
  CHECK(std::isnan(mx.v[1]));
  CHECK(std::isnan(values(loom::amin(x, 1)).v[1]));
  CHECK(std::isnan(loom_test::as_double(loom::item(loom::max(x)))));
  CHECK(values(loom::argmax(x, 1)).v == std::vector<double>{1, 1});  // first of the tied 3s; first NaN
  CHECK(values(loom::argmin(x, 1)).v == std::vector<double>{3, 1});
  CHECK(loom::item(loom::argmax(x)) == 6);
  CHECK(std::isnan(loom_test::as_double(loom::item(loom::linf_norm(x)))));
  const auto first = x.view().slice(0);
  CHECK(loom::item(loom::argmax(first)) == 1);
  CHECK(loom::item(loom::argmin(first)) == 3);
}

TEMPLATE_TEST_CASE("logsumexp, argmax and argmin of rows with infinities, NaN and ties", "[reduce]" LOOM_TEST_TAG,
                   float, double) {
  using T = TestType;
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  // Each row one case; the wanted values are worked out by hand.
  loom::host_tensor<T, 2> h({7, 6}, {T(1), inf, T(2), T(3), -inf, T(0),       // +inf decides
                                     -inf, -inf, -inf, -inf, -inf, -inf,      // all -inf: ties, first index
                                     T(1), nan, T(2), nan, inf, T(0),         // NaN beats inf; first NaN
                                     -inf, T(5), -inf, T(5), T(-1), T(5),     // ties of the maximum
                                     inf, inf, -inf, T(1), inf, T(0),         // +inf and -inf together
                                     -inf, -inf, T(2), -inf, -inf, -inf,      // one finite value
                                     T(-0.0), T(0), T(-3), T(-3), T(0), T(-0.0)});  // -0 == +0: a tie
  const std::vector<double> lse = {static_cast<double>(inf), -static_cast<double>(inf), nan_v,
                                   5 + std::log(3 + std::exp(-6.0)), static_cast<double>(inf), 2,
                                   std::log(4 + 2 * std::exp(-3.0))};
  const std::vector<double> amax = {1, 0, 1, 1, 0, 2, 0}, amin = {4, 0, 1, 0, 2, 0, 2};
  const auto x = in_space(h);
  const auto l = values(loom::logsumexp(x, 1));
  const auto mx = values(loom::argmax(x, 1)), mn = values(loom::argmin(x, -1));
  for (std::size_t r = 0; r < 7; ++r) {
    INFO("row " << r);
    if (std::isnan(lse[r]) || std::isinf(lse[r])) {
      CHECK((std::isnan(lse[r]) ? std::isnan(l.v[r]) : l.v[r] == lse[r]));
    } else {
      CHECK(std::fabs(l.v[r] - lse[r]) <= 1e-6 * std::fabs(lse[r]) + 1e-6);
    }
    CHECK(mx.v[r] == amax[r]);
    CHECK(mn.v[r] == amin[r]);
    // The same rows through the whole-tensor path.
    const auto row = x.view().slice(static_cast<index_t>(r));
    const double whole = loom_test::as_double(loom::item(loom::logsumexp(row)));
    CHECK((std::isnan(lse[r]) ? std::isnan(whole) : (std::isinf(lse[r]) ? whole == lse[r]
                                                                         : std::fabs(whole - lse[r]) <= 1e-5)));
    CHECK(loom::item(loom::argmax(row)) == static_cast<std::int64_t>(amax[r]));
    CHECK(loom::item(loom::argmin(row)) == static_cast<std::int64_t>(amin[r]));
  }
  // Over everything: the first NaN (row 2, column 1) wins.
  CHECK(std::isnan(loom_test::as_double(loom::item(loom::logsumexp(x)))));
  CHECK(loom::item(loom::argmax(x)) == 13);
  CHECK(loom::item(loom::argmin(x)) == 13);
}

TEST_CASE("integer and bool sums accumulate in int64; half and bf16 in float", "[reduce]" LOOM_TEST_TAG) {
  STATIC_REQUIRE(std::is_same_v<loom::sum_result_t<std::int32_t>, std::int64_t>);
  STATIC_REQUIRE(std::is_same_v<loom::sum_result_t<bool>, std::int64_t>);
  STATIC_REQUIRE(std::is_same_v<loom::sum_result_t<loom::half>, loom::half>);
  STATIC_REQUIRE(std::is_same_v<loom::float_result_t<std::int8_t>, float>);
  STATIC_REQUIRE(std::is_same_v<loom::accumulate_t<loom::bf16>, float>);
  loom::host_tensor<std::int32_t, 1> hi({4}, {1 << 30, 1 << 30, 1 << 30, 1 << 30});
  auto xi = in_space(hi);
  auto si = loom::sum(xi);
  STATIC_REQUIRE(std::is_same_v<typename decltype(si)::value_type, std::int64_t>);
  CHECK(loom::item(si) == (std::int64_t{1} << 32));
  CHECK(loom::item(loom::sum(xi > 0)) == 4);
  CHECK(loom::item(loom::mean(xi)) == static_cast<float>(1 << 30));
  // The mean of integers is the correctly rounded one: {2^24 + 1, 2^25 + 3,
  // 2^25 + 3} has the exact mean 27962029, which rounds (a tie, to even) to
  // 27962028; summed in float, in any order, it comes out 27962030. And the
  // mean of 2^24 + 1 ones is 1.
  {
    loom::host_tensor<std::int32_t, 1> three({3}, {(1 << 24) + 1, (1 << 25) + 3, (1 << 25) + 3});
    CHECK(loom::item(loom::mean(in_space(three))) == 27962028.0f);
    loom::host_tensor<std::int32_t, 1> ones({(index_t{1} << 24) + 1});
    std::fill(ones.data(), ones.data() + ones.size(), 1);
    CHECK(loom::item(loom::mean(in_space(ones))) == 1.0f);
    // int64 values near 1.7e18 (nanosecond timestamps): an int64 sum of six
    // wraps; the double sum does not.
    const std::int64_t t0 = 1700000000000000000;
    loom::host_tensor<std::int64_t, 1> stamps({6}, {t0, t0 + 1000, t0 + 2000, t0 + 3000, t0 + 4000, t0 + 5000});
    CHECK(loom::item(loom::mean(in_space(stamps))) == static_cast<float>(1.7e18 + 2500.0));
  }

  // 4096 half ones: a half accumulator would stall at 2048.
  loom::host_tensor<loom::half, 1> hh({4096});
  std::fill(hh.data(), hh.data() + 4096, loom::half(1.0f));
  auto xh = in_space(hh);
  auto sh = loom::sum(xh);
  STATIC_REQUIRE(std::is_same_v<typename decltype(sh)::value_type, loom::half>);
  CHECK(static_cast<float>(loom::item(sh)) == 4096.0f);
  loom::host_tensor<loom::bf16, 2> hb({3, 1000});
  std::fill(hb.data(), hb.data() + 3000, loom::bf16(1.0f));
  auto xb = in_space(hb);
  CHECK(values(loom::sum(xb, 1)).v == std::vector<double>{1000, 1000, 1000});  // bf16 would stall at 256
}

TEST_CASE("reductions check their axes and item() its size", "[reduce]" LOOM_TEST_TAG) {
  auto x = in_space(loom::host_tensor<float, 3>({2, 3, 4}));
  CHECK_THROWS_AS(loom::sum(x, 3), loom::index_error);
  CHECK_THROWS_AS(loom::sum(x, -4), loom::index_error);
  CHECK_THROWS_WITH(loom::sum(x, {1, -2}), Catch::Matchers::Contains("twice"));
  CHECK_THROWS_WITH(loom::stddev(x, {2, 2}), Catch::Matchers::StartsWith("loom: stddev() got axis 2 twice"));
  CHECK_THROWS_AS(loom::item(x), loom::shape_error);
  CHECK(values(loom::sum(x, {0, 1, 2})).ext.empty());
}

TEST_CASE("item() is a member of tensors and views and agrees with loom::item", "[reduce]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("reduce item"));
  auto h = random_host<float, 3>({3, 5, 7}, g);
  auto x = in_space(h);
  double want = 0, hi = -inf_v;
  for (index_t i = 0; i < h.size(); ++i) {
    want += h.data()[i];
    hi = std::max(hi, static_cast<double>(h.data()[i]));
  }
  const auto s = loom::sum(x * 1.0f);
  const float got = s.item();  // the 0-d result of a whole-tensor reduction
  CHECK(std::fabs(got - want) <= 1e-5 * 105 * 4);
  CHECK(loom_test::same_bits(got, loom::item(s)));
  CHECK(loom_test::same_bits(got, s.view().item()));
  // A size-1 result of rank 3 (keepdims), and one element of a strided view.
  const auto m = loom::amax(x, {0, 1, 2}, loom::keepdims);
  CHECK(m.extents() == loom::shape<3>{1, 1, 1});
  CHECK(static_cast<double>(m.item()) == hi);
  CHECK(x.view().slice(2, loom::range(3, 4), 6).item() == h(2, 3, 6));
  CHECK(x.view().permute({2, 0, 1}).slice(5, 1, 4).item() == h(1, 4, 5));
  // The element type is the tensor's: half stays half.
  loom::host_tensor<loom::half, 1> hh({3}, {loom::half(0.5f), loom::half(-2.0f), loom::half(1.25f)});
  const auto mh = loom::max(in_space(hh));
  STATIC_REQUIRE(std::is_same_v<decltype(mh.item()), loom::half>);
  CHECK(static_cast<float>(mh.item()) == 1.25f);
  // Anything but exactly one element is an error that names the shape.
  CHECK_THROWS_WITH(x.item(), Catch::Matchers::Contains("[3, 5, 7]") && Catch::Matchers::Contains("105 elements"));
  CHECK_THROWS_WITH(x.view().slice(0, loom::range(0, 0)).item(), Catch::Matchers::Contains("0 elements"));
  CHECK_THROWS_WITH(loom::item(x.view().slice(1)), Catch::Matchers::Contains("[5, 7]"));
  decltype(loom::sum(x)) none;  // a 0-d tensor without memory
  CHECK_THROWS_WITH(none.item(), Catch::Matchers::Contains("without data"));
  auto moved = loom::sum(x);
  auto taken = std::move(moved);
  CHECK(taken.item() == loom::sum(x).item());
  CHECK_THROWS_AS(moved.item(), loom::shape_error);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
}

TEST_CASE("var and stddev take any correction: divisor max(0, N - c)", "[reduce]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("reduce correction"));
  auto h = random_host<float, 2>({3, 37}, g);
  auto x = in_space(h);
  for (double c : {-1.0, 0.0, 0.5, 1.0, 2.0, 36.0, 37.0, 40.0}) {
    INFO("correction " << c);
    std::vector<double> want_var, want_std;
    double all_s = 0, all_q = 0;
    for (index_t r = 0; r < 3; ++r) {
      double s = 0;
      for (index_t k = 0; k < 37; ++k) s += h(r, k);
      const double mu = s / 37;
      double q = 0;
      for (index_t k = 0; k < 37; ++k) q += (h(r, k) - mu) * (h(r, k) - mu);
      const double v = q / std::max(0.0, 37 - c);  // q > 0: +inf where the divisor is 0
      want_var.push_back(v);
      want_std.push_back(std::sqrt(v));
      all_s += s;
    }
    const double all_mu = all_s / 111;
    for (index_t i = 0; i < 111; ++i) all_q += (h.data()[i] - all_mu) * (h.data()[i] - all_mu);
    const auto v = values(loom::var(x, 1, loom::correction{c}));
    const auto sd = values(loom::stddev(x, -1, loom::keepdims, loom::correction{c}));
    REQUIRE(v.v.size() == 3);
    REQUIRE(sd.ext == std::vector<index_t>{3, 1});
    for (std::size_t r = 0; r < 3; ++r) {
      if (std::isinf(want_var[r])) {
        CHECK(v.v[r] == inf_v);
        CHECK(sd.v[r] == inf_v);
      } else {
        CHECK(std::fabs(v.v[r] - want_var[r]) <= 1e-5 * want_var[r]);
        CHECK(std::fabs(sd.v[r] - want_std[r]) <= 1e-5 * want_std[r]);
      }
    }
    const double whole = all_q / std::max(0.0, 111 - c);
    const double got = loom::item(loom::var(x, loom::correction{c}));
    CHECK(std::fabs(got - whole) <= 1e-5 * whole);
  }
  // All values equal and no degrees of freedom left: 0 / 0 is NaN, as in PyTorch.
  loom::host_tensor<float, 1> same({4}, {2.5f, 2.5f, 2.5f, 2.5f});
  CHECK(std::isnan(loom::item(loom::var(in_space(same), loom::correction{4}))));
  CHECK(loom::item(loom::var(in_space(same), loom::correction{0})) == 0.0f);
}

TEMPLATE_TEST_CASE("var and stddev of a range with an infinity or a NaN are NaN", "[reduce]" LOOM_TEST_TAG, float,
                   double, loom::half) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("reduce var nonfinite"));
  // Rows 0-4 each hold a non-finite value: +inf last, +inf first, -inf in
  // the middle, NaN, and +inf with -inf; row 5 is finite.
  auto h = random_host<T, 2>({6, 33}, g);
  const T pinf = T(static_cast<float>(inf_v)), ninf = T(-static_cast<float>(inf_v)), nan = T(static_cast<float>(nan_v));
  h(0, 32) = pinf, h(1, 0) = pinf, h(2, 16) = ninf, h(3, 5) = nan, h(4, 10) = pinf, h(4, 20) = ninf;
  const auto x = in_space(h);
  auto ref_var = [&](auto get, index_t n, double c) {
    double s = 0, q = 0;
    for (index_t i = 0; i < n; ++i) s += get(i);
    for (index_t i = 0; i < n; ++i) q += (get(i) - s / n) * (get(i) - s / n);
    return q / std::max(0.0, n - c);
  };
  for (double c : {1.0, 0.0, 2.0}) {
    INFO("correction " << c);
    const auto v = values(loom::var(x, 1, loom::correction{c}));
    const auto sd = values(loom::stddev(x * 2.0f, -1, loom::keepdims, loom::correction{c}));
    REQUIRE(v.v.size() == 6);
    REQUIRE(sd.ext == std::vector<index_t>{6, 1});
    for (std::size_t r = 0; r < 5; ++r) {
      INFO("row " << r);
      CHECK(std::isnan(v.v[r]));
      CHECK(std::isnan(sd.v[r]));
    }
    const double want = ref_var([&](index_t k) { return loom_test::as_double(h(5, k)); }, 33, c);
    const double tol = std::is_same_v<T, loom::half> ? 2e-3 : 1e-5;
    CHECK(std::fabs(v.v[5] - want) <= tol * want);
    CHECK(std::fabs(sd.v[5] - 2 * std::sqrt(want)) <= tol * 2 * std::sqrt(want));
    // Across rows: the columns that hold a non-finite value, and only those.
    const auto cols = values(loom::var(x, 0, loom::correction{c}));
    REQUIRE(cols.v.size() == 33);
    for (index_t k = 0; k < 33; ++k) {
      INFO("column " << k);
      if (k == 0 || k == 5 || k == 10 || k == 16 || k == 20 || k == 32) {
        CHECK(std::isnan(cols.v[static_cast<std::size_t>(k)]));
      } else {
        const double w = ref_var([&](index_t r) { return loom_test::as_double(h(r, k)); }, 6, c);
        CHECK(std::fabs(cols.v[static_cast<std::size_t>(k)] - w) <= tol * w);
      }
    }
    CHECK(std::isnan(loom_test::as_double(loom::item(loom::var(x, loom::correction{c})))));
    CHECK(std::isnan(loom_test::as_double(loom::item(loom::stddev(x.view().slice(0), loom::correction{c})))));
  }
  // One element with c = 0 (divisor 1): 0 for a finite value, NaN for an
  // infinity or a NaN.
  for (const T bad : {pinf, ninf, nan}) {
    loom::host_tensor<T, 1> one({1});
    one.data()[0] = bad;
    CHECK(std::isnan(loom_test::as_double(loom::item(loom::var(in_space(one), loom::correction{0})))));
    CHECK(std::isnan(loom_test::as_double(loom::item(loom::stddev(in_space(one), loom::correction{0})))));
  }
  loom::host_tensor<T, 1> fin({1});
  fin.data()[0] = T(2.5f);
  CHECK(loom_test::as_double(loom::item(loom::var(in_space(fin), loom::correction{0}))) == 0.0);
}

TEST_CASE("a reduction is one launch and reads a fused expression once", "[reduce]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("reduce launches"));
  auto ha = random_host<float, 2>({37, 129}, g);
  auto hb = random_host<float, 2>({37, 129}, g);
  auto a = in_space(ha);
  auto b = in_space(hb);
  for (int k = 0; k < 2; ++k) {
    const auto before = loom::launches();
    const auto s = k == 0 ? values(loom::sum(a * b + 1.0f)) : values(loom::sum(a * b + 1.0f, 1));
    const auto after = loom::launches();
    CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
    // Each output against its own reference (a total over outputs would let errors cancel).
    check_result<float>("sum", s, gather_ref(ha.extents(), std::array<bool, 2>{k == 0, true}, [&](auto c) {
                          return static_cast<double>(ha(c[0], c[1]) * hb(c[0], c[1]) + 1.0f);
                        }));
  }
}
#endif

#if defined(LOOM_REDUCE_REPLAY)
namespace {
// The device's axis-reduction plan replayed on the host: every output, block
// and thread of axis_reduce_kernel in turn, through the kernel's own
// per-thread shares (loom::detail::reduce::row_share, row_share_vec, cross_share) and
// its combining order (lanes in order, then chunks in order). The threads of
// a block along rows are combined in thread order here, by cub::BlockReduce's
// tree in the kernel: the results are compared with references, not bits.
template <class Op, class E, std::size_t R>
result replay_axes(const E& e, const std::array<bool, R>& red, int sms, loom::detail::reduce::axis_plan& plan) {
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  const auto n = as_node(e);
  const loom::shape<R> ext = n.extents();
  const auto lay = layout_of(ext, red);
  bool row_major = false;
  const auto m = make_axis_map(ext, lay.order, row_major);
  bind_info info;
  const auto b = bind_for_read(n, ext, info);
  plan = plan_axis_reduce(ext, red, info.contiguous, info.aligned, lay.outputs, lay.k, sms);
  constexpr int V = vector_width_of<node_t<E>>;
  const Op op{};
  const index_t k = lay.k;
  result r;
  for (index_t o = 0; o < lay.outputs; ++o) {
    typename Op::acc total = op.identity();
    if (!plan.cross) {
      for (index_t s = 0; s < plan.splits; ++s) {
        const index_t lo = s * plan.chunk, n = std::min(k, lo + plan.chunk) - lo;
        typename Op::acc a = op.identity();
        const int nt = plan.row_threads;  // a block, a warp or a thread per output
        for (int t = 0; t < nt; ++t) {
          if (plan.vec && nt == 1)  // as the kernel: a thread walks its row's head and tail
            a = op(a, row_share_vec<V, false>(op, b, o * k + lo, n, t, nt, lo));
          else if (plan.vec)
            a = op(a, row_share_vec<V, true>(op, b, o * k + lo, n, t, nt, lo));
          else if (plan.linear)
            a = op(a, row_share<true>(op, b, m, o * k + lo, n, t, nt, lo));
          else
            a = op(a, row_share<false>(op, b, m, o * k + lo, n, t, nt, lo));
        }
        total = s == 0 ? a : op(total, a);
      }
    } else {
      for (index_t s = 0; s < plan.splits; ++s) {
        const index_t lo = s * plan.chunk, hi = std::min(k, lo + plan.chunk);
        auto share = [&](int lane) {
          const auto inner = static_cast<index_t>(plan.inner.d);
          return plan.linear ? cross_share<true>(op, b, m, o, line_base(o, plan.inner, k), inner, k, lo, hi, lane)
                             : cross_share<false>(op, b, m, o, 0, inner, k, lo, hi, lane);
        };
        typename Op::acc a = share(0);
        for (int lane = 1; lane < cross_lanes; ++lane) a = op(a, share(lane));
        total = s == 0 ? a : op(total, a);
      }
    }
    r.v.push_back(loom_test::as_double(op.finalize(total, k)));
  }
  return r;
}

struct plan_want {
  bool cross, linear, vec;
  index_t splits;
  int row_threads;  // along rows: 128 (a block per output), 32 (a warp) or 1 (a thread); 0 across rows
};

// Replays sum, argmax, amax and count_nonzero (every element is non-zero, so
// count is k exactly when each element is read once) and checks the plan.
template <class T, class E, std::size_t R, class Val>
void check_replay(const E& e, const std::array<bool, R>& red, int sms, const plan_want& want, Val val) {
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using C = typename node_t<E>::value_type;
  const auto segs = gather_ref(as_node(e).extents(), red, val);
  axis_plan plan;
  check_result<T>("sum", replay_axes<sum_op<C>>(e, red, sms, plan), segs);
  CHECK(plan.cross == want.cross);
  CHECK(plan.linear == want.linear);
  CHECK(plan.vec == want.vec);
  CHECK(plan.splits == want.splits);
  CHECK(plan.row_threads == want.row_threads);
  check_result<T>("argmax", replay_axes<argmax_op<C>>(e, red, sms, plan), segs);
  check_result<T>("amax", replay_axes<max_op<C>>(e, red, sms, plan), segs);
  check_result<T>("count", replay_axes<count_nonzero_op<C>>(e, red, sms, plan), segs);
}
}  // namespace

TEMPLATE_TEST_CASE("the device plans of axis reductions read every element once, replayed on the host",
                   "[reduce]", float, loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("reduce axis plans"));
  auto nonzero = [&]<std::size_t R>(const loom::shape<R>& s) {
    auto h = random_host<T, R>(s, g);
    for (index_t i = 0; i < h.size(); ++i)
      if (loom_test::as_double(h.data()[i]) == 0) h.data()[i] = T(1.0f);
    return h;
  };
  auto at2 = [](const auto& h) { return [&h](auto c) { return loom_test::as_double(h(c[0], c[1])); }; };
  auto at3 = [](const auto& h) { return [&h](auto c) { return loom_test::as_double(h(c[0], c[1], c[2])); }; };
  // Along rows: 16-byte vectors with an unaligned head and tail per row
  // (37 columns), whole vectors only (64), rows shorter than a vector (3).
  // Rows of at most 32 (thread_row_max) elements take a thread per output,
  // which walks the row's head, vectors and tail itself: 3, 4, 32 and 33
  // columns, contiguous and strided.
  for (index_t cols : {37, 64, 3, 4, 32, 33}) {
    INFO(cols << " columns");
    auto h = nonzero(loom::shape<2>{5, cols});
    check_replay<T>(h, std::array<bool, 2>{false, true}, 132, {false, true, true, 1, cols <= 32 ? 1 : 32}, at2(h));
    auto w = nonzero(loom::shape<2>{5, 2 * cols});
    check_replay<T>(w.view().slice(loom::whole, loom::range(1, loom::none, 2)), std::array<bool, 2>{false, true}, 132,
                    {false, false, false, 1, cols <= 32 ? 1 : 32},
                    [&](auto c) { return loom_test::as_double(w(c[0], 1 + 2 * c[1])); });
  }
  // Rows of up to warp_row_max (1024) elements take a warp per output,
  // longer ones a block: 1024 and 1025 columns, and a strided view of rows of 1024.
  auto at1024 = nonzero(loom::shape<2>{3, 2049});
  check_replay<T>(at1024.view().slice(loom::whole, loom::range(0, 1024)), std::array<bool, 2>{false, true}, 132,
                  {false, false, false, 1, 32}, at2(at1024));
  check_replay<T>(at1024.view().slice(loom::whole, loom::range(0, 1025)), std::array<bool, 2>{false, true}, 132,
                  {false, false, false, 1, 128}, at2(at1024));
  check_replay<T>(at1024.view().slice(loom::whole, loom::range(1, loom::none, 2)), std::array<bool, 2>{false, true},
                  132, {false, false, false, 1, 32}, [&](auto c) { return loom_test::as_double(at1024(c[0], 1 + 2 * c[1])); });
  for (index_t cols : {1024, 1025}) {
    INFO(cols << " contiguous columns");
    auto h = nonzero(loom::shape<2>{4, cols});
    check_replay<T>(h, std::array<bool, 2>{false, true}, 132, {false, true, true, 1, cols <= 1024 ? 32 : 128}, at2(h));
  }
  // Few long rows: the rows in chunks (multiples of 16 elements, at least
  // 64 x 128 each): 2 rows of 40001 in 4 chunks of 10016 (40001 / 8192
  // chunks at most); 6 rows on one SM in 3 (16 blocks wanted); strided rows too.
  auto few = nonzero(loom::shape<2>{2, 40001});
  check_replay<T>(few, std::array<bool, 2>{false, true}, 132, {false, true, true, 4, 128}, at2(few));
  auto six = nonzero(loom::shape<2>{6, 40001});
  check_replay<T>(six, std::array<bool, 2>{false, true}, 1, {false, true, true, 3, 128}, at2(six));
  const auto few_t = few.view().slice(loom::whole, loom::range(0, loom::none, 2));  // [2, 20001], stride 2
  check_replay<T>(few_t, std::array<bool, 2>{false, true}, 132, {false, false, false, 2, 128},
                  [&](auto c) { return loom_test::as_double(few(c[0], 2 * c[1])); });
  // A contiguous view at an unaligned offset: linear, element by element.
  auto h3 = nonzero(loom::shape<3>{2, 5, 37});
  const auto off = h3.view().slice(1);
  check_replay<T>(off, std::array<bool, 2>{false, true}, 132, {false, true, false, 1, 32},
                  [&](auto c) { return loom_test::as_double(h3(1, c[0], c[1])); });
  // Across rows: 300 rows of 5 split into 4 chunks of 75 (300 / (4 lanes x 16)
  // chunks at most), whatever the SM count; on one SM of 48 rows, one chunk.
  auto tall = nonzero(loom::shape<2>{300, 5});
  for (int sms : {1, 132}) check_replay<T>(tall, std::array<bool, 2>{true, false}, sms, {true, true, false, 4, 0}, at2(tall));
  auto wide = nonzero(loom::shape<2>{48, 700});
  check_replay<T>(wide, std::array<bool, 2>{true, false}, 1, {true, true, false, 1, 0}, at2(wide));
  // 3-D: a middle axis and leading axes (linear: one run of reduced axes),
  // the last axis, and a set of axes ending with the last (along rows, by
  // coordinates: two runs).
  auto x = nonzero(loom::shape<3>{7, 33, 5});
  check_replay<T>(x, std::array<bool, 3>{false, true, false}, 132, {true, true, false, 1, 0}, at3(x));
  check_replay<T>(x, std::array<bool, 3>{true, true, false}, 132, {true, true, false, 3, 0}, at3(x));
  check_replay<T>(x, std::array<bool, 3>{false, false, true}, 132, {false, true, true, 1, 1}, at3(x));
  check_replay<T>(x, std::array<bool, 3>{true, false, true}, 132, {false, false, false, 1, 32}, at3(x));
  // 4-D: a run of two middle axes (linear), two runs (by coordinates), an
  // axis of extent 1 between reduced axes (still one run).
  auto x4 = nonzero(loom::shape<4>{3, 4, 70, 6});
  auto at4 = [&](auto c) { return loom_test::as_double(x4(c[0], c[1], c[2], c[3])); };
  check_replay<T>(x4, std::array<bool, 4>{false, true, true, false}, 132, {true, true, false, 4, 0}, at4);
  check_replay<T>(x4, std::array<bool, 4>{true, false, true, false}, 132, {true, false, false, 3, 0}, at4);
  auto x1 = nonzero(loom::shape<4>{5, 1, 90, 7});
  check_replay<T>(x1, std::array<bool, 4>{true, false, true, false}, 132, {true, true, false, 7, 0},
                  [&](auto c) { return loom_test::as_double(x1(c[0], c[1], c[2], c[3])); });
  // A transposed (strided) view and a fused expression of two inputs.
  auto hw = nonzero(loom::shape<2>{37, 9});
  const auto tr = hw.view().permute({1, 0});  // [9, 37]
  auto at_tr = [&](auto c) { return loom_test::as_double(hw(c[1], c[0])); };
  check_replay<T>(tr, std::array<bool, 2>{true, false}, 132, {true, false, false, 1, 0}, at_tr);
  check_replay<T>(tr, std::array<bool, 2>{false, true}, 132, {false, false, false, 1, 32}, at_tr);
  auto hb = nonzero(loom::shape<2>{300, 6});
  using Cv = loom::compute_t<T>;
  check_replay<T>(hb * hb, std::array<bool, 2>{true, false}, 132, {true, true, false, 4, 0}, [&](auto c) {
    const auto v = static_cast<Cv>(hb(c[0], c[1]));
    return static_cast<double>(v * v);
  });
}
#endif
