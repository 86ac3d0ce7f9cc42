// SPDX-License-Identifier: Apache-2.0
// Random numbers inside expressions, checked on both executors: every value
// against an independent per-element reference (Philox4x32-10 itself is
// checked against Random123 in philox_oracle.cpp), through every path and
// layout. The including file defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "loom_test.hpp"

using loom::index_t;
using loom::none;
using loom::range;
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
loom::tensor<T, R, space_t> poisoned(const loom::shape<R>& s) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::poison_value<T>();
  return in_space(h);
}

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::random_value<T>(g);
  return h;
}

// The 32 random bits of element i of stream (seed, offset), from the counter
// layout the docs give: block i / 4 = (low, high) words 0, 1; offset words 2, 3.
std::uint32_t ref_bits(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  const std::uint64_t b = i / 4;
  const loom::philox_words r =
      loom::philox4x32_10({{static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32),
                            static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)}},
                          static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return r.w[i % 4];
}
// Uniform of `digits` bits, in double: floor(bits / 2^(32 - digits)) / 2^digits.
double ref_uniform(std::uint32_t bits, int digits) {
  return std::ldexp(std::floor(std::ldexp(static_cast<double>(bits), digits - 32)), -digits);
}
// Box-Muller of element i, in double, from the words of its pair of lanes.
double ref_normal(std::uint64_t seed, std::uint64_t offset, std::uint64_t i) {
  const std::uint64_t first = i & ~std::uint64_t{1};
  const double u1 = ref_uniform(ref_bits(seed, offset, first), 24) + std::ldexp(1.0, -24);
  const double u2 = ref_uniform(ref_bits(seed, offset, first + 1), 24);
  const double radius = std::sqrt(-2 * std::log(u1));
  const double angle = 2 * 3.14159265358979323846 * u2;
  return radius * (i % 2 ? std::sin(angle) : std::cos(angle));
}
template <class T>
int digits_of() {
  if constexpr (std::is_same_v<T, double>) return 32;
  if constexpr (std::is_same_v<T, loom::half>) return 11;
  if constexpr (std::is_same_v<T, loom::bf16>) return 8;
  return 24;
}

// Checks every element of host copy `h` (logical row-major index i) against want(i) bit for bit.
template <class V, class Want>
void check_exact(const V& y, Want want) {
  const auto h = loom::to_host(y);
  using T = typename decltype(h)::value_type;
  const auto ext = h.extents();
  index_t bad = 0;
  for (index_t i = 0; i < h.size(); ++i) {
    const T w = want(static_cast<std::uint64_t>(i));
    const T got = h.data()[i];
    if (!loom_test::same_bits(got, w) && bad++ < 5) {
      INFO("element " << i << " of " << loom::shape_string(ext) << ": got " << loom_test::as_double(got) << ", want "
                      << loom_test::as_double(w));
      CHECK(false);
    }
  }
  CHECK(bad == 0);
}
}  // namespace

