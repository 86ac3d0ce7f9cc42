// SPDX-License-Identifier: Apache-2.0
// Elementwise expressions checked on both executors against plain double
// loops. The including file defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using loom::none;
using loom::range;
using loom::whole;
using space_t = LOOM_TEST_SPACE;

namespace {
constexpr bool on_device = std::is_same_v<space_t, loom::device>;

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

template <class T, std::size_t R>
loom::tensor<T, R, space_t> poisoned(const loom::shape<R>& s) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::poison_value<T>();
  return in_space(h);
}

// Relative tolerance of a result stored as T (rounding on store + compute error).
template <class T>
double tol() {
  if constexpr (std::is_same_v<T, loom::half>)
    return 2e-3;
  else if constexpr (std::is_same_v<T, loom::bf16>)
    return 1.6e-2;
  else if constexpr (std::is_same_v<T, float>)
    return 2e-6;
  else if constexpr (std::is_same_v<T, double>)
    return 1e-13;
  else
    return 0;
}

bool close(double got, double want, double rel, double abs_tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= abs_tol + rel * std::fabs(want);
}

// Compares a result with ref(i) for every row-major position i.
template <class T, std::size_t R, class Ref>
void check_all(const loom::tensor<T, R, space_t>& y, Ref ref, double rel, double abs_tol = 1e-6) {
  const auto h = loom::to_host(y);
  for (index_t i = 0; i < h.size(); ++i) {
    const double want = ref(i);
    const double got = loom_test::as_double(h.data()[i]);
    if (!close(got, want, rel, abs_tol)) {
      INFO("element " << i << " of shape " << loom::shape_string(h.extents()) << ": got " << got << ", want " << want);
      REQUIRE(close(got, want, rel, abs_tol));
    }
  }
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

// Inputs with NaN and infinities planted for floating types.
template <class T, std::size_t R>
void plant_specials(loom::host_tensor<T, R>& h) {
  if constexpr (loom::is_floating_v<T>) {
    const index_t n = h.size();
    if (n > 3) {
      h.data()[0] = T(std::numeric_limits<float>::quiet_NaN());
      h.data()[n / 2] = T(std::numeric_limits<float>::infinity());
      h.data()[n - 1] = T(-std::numeric_limits<float>::infinity());
    }
  }
}

struct unary_case {
  const char* name;
  double lo, hi;
  std::function<double(double)> ref;
};

const double pi = 3.14159265358979323846;

const unary_case unary_cases[] = {
    {"exp", -5, 5, [](double x) { return std::exp(x); }},
    {"exp2", -5, 5, [](double x) { return std::exp2(x); }},
    {"log", 0.01, 10, [](double x) { return std::log(x); }},
    {"log1p", -0.9, 10, [](double x) { return std::log1p(x); }},
    {"log2", 0.01, 10, [](double x) { return std::log2(x); }},
    {"sqrt", 0, 10, [](double x) { return std::sqrt(x); }},
    {"rsqrt", 0.01, 10, [](double x) { return 1 / std::sqrt(x); }},
    {"sin", -4, 4, [](double x) { return std::sin(x); }},
    {"cos", -4, 4, [](double x) { return std::cos(x); }},
    {"tanh", -4, 4, [](double x) { return std::tanh(x); }},
    {"erf", -3, 3, [](double x) { return std::erf(x); }},
    {"abs", -4, 4, [](double x) { return std::fabs(x); }},
    {"sign", -4, 4, [](double x) { return std::isnan(x) ? x : (x > 0) - (x < 0); }},
    {"floor", -4, 4, [](double x) { return std::floor(x); }},
    {"ceil", -4, 4, [](double x) { return std::ceil(x); }},
    {"round", -4, 4, [](double x) { return std::nearbyint(x); }},
    {"neg", -4, 4, [](double x) { return -x; }},
    {"relu", -4, 4, [](double x) { return x < 0 ? 0.0 : x; }},
    {"leaky_relu", -4, 4, [](double x) { return x < 0 ? 0.2 * x : x; }},
    {"gelu", -4, 4, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
    {"gelu_tanh", -4, 4,
     [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x))); }},
    {"silu", -6, 6, [](double x) { return x / (1 + std::exp(-x)); }},
    {"sigmoid", -6, 6, [](double x) { return 1 / (1 + std::exp(-x)); }},
    {"softplus", -6, 30, [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }},
    {"mish", -6, 6, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }},
};

template <class X>
auto apply_unary(const std::string& name, const X& x) {
  using namespace loom;
  // Every branch yields a different node type; materialize each into the same tensor type.
  using T = typename X::value_type;
  auto out = poisoned<T, 2>(x.extents());
  if (name == "exp") out = exp(x);
  else if (name == "exp2") out = exp2(x);
  else if (name == "log") out = log(x);
  else if (name == "log1p") out = log1p(x);
  else if (name == "log2") out = log2(x);
  else if (name == "sqrt") out = sqrt(x);
  else if (name == "rsqrt") out = rsqrt(x);
  else if (name == "sin") out = sin(x);
  else if (name == "cos") out = cos(x);
  else if (name == "tanh") out = tanh(x);
  else if (name == "erf") out = erf(x);
  else if (name == "abs") out = abs(x);
  else if (name == "sign") out = sign(x);
  else if (name == "floor") out = floor(x);
  else if (name == "ceil") out = ceil(x);
  else if (name == "round") out = round(x);
  else if (name == "neg") out = -x;
  else if (name == "relu") out = relu(x);
  else if (name == "leaky_relu") out = leaky_relu(x, 0.2);
  else if (name == "gelu") out = gelu(x);
  else if (name == "gelu_tanh") out = gelu(x, approximate::tanh);
  else if (name == "silu") out = silu(x);
  else if (name == "sigmoid") out = sigmoid(x);
  else if (name == "softplus") out = softplus(x);
  else if (name == "mish") out = mish(x);
  else FAIL("unknown op " << name);
  return out;
}
}  // namespace

TEMPLATE_TEST_CASE("unary math and activations match double references", "[expr]" LOOM_TEST_TAG, float, double,
                   loom::half, loom::bf16) {
  std::mt19937_64 g(loom_test::seed_for("unary"));
  for (const auto& c : unary_cases) {
    for (auto s : {loom::shape<2>{1, 1}, loom::shape<2>{7, 1}, loom::shape<2>{257, 33}}) {
      INFO(c.name << " on " << loom::shape_string(s));
      auto h = random_host<TestType, 2>(s, g, c.lo, c.hi);
      plant_specials(h);
      auto x = in_space(h);
      const auto before = loom::launches();
      auto y = apply_unary(c.name, x);
      const auto after = loom::launches();
      CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
      // Reference from the stored (rounded) inputs; the result rounds once to TestType.
      check_all(y, [&](index_t i) { return c.ref(loom_test::as_double(h.data()[i])); }, tol<TestType>(),
                std::is_same_v<TestType, float> ? 2e-6 : tol<TestType>());
    }
  }
}

TEMPLATE_TEST_CASE("binary operators broadcast and promote like PyTorch", "[expr]" LOOM_TEST_TAG, float, loom::half,
                   loom::bf16, double) {
  std::mt19937_64 g(loom_test::seed_for("binary"));
  using T = TestType;
  auto a_h = random_host<T, 2>({257, 33}, g);
  auto b_h = random_host<T, 1>({33}, g, 0.5, 4);  // divisor: away from zero
  auto c_h = random_host<float, 2>({257, 1}, g);
  auto a = in_space(a_h);
  auto b = in_space(b_h);
  auto c = in_space(c_h);
  // T op T stays T; T op float promotes (half/bf16 * float -> float).
  auto y = poisoned<T, 2>({257, 33});
  y = a * b + a / b - b;
  check_all(y, [&](index_t i) {
    const auto [r, k] = unravel<2>(i, {257, 33});
    const double av = loom_test::as_double(a_h(r, k)), bv = loom_test::as_double(b_h(k));
    return av * bv + av / bv - bv;
  }, 4 * tol<T>(), 4 * tol<T>());
  auto z = loom::materialize(a * c + 1);
  STATIC_REQUIRE(std::is_same_v<typename decltype(z)::value_type, loom::promote_t<T, float>>);
  check_all(z, [&](index_t i) {
    const auto [r, k] = unravel<2>(i, {257, 33});
    return loom_test::as_double(a_h(r, k)) * c_h(r, 0) + 1;
  }, 4 * tol<loom::promote_t<T, float>>(), 1e-5);
  auto m = loom::materialize(a % b);
  check_all(m, [&](index_t i) {
    const auto [r, k] = unravel<2>(i, {257, 33});
    const double av = loom_test::as_double(a_h(r, k)), bv = loom_test::as_double(b_h(k));
    const double rr = std::fmod(av, bv);
    return (rr != 0 && ((rr < 0) != (bv < 0))) ? rr + bv : rr;
  }, 4 * tol<T>(), 4 * tol<T>());
  // Scalars on either side; pow, min/max and clamp.
  auto w = poisoned<T, 2>({257, 33});
  w = 2.0f - loom::pow(loom::abs(a), 2.0f) * 0.5 + loom::maximum(a, 0.0f) - loom::minimum(1, a) +
      loom::clamp(a, -1.0f, 1.0f);
  check_all(w, [&](index_t i) {
    const double av = loom_test::as_double(a_h.data()[i]);
    return 2.0 - std::pow(std::fabs(av), 2.0) * 0.5 + std::max(av, 0.0) - std::min(1.0, av) +
           std::min(std::max(av, -1.0), 1.0);
  }, 8 * tol<T>(), 8 * tol<T>());
}