TEMPLATE_TEST_CASE("rand gives each element the value of its logical index whatever the path or layout",
                   "[rng]" LOOM_TEST_TAG, float, double, loom::half, loom::bf16) {
  const std::uint64_t seed = 0x0123456789abcdefull, offset = 0xfedcba9876543210ull;
  const int digits = digits_of<TestType>();
  const auto want = [&](std::uint64_t i) { return TestType(ref_uniform(ref_bits(seed, offset, i), digits)); };
  for (auto s : {loom::shape<2>{1, 1}, loom::shape<2>{7, 1}, loom::shape<2>{1, 7}, loom::shape<2>{257, 33}}) {
    INFO("shape " << loom::shape_string(s));
    // Dense output: the contiguous path (vector loads on the device).
    auto y = poisoned<TestType, 2>(s);
    y = loom::rand<TestType>(seed, offset);
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    check_exact(y, want);
    // A transposed output: element (i, j) of the assignment's shape is still index i * cols + j.
    auto t = poisoned<TestType, 2>({s[1], s[0]});
    t.t() = loom::rand<TestType>(seed, offset);
    auto th = loom::to_host(t);
    loom::host_tensor<TestType, 2> back(s);
    back = th.t();
    check_exact(back, want);
    // A strided output (every other column of a wider tensor): the general path.
    auto wide = poisoned<TestType, 2>({s[0], 2 * s[1]});
    auto every_other = wide.slice(loom::whole, range(0, none, 2));
    every_other = loom::rand<TestType>(seed, offset);
    if (s[0] * s[1] > 1) CHECK(loom::last_eval().path == loom::eval_path::general);
    loom::host_tensor<TestType, 2> picked(s);
    picked = loom::to_host(wide).slice(loom::whole, range(0, none, 2));
    check_exact(picked, want);
    // An unaligned output (starting one element in): every element still its own value.
    auto flat = poisoned<TestType, 1>(loom::shape<1>{s[0] * s[1] + 1});
    flat.slice(range(1, none, 1)) = loom::rand<TestType>(seed, offset);
    loom::host_tensor<TestType, 1> shifted(loom::shape<1>{s[0] * s[1]});
    shifted = loom::to_host(flat).slice(range(1, none, 1));
    check_exact(shifted, want);
  }
}

TEST_CASE("rand in an expression keeps its values under a permuted rank-3 output and a broadcast operand",
          "[rng]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("rand permuted"));
  const loom::shape<3> s{5, 3, 9};
  auto bias_h = random_host<float, 1>({9}, g);
  auto bias = in_space(bias_h);
  const std::uint64_t seed = g(), offset = g();
  // y (logical shape s) is written through a permuted view of a [9, 5, 3] tensor.
  auto storage = poisoned<float, 3>({9, 5, 3});
  auto y = storage.permute({1, 2, 0});
  REQUIRE(y.extents() == s);
  y = loom::rand(seed, offset) + bias;
  CHECK(loom::last_eval().path == loom::eval_path::general);
  loom::host_tensor<float, 3> yh(s);
  yh = loom::to_host(storage).permute({1, 2, 0});
  check_exact(yh, [&](std::uint64_t i) {
    return static_cast<float>(ref_uniform(ref_bits(seed, offset, i), 24)) + bias_h.data()[i % 9];
  });
}

TEST_CASE("rand with dense and broadcast operands keeps its values in every piece and run of elements",
          "[rng]" LOOM_TEST_TAG) {
  // The host computes trees with a random leaf in pieces of at most 16384
  // elements (per period of a broadcast operand), 16 elements per load: a
  // long dense output (several pieces), periods longer than a piece and odd
  // periods (pieces that start inside a Philox block).
  std::mt19937_64 g(loom_test::seed_for("rand pieces"));
  const std::uint64_t seed = g(), offset = g();
  auto u = [&](std::uint64_t i) { return static_cast<float>(ref_uniform(ref_bits(seed, offset, i), 24)); };
  for (index_t cols : {index_t{67}, index_t{64}, index_t{16389}, index_t{40007}}) {
    const loom::shape<2> s{5, cols};
    INFO("shape " << loom::shape_string(s));
    auto bias_h = random_host<float, 1>({cols}, g);
    auto x_h = random_host<float, 2>(s, g);
    auto bias = in_space(bias_h);
    auto x = in_space(x_h);
    auto y = poisoned<float, 2>(s);
    y = loom::rand(seed, offset) * 2.0f + bias;
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    check_exact(y, [&](std::uint64_t i) { return u(i) * 2.0f + bias_h.data()[i % static_cast<std::uint64_t>(cols)]; });
    auto z = poisoned<float, 2>(s);
    z = x - loom::rand(seed, offset);
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    check_exact(z, [&](std::uint64_t i) { return x_h.data()[i] - u(i); });
  }
}