TEST_CASE("comparisons, logical ops and where give PyTorch's results", "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("compare"));
  auto a_h = random_host<float, 2>({31, 17}, g);
  auto b_h = random_host<float, 2>({31, 17}, g);
  a_h.data()[3] = std::numeric_limits<float>::quiet_NaN();
  b_h.data()[5] = a_h.data()[5];
  auto a = in_space(a_h);
  auto b = in_space(b_h);
  auto lt = loom::materialize(a < b);
  STATIC_REQUIRE(std::is_same_v<decltype(lt)::value_type, bool>);
  check_all(lt, [&](index_t i) { return a_h.data()[i] < b_h.data()[i]; }, 0);
  check_all(loom::materialize(a == b), [&](index_t i) { return a_h.data()[i] == b_h.data()[i]; }, 0);
  check_all(loom::materialize(a != b), [&](index_t i) { return a_h.data()[i] != b_h.data()[i]; }, 0);
  check_all(loom::materialize(a >= 0.5f), [&](index_t i) { return a_h.data()[i] >= 0.5f; }, 0);
  check_all(loom::materialize((a > 0) && !(b > 0) || a <= -3),
            [&](index_t i) { return (a_h.data()[i] > 0 && !(b_h.data()[i] > 0)) || a_h.data()[i] <= -3; }, 0);
  auto w = loom::materialize(loom::where(a > b, a, 0.5f * b));
  check_all(w, [&](index_t i) { return a_h.data()[i] > b_h.data()[i] ? a_h.data()[i] : 0.5 * b_h.data()[i]; },
            1e-7);
  // maximum propagates NaN; a < NaN is false.
  auto mx = loom::to_host(loom::materialize(loom::maximum(a, b)));
  CHECK(std::isnan(mx.data()[3]));
}

TEST_CASE("integer and bool expressions follow PyTorch's promotion", "[expr]" LOOM_TEST_TAG) {
  loom::host_tensor<std::int32_t, 1> ih({6}, {-7, -3, 0, 2, 5, 9});
  loom::host_tensor<std::int8_t, 1> i8h({6}, {100, 100, -100, 3, 4, 5});
  loom::host_tensor<bool, 1> bh({6}, {true, false, true, false, true, true});
  auto i = in_space(ih);
  auto i8 = in_space(i8h);
  auto bb = in_space(bh);
  auto q = loom::materialize(i / 2);  // true division
  STATIC_REQUIRE(std::is_same_v<decltype(q)::value_type, float>);
  check_all(q, [&](index_t k) { return ih(k) / 2.0; }, 0);
  auto r = loom::materialize(i % 4);  // sign of the divisor
  STATIC_REQUIRE(std::is_same_v<decltype(r)::value_type, std::int32_t>);
  check_all(r, [&](index_t k) { return static_cast<double>(((ih(k) % 4) + 4) % 4); }, 0);
  auto m = loom::materialize(i * 3 - 1);
  STATIC_REQUIRE(std::is_same_v<decltype(m)::value_type, std::int32_t>);
  check_all(m, [&](index_t k) { return ih(k) * 3.0 - 1; }, 0);
  auto f = loom::materialize(i * 0.5);
  STATIC_REQUIRE(std::is_same_v<decltype(f)::value_type, float>);
  auto wrap = loom::materialize(i8 + i8);  // int8 wraps in int8
  STATIC_REQUIRE(std::is_same_v<decltype(wrap)::value_type, std::int8_t>);
  check_all(wrap, [&](index_t k) { return static_cast<double>(static_cast<std::int8_t>(2 * i8h(k))); }, 0);
  auto mixed = loom::materialize(i8 + i);
  STATIC_REQUIRE(std::is_same_v<decltype(mixed)::value_type, std::int32_t>);
  auto bsum = loom::materialize(bb + 1);  // bool with an int scalar: int64
  STATIC_REQUIRE(std::is_same_v<decltype(bsum)::value_type, std::int64_t>);
  check_all(bsum, [&](index_t k) { return bh(k) + 1.0; }, 0);
  auto e = loom::materialize(loom::exp(i));  // math on ints computes in float32
  STATIC_REQUIRE(std::is_same_v<decltype(e)::value_type, float>);
  check_all(e, [&](index_t k) { return std::exp(static_cast<double>(ih(k))); }, 2e-6);
  auto p = loom::materialize(loom::pow(i, 2));
  STATIC_REQUIRE(std::is_same_v<decltype(p)::value_type, std::int32_t>);
  check_all(p, [&](index_t k) { return static_cast<double>(ih(k)) * ih(k); }, 0);
  auto z = loom::materialize(i % 0);  // documented: integer remainder by zero is 0
  check_all(z, [](index_t) { return 0.0; }, 0);
}

TEST_CASE("type promotion table", "[expr]") {
  using loom::promote_t;
  STATIC_REQUIRE(std::is_same_v<promote_t<loom::half, float>, float>);
  STATIC_REQUIRE(std::is_same_v<promote_t<loom::half, loom::bf16>, float>);
  STATIC_REQUIRE(std::is_same_v<promote_t<loom::bf16, double>, double>);
  STATIC_REQUIRE(std::is_same_v<promote_t<std::int64_t, loom::half>, loom::half>);
  STATIC_REQUIRE(std::is_same_v<promote_t<std::int8_t, std::uint8_t>, std::int32_t>);
  STATIC_REQUIRE(std::is_same_v<promote_t<std::int32_t, std::int64_t>, std::int64_t>);
  STATIC_REQUIRE(std::is_same_v<promote_t<bool, std::uint8_t>, std::uint8_t>);
  STATIC_REQUIRE(std::is_same_v<promote_t<bool, bool>, bool>);
}

TEST_CASE("a deep expression over broadcast and strided operands is one launch", "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("deep"));
  auto x_h = random_host<float, 3>({5, 9, 33}, g);
  auto b_h = random_host<loom::bf16, 1>({33}, g);
  auto s_h = random_host<loom::half, 3>({9, 5, 1}, g);
  auto x = in_space(x_h);
  auto b = in_space(b_h);
  auto s = in_space(s_h);
  auto st = s.permute({1, 0, 2});  // 5 x 9 x 1, strided
  auto y = poisoned<float, 3>({5, 9, 33});
  const auto before = loom::launches();
  // 24 nodes: leaves, scalars and maps of mixed dtypes.
  y = loom::tanh(x * b + st) * 0.5f + loom::sigmoid(x - 1) * loom::exp(-loom::abs(b)) - loom::relu(st * x) / 3 +
      loom::where(x > 0, x, b) * loom::sqrt(loom::abs(x) + 1);
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
  CHECK(loom::last_eval().path == loom::eval_path::general);
  check_all(y, [&](index_t i) {
    const auto c = unravel<3>(i, {5, 9, 33});
    const double xv = x_h(c[0], c[1], c[2]), bv = loom_test::as_double(b_h(c[2])),
                 sv = loom_test::as_double(s_h(c[1], c[0], 0));
    return std::tanh(xv * bv + sv) * 0.5 + 1 / (1 + std::exp(-(xv - 1))) * std::exp(-std::fabs(bv)) -
           std::max(sv * xv, 0.0) / 3 + (xv > 0 ? xv : bv) * std::sqrt(std::fabs(xv) + 1);
  }, 1e-5, 1e-5);
}