TEST_CASE("two streams in one expression keep their own values", "[rng]" LOOM_TEST_TAG) {
  // The same distribution twice (alternating blocks on the host) and a third stream under a row reduction.
  const loom::shape<2> s{9, 13};
  auto y = poisoned<float, 2>(s);
  y = loom::rand(1, 2) - loom::rand(1, 3) * 2 + loom::rand(4, 2) * 4;
  check_exact(y, [](std::uint64_t i) {
    return static_cast<float>(ref_uniform(ref_bits(1, 2, i), 24)) -
           static_cast<float>(ref_uniform(ref_bits(1, 3, i), 24)) * 2 +
           static_cast<float>(ref_uniform(ref_bits(4, 2, i), 24)) * 4;
  });
}

TEST_CASE("rand inside a row kernel gives the same values as elementwise", "[rng]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("rand rows"));
  const std::uint64_t seed = g(), offset = g();
  for (auto s : {loom::shape<2>{3, 7}, loom::shape<2>{33, 257}, loom::shape<2>{4, 1024}}) {
    INFO("shape " << loom::shape_string(s));
    auto xh = random_host<float, 2>(s, g);
    auto x = in_space(xh);
    auto y = poisoned<float, 2>(s);
    // row_max over rand + x: the reductions' row values come from the same counters.
    y = loom::rand(seed, offset) - loom::row_max(x * 0 + loom::rand(seed, offset));
    CHECK(loom::last_eval().path == loom::eval_path::rows);
    const auto h = loom::to_host(y);
    index_t bad = 0;
    for (index_t r = 0; r < s[0]; ++r) {
      float mx = -INFINITY;
      for (index_t c = 0; c < s[1]; ++c)
        mx = std::max(mx, static_cast<float>(ref_uniform(ref_bits(seed, offset, r * s[1] + c), 24)));
      for (index_t c = 0; c < s[1]; ++c) {
        const float want = static_cast<float>(ref_uniform(ref_bits(seed, offset, r * s[1] + c), 24)) - mx;
        if (h.data()[r * s[1] + c] != want) ++bad;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("row reductions over different streams are not merged, over the same stream they are",
          "[rng]" LOOM_TEST_TAG) {
  const loom::shape<2> s{6, 45};
  auto x = in_space(loom::full<float, 2, loom::host>(s, 0.0f));
  auto y = poisoned<float, 2>(s);
  y = loom::row_max(x + loom::rand(1, 2)) - loom::row_max(x + loom::rand(1, 2));
  const int same_passes = loom::last_eval().row_passes;
  check_exact(y, [](std::uint64_t) { return 0.0f; });
  y = loom::row_max(x + loom::rand(1, 2)) - loom::row_max(x + loom::rand(1, 3));
  CHECK(loom::last_eval().row_passes > same_passes);
  check_exact(y, [&](std::uint64_t i) {
    const std::uint64_t row = i / 45;
    float a = -INFINITY, b = -INFINITY;
    for (std::uint64_t c = 0; c < 45; ++c) {
      a = std::max(a, static_cast<float>(ref_uniform(ref_bits(1, 2, row * 45 + c), 24)));
      b = std::max(b, static_cast<float>(ref_uniform(ref_bits(1, 3, row * 45 + c), 24)));
    }
    return a - b;
  });
}

TEST_CASE("dropout inside a layer with a row reduction is one kernel with one mask", "[rng]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dropout layer"));
  const loom::shape<2> s{17, 129};
  auto xh = random_host<float, 2>(s, g);
  auto x = in_space(xh);
  const float p = 0.2f;
  const std::uint64_t seed = g(), step = 6;
  const auto centered_dropout = loom::layer([=](auto v) {
    const auto d = loom::dropout(v, p, seed, step);
    return d - loom::row_max(d);
  });
  auto y = poisoned<float, 2>(s);
  const auto before = loom::launches();
  y = centered_dropout(x);
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
  CHECK(loom::last_eval().path == loom::eval_path::rows);
  const float scale = 1.0f / (1.0f - p);
  const auto kept = [&](index_t i) {
    const bool drop = ref_uniform(ref_bits(seed, step, static_cast<std::uint64_t>(i)), 24) < p;
    return xh.data()[i] * (drop ? 0.0f : scale);
  };
  std::vector<float> want(static_cast<std::size_t>(s[0] * s[1]));
  for (index_t r = 0; r < s[0]; ++r) {
    float mx = -INFINITY;
    for (index_t c = 0; c < s[1]; ++c) mx = std::max(mx, kept(r * s[1] + c));
    for (index_t c = 0; c < s[1]; ++c) want[static_cast<std::size_t>(r * s[1] + c)] = kept(r * s[1] + c) - mx;
  }
  check_exact(y, [&](std::uint64_t i) { return want[i]; });
}

TEMPLATE_TEST_CASE("randn is Box-Muller of the documented uniforms", "[rng]" LOOM_TEST_TAG, float, double) {
  const std::uint64_t seed = 77, offset = 3;
  for (auto s : {loom::shape<2>{1, 1}, loom::shape<2>{7, 1}, loom::shape<2>{257, 33}}) {
    auto y = poisoned<TestType, 2>(s);
    y = loom::randn<TestType>(seed, offset);
    const auto h = loom::to_host(y);
    index_t bad = 0;
    for (index_t i = 0; i < h.size(); ++i) {
      const auto u = static_cast<std::uint64_t>(i);
      // double: from 32-bit uniforms; float: from 24-bit uniforms, within float rounding of the math.
      double want;
      if constexpr (std::is_same_v<TestType, double>) {
        const std::uint64_t first = u & ~std::uint64_t{1};
        const double u1 = ref_uniform(ref_bits(seed, offset, first), 32) + std::ldexp(1.0, -32);
        const double u2 = ref_uniform(ref_bits(seed, offset, first + 1), 32);
        want = std::sqrt(-2 * std::log(u1)) *
               (u % 2 ? std::sin(2 * 3.14159265358979323846 * u2) : std::cos(2 * 3.14159265358979323846 * u2));
      } else {
        want = ref_normal(seed, offset, u);
      }
      const double tol = std::is_same_v<TestType, double> ? 1e-12 : 2e-5;
      if (!(std::fabs(h.data()[i] - want) <= tol * (1 + std::fabs(want))) && bad++ < 5) {
        INFO("element " << i << ": got " << h.data()[i] << ", want " << want);
        CHECK(false);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("stochastic_round to bf16 adds 16 random bits below the bf16 part and cuts them", "[rng]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("stochastic round"));
  const loom::shape<2> s{33, 65};
  auto xh = random_host<float, 2>(s, g);
  xh.data()[0] = std::nanf("");
  xh.data()[1] = INFINITY;
  xh.data()[2] = -INFINITY;
  xh.data()[3] = 1.0f;  // exact in bf16
  xh.data()[4] = -0.0f;
  xh.data()[5] = 3.0e38f;  // may round up past the largest bf16: infinity
  auto x = in_space(xh);
  const std::uint64_t seed = g(), offset = 9;
  auto y = poisoned<loom::bf16, 2>(s);
  y = loom::stochastic_round<loom::bf16>(x * 1, seed, offset);
  const auto want = [&](std::uint64_t i) {
    const float v = xh.data()[i];
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (std::isnan(v) || std::isinf(v)) return loom::bf16(v);
    bits += ref_bits(seed, offset, i) >> 16;
    return loom::detail::from_bits<loom::bf16>(static_cast<std::uint16_t>(bits >> 16));
  };
  check_exact(y, want);
  // Into float: the same bf16 values, exactly (NaN as it came).
  auto yf = poisoned<float, 2>(s);
  yf = loom::stochastic_round<loom::bf16>(x, seed, offset);
  check_exact(yf,
              [&](std::uint64_t i) { return std::isnan(xh.data()[i]) ? xh.data()[i] : static_cast<float>(want(i)); });
}

TEST_CASE("creation helpers fill new tensors from the same streams", "[rng]" LOOM_TEST_TAG) {
  const loom::shape<2> s{31, 17};
  auto u = loom::rand<float, 2, space_t>(s, 5, 6);
  check_exact(u, [](std::uint64_t i) { return static_cast<float>(ref_uniform(ref_bits(5, 6, i), 24)); });
  auto ub = loom::rand<loom::bf16, 2, space_t>(s, 5, 6);
  check_exact(ub, [](std::uint64_t i) { return loom::bf16(static_cast<float>(ref_uniform(ref_bits(5, 6, i), 8))); });
  auto like = loom::rand_like(ub, 5, 6);
  STATIC_REQUIRE(std::is_same_v<decltype(like), loom::tensor<loom::bf16, 2, space_t>>);
  check_exact(like, [](std::uint64_t i) { return loom::bf16(static_cast<float>(ref_uniform(ref_bits(5, 6, i), 8))); });
  auto n = loom::randn<float, 2, space_t>(s, 5);
  auto n2 = loom::randn_like(n, 5);
  auto expr = poisoned<float, 2>(s);
  expr = loom::randn(5);
  const auto eh = loom::to_host(expr);
  check_exact(n, [&](std::uint64_t i) { return eh.data()[i]; });
  check_exact(n2, [&](std::uint64_t i) { return eh.data()[i]; });
}

TEMPLATE_TEST_CASE("dropout keeps, scales and drops by the bernoulli mask in one kernel", "[rng]" LOOM_TEST_TAG, float,
                   loom::bf16) {
  std::mt19937_64 g(loom_test::seed_for("dropout"));
  const loom::shape<2> s{67, 129};
  auto xh = random_host<TestType, 2>(s, g);
  auto wh = random_host<TestType, 1>({129}, g);
  auto bh = random_host<TestType, 1>({129}, g);
  auto rh = random_host<TestType, 2>(s, g);
  auto x = in_space(xh);
  auto w = in_space(wh);
  auto b = in_space(bh);
  auto r = in_space(rh);
  const std::uint64_t seed = g(), step = 12;
  for (float p : {0.0f, 0.1f, 0.5f, 0.9f, 1.0f}) {
    INFO("p = " << p);
    auto y = poisoned<TestType, 2>(s);
    const auto before = loom::launches();
    y = loom::dropout(x * w + b, p, seed, step) + r;
    const auto after = loom::launches();
    CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
    auto mask = poisoned<bool, 2>(s);
    mask = loom::bernoulli(p, seed, step);
    const auto yh = loom::to_host(y);
    const auto mh = loom::to_host(mask);
    const float scale = p < 1 ? 1.0f / (1.0f - p) : 0.0f;
    index_t kept = 0, bad = 0;
    for (index_t i = 0; i < yh.size(); ++i) {
      const auto u = static_cast<std::uint64_t>(i);
      const bool drop = ref_uniform(ref_bits(seed, step, u), 24) < p;
      if (mh.data()[i] != drop) ++bad;
      const double pre = loom_test::as_double(xh.data()[i]) * loom_test::as_double(wh.data()[i % 129]) +
                         loom_test::as_double(bh.data()[i % 129]);
      const double want = (drop ? 0.0 : pre * scale) + loom_test::as_double(rh.data()[i]);
      const double tol = std::is_same_v<TestType, float> ? 1e-5 : 2e-2;
      if (!(std::fabs(loom_test::as_double(yh.data()[i]) - want) <= tol * (1 + std::fabs(want)))) ++bad;
      kept += drop ? 0 : 1;
    }
    CHECK(bad == 0);
    if (p == 0.0f) CHECK(kept == yh.size());
    if (p == 1.0f) CHECK(kept == 0);
  }
}

TEST_CASE("dropout with p = 0 is the identity and dropout_backward regenerates the mask", "[rng]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dropout backward"));
  const loom::shape<2> s{33, 65};
  auto xh = random_host<float, 2>(s, g);
  auto gh = random_host<float, 2>(s, g);
  auto x = in_space(xh);
  auto grad = in_space(gh);
  auto y = poisoned<float, 2>(s);
  y = loom::dropout(x, 0.0f, 1, 2);
  check_exact(y, [&](std::uint64_t i) { return xh.data()[i]; });
  const float p = 0.3f;
  y = loom::dropout(x, p, 99, 4);
  auto dx = poisoned<float, 2>(s);
  dx = loom::dropout_backward(grad, p, 99, 4);
  const auto yh = loom::to_host(y);
  const auto dh = loom::to_host(dx);
  const float scale = 1.0f / (1.0f - p);
  index_t bad = 0;
  for (index_t i = 0; i < yh.size(); ++i) {
    const bool dropped = yh.data()[i] == 0.0f && xh.data()[i] != 0.0f;
    // Same mask: dropped forward <=> zero gradient; kept: the same scale.
    if (dropped != (dh.data()[i] == 0.0f && gh.data()[i] != 0.0f)) ++bad;
    if (!dropped && (yh.data()[i] != xh.data()[i] * scale || dh.data()[i] != gh.data()[i] * scale)) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("dropout and bernoulli reject a probability outside [0, 1]", "[rng]" LOOM_TEST_TAG) {
  auto x = poisoned<float, 1>({5});
  for (float p : {-0.1f, 1.5f, std::nanf(""), INFINITY}) {
    INFO("p = " << p);
    CHECK_THROWS_AS(loom::dropout(x, p, 1), loom::value_error);
    CHECK_THROWS_AS(loom::bernoulli(p, 1), loom::value_error);
    CHECK_THROWS_AS(loom::dropout_backward(x, p, 1), loom::value_error);
  }
  CHECK_THROWS_WITH(loom::dropout(x, 2.0f, 1),
                    Catch::Matchers::Contains("loom: dropout needs a probability p in [0, 1]"));
}

namespace {
// randperm(n, seed, offset) from its documented definition: index i's key is
// words 2i (high half) and 2i + 1 (low half) of stream (seed, offset) as a
// signed int64; the indices in ascending order of (key, index).
std::vector<std::int64_t> ref_randperm(index_t n, std::uint64_t seed, std::uint64_t offset) {
  std::vector<std::pair<std::int64_t, std::int64_t>> keyed(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    const auto w = static_cast<std::uint64_t>(2 * i);
    const std::uint64_t bits = (std::uint64_t{ref_bits(seed, offset, w)} << 32) | ref_bits(seed, offset, w + 1);
    keyed[static_cast<std::size_t>(i)] = {static_cast<std::int64_t>(bits), i};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::int64_t> order;
  for (const auto& k : keyed) order.push_back(k.second);
  return order;
}

// True when p holds each of 0 .. size - 1 exactly once.
bool is_permutation_of_iota(const std::vector<std::int64_t>& p) {
  std::vector<char> seen(p.size(), 0);
  for (const std::int64_t v : p) {
    if (v < 0 || static_cast<std::size_t>(v) >= p.size() || seen[static_cast<std::size_t>(v)]) return false;
    seen[static_cast<std::size_t>(v)] = 1;
  }
  return true;
}

std::vector<std::int64_t> host_values(const loom::tensor<std::int64_t, 1, space_t>& t) {
  const auto h = loom::to_host(t);
  return std::vector<std::int64_t>(h.data(), h.data() + h.size());
}

// Pearson's chi-square statistic of counts against equal expected counts.
double chi_square(const std::vector<int>& counts, double expected) {
  double x2 = 0;
  for (const int c : counts) x2 += (c - expected) * (c - expected) / expected;
  return x2;
}
}  // namespace

TEST_CASE("randperm is the documented permutation of Philox keys for odd sizes", "[rng][randperm]" LOOM_TEST_TAG) {
  STATIC_REQUIRE(std::is_same_v<decltype(loom::randperm<space_t>(3, 1)), loom::tensor<std::int64_t, 1, space_t>>);
  for (const index_t n : {index_t{0}, index_t{1}, index_t{2}, index_t{7}, index_t{1000003}}) {
    INFO("n = " << n);
    const auto p = loom::randperm<space_t>(n, 0x5eed'1234'abcdULL, 17);
    REQUIRE(p.extents() == loom::shape<1>{n});
    const auto got = host_values(p);
    CHECK(is_permutation_of_iota(got));
    CHECK(got == ref_randperm(n, 0x5eed'1234'abcdULL, 17));
    // The same (seed, offset): the same permutation.
    CHECK(host_values(loom::randperm<space_t>(n, 0x5eed'1234'abcdULL, 17)) == got);
    if constexpr (on_device) {
      const auto on_host = loom::randperm<loom::host>(n, 0x5eed'1234'abcdULL, 17);
      CHECK(got == std::vector<std::int64_t>(on_host.data(), on_host.data() + on_host.size()));
    }
  }
  // Another seed or another offset: another permutation (for these values).
  const auto base = host_values(loom::randperm<space_t>(1001, 5, 6));
  CHECK(is_permutation_of_iota(base));
  CHECK(host_values(loom::randperm<space_t>(1001, 5, 7)) != base);
  CHECK(host_values(loom::randperm<space_t>(1001, 6, 6)) != base);
  CHECK(host_values(loom::randperm<space_t>(1001, (5ULL << 32) | 5, 6)) != base);  // the seed's high half counts
  CHECK(host_values(loom::randperm<space_t>(1001, 5, (6ULL << 32) | 6)) != base);  // and the offset's
  CHECK(host_values(loom::randperm<space_t>(7, 5, 6)) != host_values(loom::randperm<space_t>(7, 5, 8)));
  CHECK_THROWS_AS(loom::randperm<space_t>(-1, 5), loom::value_error);
}

TEST_CASE("randperm draws every permutation equally often over seeds and offsets", "[rng][randperm]" LOOM_TEST_TAG) {
  // All 24 orders of 4 elements over 4800 seeds: chi-square with 23 degrees
  // of freedom below 49.7 (its 0.1% tail); a fixed set of seeds, so the
  // outcome is fixed too.
  std::vector<int> orders(24, 0);
  for (std::uint64_t seed = 0; seed < 4800; ++seed) {
    const auto p = host_values(loom::randperm<space_t>(4, seed * 0x9e3779b97f4a7c15ULL));
    REQUIRE(is_permutation_of_iota(p));
    // The rank of the permutation in lexicographic order (Lehmer code).
    int rank = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      int smaller_after = 0;
      for (std::size_t j = i + 1; j < 4; ++j) smaller_after += p[j] < p[i];
      rank = rank * static_cast<int>(4 - i) + smaller_after;
    }
    ++orders[static_cast<std::size_t>(rank)];
  }
  CHECK(chi_square(orders, 200.0) < 49.7);
  // Where element 0 lands in 7 elements, one seed, offsets 0 .. 6999 (an
  // epoch each): 6 degrees of freedom, below 22.5 (the 0.1% tail).
  std::vector<int> position(7, 0);
  for (std::uint64_t epoch = 0; epoch < 7000; ++epoch) {
    const auto p = host_values(loom::randperm<space_t>(7, 2024, epoch));
    ++position[static_cast<std::size_t>(std::find(p.begin(), p.end(), 0) - p.begin())];
  }
  CHECK(chi_square(position, 1000.0) < 22.5);
}