TEST_CASE("the contiguous path is taken only for contiguous aligned operands", "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("paths"));
  auto a_h = random_host<float, 1>({1001}, g);
  auto a = in_space(a_h);
  auto y = poisoned<float, 1>({1001});
  y = a * 2 + 1;
  auto info = loom::last_eval();
  CHECK(info.path == loom::eval_path::contiguous);
  CHECK(info.on_device == on_device);
  CHECK(info.vector_width == (on_device ? 4 : 1));
  check_all(y, [&](index_t i) { return a_h(i) * 2.0 + 1; }, 1e-7);
  // Off by one element: contiguous but not 16-byte aligned; the device takes the general path.
  auto y2 = poisoned<float, 1>({1000});
  y2 = a.slice(range(1, none)) * 2;
  CHECK(loom::last_eval().path == (on_device ? loom::eval_path::general : loom::eval_path::contiguous));
  check_all(y2, [&](index_t i) { return a_h(i + 1) * 2.0; }, 1e-7);
  // Reversed view: general on both.
  y2 = a.slice(range(none, 0, -1)) - 1;
  CHECK(loom::last_eval().path == loom::eval_path::general);
  check_all(y2, [&](index_t i) { return a_h(1000 - i) - 1.0; }, 1e-7);
  // bf16 with float: 16 bytes of the narrower type per thread.
  auto hb = random_host<loom::bf16, 1>({1001}, g);
  auto bf = in_space(hb);
  auto y3 = poisoned<loom::bf16, 1>({1001});
  y3 = bf * a;
  CHECK(loom::last_eval().vector_width == (on_device ? 8 : 1));
  // Stored once, rounded to nearest even from the float product.
  const auto got = loom::to_host(y3);
  for (index_t i = 0; i < 1001; ++i) {
    const float prod = static_cast<float>(hb(i)) * a_h(i);
    REQUIRE(loom_test::same_bits(got(i), loom::bf16(prod)));
  }
}

TEST_CASE("rows broadcast over a matrix (a bias) keep the contiguous path when whole vectors fit a row",
          "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("periodic"));
  for (index_t cols : {index_t{1024}, index_t{36}, index_t{33}}) {
    INFO(cols << " columns");
    const auto x_h = random_host<float, 3>({3, 7, cols}, g);
    const auto w_h = random_host<float, 1>({cols}, g);
    const auto b_h = random_host<float, 2>({7, cols}, g);  // broadcast along the first axis only
    const auto x = in_space(x_h);
    const auto w = in_space(w_h);
    const auto b = in_space(b_h);
    auto y = poisoned<float, 3>({3, 7, cols});
    y = loom::gelu(x * w + b);
    // Host: every period works. Device: float vectors of 4 must not straddle a row.
    const bool whole_vectors = cols % 4 == 0;
    CHECK(loom::last_eval().path ==
          (!on_device || whole_vectors ? loom::eval_path::contiguous : loom::eval_path::general));
    check_all(y, [&](index_t i) {
      const index_t c = i % cols, r = (i / cols) % 7;
      const double h = static_cast<double>(x_h.data()[i]) * w_h(c) + b_h(r, c);
      return 0.5 * h * (1 + std::erf(h / std::sqrt(2.0)));
    }, 1e-5, 1e-5);
    // A column broadcast along the rows is not periodic: the general path.
    const auto col_h = random_host<float, 2>({7, 1}, g);
    const auto col = in_space(col_h);
    y = x - col;
    CHECK(loom::last_eval().path == loom::eval_path::general);
    check_all(y, [&](index_t i) { return x_h.data()[i] - static_cast<double>(col_h((i / cols) % 7, 0)); }, 1e-7);
  }
}

TEST_CASE("rows broadcast over a matrix give every element when a row is long and when updated in place",
          "[expr]" LOOM_TEST_TAG) {
  // Rows longer than the host's SIMD pieces, and a bias whose period is a
  // multiple of the row's: each row is cut into pieces.
  std::mt19937_64 g(loom_test::seed_for("long periodic"));
  constexpr index_t cols = 17000;
  const auto x_h = random_host<float, 3>({2, 3, cols}, g);
  const auto w_h = random_host<float, 1>({cols}, g);
  const auto b_h = random_host<float, 2>({3, cols}, g);
  const auto x = in_space(x_h);
  const auto w = in_space(w_h);
  const auto b = in_space(b_h);
  auto y = poisoned<float, 3>({2, 3, cols});
  y = x * w + b;
  CHECK(loom::last_eval().path == loom::eval_path::contiguous);
  const auto want = [&](index_t i) {
    return static_cast<double>(x_h.data()[i]) * w_h(i % cols) + b_h((i / cols) % 3, i % cols);
  };
  check_all(y, want, 1e-6);
  y = y * 2.0f + w;
  check_all(y, [&](index_t i) { return 2 * want(i) + w_h(i % cols); }, 1e-5, 1e-5);
}

TEST_CASE("in-place updates work and other aliasing throws without writing", "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("alias"));
  auto x_h = random_host<float, 2>({6, 6}, g);
  auto x = in_space(x_h);
  x = x * 2 + 1;  // same index map: fine
  check_all(x, [&](index_t i) { return x_h.data()[i] * 2.0 + 1; }, 1e-7);
  const auto snapshot = loom::to_host(x);
  REQUIRE_THROWS_AS(x = x.t() + 0, loom::aliasing_error);
  REQUIRE_THROWS_WITH(x.slice(range(1, 6)) = x.slice(range(0, 5)) * 1, Contains("overlaps an input"));
  REQUIRE_THROWS_AS(loom::assign(x.slice(0).broadcast_to(loom::shape<2>{6, 6}), x * 1), loom::aliasing_error);
  check_all(x, [&](index_t i) { return snapshot.data()[i]; }, 0);
  // Disjoint slices of one tensor are fine.
  x.slice(range(0, 3)) = x.slice(range(3, 6)) * 10;
  check_all(x, [&](index_t i) {
    return i < 18 ? snapshot.data()[i + 18] * 10.0 : snapshot.data()[i];
  }, 1e-6);
  x += 1;
  x *= 2;
  check_all(x, [&](index_t i) {
    return ((i < 18 ? snapshot.data()[i + 18] * 10.0 : snapshot.data()[i]) + 1) * 2;
  }, 1e-6);
}

TEST_CASE("compound assignment on views updates the viewed elements in one launch each", "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("view compound assignment"));
  const index_t rows = 33, cols = 257;
  const auto z_h = random_host<float, 2>({rows, cols}, g);
  const auto h_h = random_host<float, 2>({rows, cols}, g);
  const auto b_h = random_host<float, 1>({rows}, g, 1, 4);
  auto z = in_space(z_h);
  auto h = in_space(h_h);
  auto b = in_space(b_h);
  std::vector<double> want(z_h.data(), z_h.data() + z_h.size());
  auto at = [&](index_t r, index_t c) -> double& { return want[static_cast<std::size_t>(r * cols + c)]; };
  auto one_launch = [](auto&& update) {
    const auto before = loom::launches();
    update();
    const auto after = loom::launches();
    CHECK(after.host + after.device == before.host + before.device + 1);
  };

  auto zt = z.t();  // a named, strided view
  one_launch([&] { zt += h.t(); });
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) at(r, c) += h_h(r, c);
  one_launch([&] { z.t() *= 2; });  // a temporary view
  for (double& w : want) w *= 2;
  // Every other row from row 1, minus a column broadcast of b over those rows.
  one_launch([&] { z.slice(range(1, none, 2)) -= b.slice(range(1, none, 2)).unsqueeze(1) * 3; });
  for (index_t r = 1; r < rows; r += 2)
    for (index_t c = 0; c < cols; ++c) at(r, c) -= static_cast<double>(b_h(r)) * 3;
  // Columns 250, 248, ..., 2 (a negative stride), divided by b broadcast along rows.
  auto cols_back = z.slice(whole, range(250, 0, -2));
  one_launch([&] { cols_back /= b.unsqueeze(1) + 0.5f; });
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 250; c > 0; c -= 2) at(r, c) /= static_cast<double>(b_h(r) + 0.5f);
  one_launch([&] { z.slice(7) %= 1.5f; });
  for (index_t c = 0; c < cols; ++c) {
    double& w = at(7, c);
    w = std::fmod(w, 1.5);
    if (w < 0) w += 1.5;
  }
  check_all(z, [&](index_t i) { return want[static_cast<std::size_t>(i)]; }, 1e-5, 1e-5);

  // Reading the updated elements at other positions throws and writes nothing.
  auto sq = in_space(random_host<float, 2>({7, 7}, g));
  const auto snapshot = loom::to_host(sq);
  REQUIRE_THROWS_AS(sq.t() += sq, loom::aliasing_error);
  REQUIRE_THROWS_AS(sq.slice(range(1, 7)) -= sq.slice(range(0, 6)), loom::aliasing_error);
  check_all(sq, [&](index_t i) { return snapshot.data()[i]; }, 0);
  // Through a view of const elements the values are read, never written.
  loom::view<const float, 2, space_t> read_only = sq;
  sq.t() += read_only.t();
  check_all(sq, [&](index_t i) { return 2.0 * snapshot.data()[i]; }, 1e-6);
}

TEST_CASE("shape mismatches name both shapes and leave the output untouched", "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("mismatch"));
  auto a = in_space(random_host<float, 2>({4, 5}, g));
  auto b = in_space(random_host<float, 2>({4, 3}, g));
  auto y = poisoned<float, 2>({4, 5});
  REQUIRE_THROWS_WITH(y = a + b, Contains("[4, 5]") && Contains("[4, 3]"));
  REQUIRE_THROWS_WITH(y = b * 2, Contains("shape [4, 3]") && Contains("output of shape [4, 5]"));
  check_all(y, [](index_t) { return std::numeric_limits<double>::quiet_NaN(); }, 0);
  // Broadcasting the expression to the output is allowed.
  y = b.slice(whole, range(0, 1)) + 0;
  CHECK(loom::last_eval().path == loom::eval_path::general);
}

TEST_CASE("empty tensors launch nothing and succeed", "[expr]" LOOM_TEST_TAG) {
  auto x = in_space(loom::host_tensor<float, 2>({0, 5}));
  auto y = poisoned<float, 2>({0, 5});
  const auto before = loom::launches();
  y = loom::exp(x) + 1;
  const auto after = loom::launches();
  CHECK(after.host == before.host);
  CHECK(after.device == before.device);
  CHECK(loom::last_eval().path == loom::eval_path::empty);
}

namespace {
// A user's own fused op: three lines.
struct squared_difference {
  template <class T>
  LOOM_HD T operator()(T a, T b) const { return (a - b) * (a - b); }
};
}  // namespace

TEST_CASE("user functors fuse through loom::map and casts round once", "[expr]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("map"));
  auto a_h = random_host<loom::half, 2>({17, 9}, g);
  auto b_h = random_host<float, 2>({17, 9}, g);
  auto a = in_space(a_h);
  auto b = in_space(b_h);
  auto y = loom::materialize(loom::map(squared_difference{}, a, b));
  STATIC_REQUIRE(std::is_same_v<decltype(y)::value_type, float>);
  check_all(y, [&](index_t i) {
    const double d = loom_test::as_double(a_h.data()[i]) - b_h.data()[i];
    return d * d;
  }, 1e-6, 1e-6);
  auto c = loom::materialize(loom::cast<std::int32_t>(b * 10));
  STATIC_REQUIRE(std::is_same_v<decltype(c)::value_type, std::int32_t>);
  check_all(c, [&](index_t i) { return std::trunc(static_cast<double>(b_h.data()[i] * 10.0f)); }, 0);
  auto hb = loom::materialize(loom::cast<loom::bf16>(a));
  STATIC_REQUIRE(std::is_same_v<decltype(hb)::value_type, loom::bf16>);
  const auto hbh = loom::to_host(hb);
  for (index_t i = 0; i < hbh.size(); ++i)
    REQUIRE(loom_test::same_bits(hbh.data()[i], loom::bf16(static_cast<float>(a_h.data()[i]))));
  // A tensor assigned from a tensor of another dtype converts.
  auto f = poisoned<float, 2>({17, 9});
  f = a;
  check_all(f, [&](index_t i) { return loom_test::as_double(a_h.data()[i]); }, 0);
}
