// SPDX-License-Identifier: Apache-2.0
// Numerics against the reference's own IEEE model (reference.hpp): NaN and
// infinity propagation, signed zeros, subnormals, half/bf16 overflow and
// round-to-nearest-even on store, and integer wrap-around. The including file
// defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "random_support.hpp"

using loom_random::index_t;
namespace ref = loom_random::ref;

namespace {
using space_t = LOOM_TEST_SPACE;
constexpr bool on_device = std::is_same_v<space_t, loom::device>;

template <class T>
loom::tensor<T, 1, space_t> to_space(const std::vector<T>& v) {
  loom::host_tensor<T, 1> h({static_cast<index_t>(v.size())});
  std::copy(v.begin(), v.end(), h.data());
  if constexpr (on_device)
    return loom::to_device(h);
  else
    return h;
}

template <class T>
std::vector<double> values_of(const loom::tensor<T, 1, space_t>& t) {
  const auto h = loom::to_host(t);
  std::vector<double> out;
  for (index_t i = 0; i < h.size(); ++i) out.push_back(loom_test::as_double(h.data()[i]));
  return out;
}

// Bitwise agreement of doubles, NaN matching any NaN.
bool same_value(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return got == want && std::signbit(got) == std::signbit(want);
}

template <class T>
std::vector<T> specials() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> f = {0.0f, -0.0f, 1.0f, -2.5f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  // The smallest subnormal and the largest finite value of T.
  if constexpr (std::is_same_v<T, loom::half>) {
    f.push_back(std::ldexp(1.0f, -24));
    f.push_back(65504.0f);
  } else if constexpr (std::is_same_v<T, loom::bf16>) {
    f.push_back(std::ldexp(1.0f, -133));
    f.push_back(3.3895313892515355e38f);
  } else {
    f.push_back(std::numeric_limits<float>::denorm_min());
    f.push_back(std::numeric_limits<float>::max());
  }
  std::vector<T> out;
  for (float v : f) out.push_back(T(v));
  return out;
}
}  // namespace

TEMPLATE_TEST_CASE("NaN, infinities, signed zeros and subnormals go through + - * / as IEEE says",
                   "[numerics]" LOOM_TEST_TAG, float, double, loom::half, loom::bf16) {
  using T = TestType;
  const auto s = specials<T>();
  std::vector<T> av, bv;  // every ordered pair
  for (T x : s)
    for (T y : s) av.push_back(x), bv.push_back(y);
  auto a = to_space(av);
  auto b = to_space(bv);
  const auto n = static_cast<index_t>(av.size());
  const ref::kind k = ref::kind_of<T>(), c = ref::compute_of(k);
  auto check = [&](const char* op, const loom::tensor<T, 1, space_t>& y, auto f) {
    const auto got = values_of(y);
    for (index_t i = 0; i < n; ++i) {
      const double x = loom_test::as_double(av[static_cast<std::size_t>(i)]);
      const double z = loom_test::as_double(bv[static_cast<std::size_t>(i)]);
      // Computed in the compute type (one rounding: exact in double first), then stored as T.
      const double want = ref::round_to(k, ref::round_to(c, f(x, z)));
      INFO(op << "(" << x << ", " << z << "): got " << got[static_cast<std::size_t>(i)] << ", want " << want);
      CHECK(same_value(got[static_cast<std::size_t>(i)], want));
    }
  };
  loom::tensor<T, 1, space_t> y({n});
  y = a + b;
  check("add", y, [](double x, double z) { return x + z; });
  y = a - b;
  check("sub", y, [](double x, double z) { return x - z; });
  y = a * b;
  check("mul", y, [](double x, double z) { return x * z; });
  y = a / b;
  check("div", y, [](double x, double z) { return x / z; });
  y = -a;
  check("neg", y, [](double x, double) { return -x; });
  y = loom::abs(a);
  check("abs", y, [](double x, double) { return std::fabs(x); });
  y = loom::sqrt(a);
  check("sqrt", y, [](double x, double) { return std::sqrt(x); });
  // NaN-propagating maximum/minimum (zeros of both signs aside: IEEE leaves their order open).
  y = loom::maximum(a, b);
  const auto mx = values_of(y);
  y = loom::minimum(a, b);
  const auto mn = values_of(y);
  for (index_t i = 0; i < n; ++i) {
    const double x = loom_test::as_double(av[static_cast<std::size_t>(i)]);
    const double z = loom_test::as_double(bv[static_cast<std::size_t>(i)]);
    if (x == 0 && z == 0) continue;
    const bool nan = std::isnan(x) || std::isnan(z);
    CHECK(same_value(mx[static_cast<std::size_t>(i)], nan ? NAN : std::max(x, z)));
    CHECK(same_value(mn[static_cast<std::size_t>(i)], nan ? NAN : std::min(x, z)));
  }
}

TEMPLATE_TEST_CASE("math functions map special values as C's functions do", "[numerics]" LOOM_TEST_TAG, float,
                   double, loom::half, loom::bf16) {
  using T = TestType;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto x = to_space(std::vector<T>{T(0.0f), T(-0.0f), T(-1.0f), T(float(inf)), T(float(-inf)), T(float(nan))});
  loom::tensor<T, 1, space_t> y({6});
  // Special results exactly (the sign of a zero result aside); others to 1%.
  auto expect = [&](const char* op, std::vector<double> want) {
    const auto got = values_of(y);
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO(op << " of element " << i << ": got " << got[i] << ", want " << want[i]);
      if (std::isnan(want[i]))
        CHECK(std::isnan(got[i]));
      else
        CHECK((got[i] == want[i] || std::fabs(got[i] - want[i]) <= 1e-2 * std::fabs(want[i])));
    }
  };
  y = loom::exp(x);
  expect("exp", {1, 1, std::exp(-1.0), inf, 0, nan});
  y = loom::log(x);
  expect("log", {-inf, -inf, nan, inf, nan, nan});
  y = loom::tanh(x);
  expect("tanh", {0, -0.0, std::tanh(-1.0), 1, -1, nan});
  y = loom::sigmoid(x);
  expect("sigmoid", {0.5, 0.5, 1 / (1 + std::exp(1.0)), 1, 0, nan});
  y = loom::relu(x);
  CHECK(std::isnan(values_of(y)[5]));  // NaN stays NaN
  y = loom::sign(x);
  expect("sign", {0, 0, -1, 1, -1, nan});
  y = loom::floor(x) + loom::ceil(x) * 0 + loom::round(x) * 0;
  CHECK(std::isnan(values_of(y)[3]));  // inf * 0
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    // Results below the smallest normal are kept, not flushed to zero.
    auto tiny = to_space(std::vector<T>{std::numeric_limits<T>::min(), std::numeric_limits<T>::denorm_min() * 3});
    loom::tensor<T, 1, space_t> h({2});
    h = tiny * T(0.5);
    const auto got = values_of(h);
    CHECK(got[0] == static_cast<double>(std::numeric_limits<T>::min()) / 2);
    CHECK(got[1] == ref::round_to(ref::kind_of<T>(), 1.5 * static_cast<double>(std::numeric_limits<T>::denorm_min())));
  }
}

TEMPLATE_TEST_CASE("storing float into half and bf16 rounds to nearest even and overflows to infinity",
                   "[numerics]" LOOM_TEST_TAG, loom::half, loom::bf16) {
  using T = TestType;
  constexpr ref::kind k = ref::kind_of<T>();
  loom_random::rng r(loom_test::seed_for("round to nearest even"));
  std::vector<float> v;
  // Exact ties between neighbours of T (the case where "to even" decides), and random floats.
  for (int i = 0; i < 4000; ++i) {
    std::uint16_t bits = static_cast<std::uint16_t>(r.pick(0, 0xffff));
    const T t = loom::detail::from_bits<T>(bits);
    const float lo = static_cast<float>(t);
    if (!std::isfinite(lo)) continue;
    const T next = loom::detail::from_bits<T>(static_cast<std::uint16_t>(bits + 1));
    const float hi = static_cast<float>(next);
    if (std::isfinite(hi) && std::signbit(hi) == std::signbit(lo) && hi != lo) v.push_back((lo + hi) / 2);
    std::uint32_t fb = static_cast<std::uint32_t>(r.pick(0, 0xffffffffll));
    float f;
    std::memcpy(&f, &fb, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  // Overflow: the largest finite value, the first value that rounds up past it, and beyond.
  const double max = ref::format_of(k).max, q = ref::quantum(k, max);
  for (double d : {max, max + q / 2 - q / 8, max + q / 2, 2 * max, -max - q / 2, 1e39})
    v.push_back(static_cast<float>(d));
  auto x = to_space(v);
  loom::tensor<T, 1, space_t> y({static_cast<index_t>(v.size())});
  y = x;  // float -> T: converted once, on store
  auto y2 = loom::materialize(loom::cast<T>(x * 1.0f));
  const auto got = values_of(y), got2 = values_of(y2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double want = ref::round_to(k, static_cast<double>(v[i]));
    INFO("float " << v[i] << " (bits " << std::hex << [&] { std::uint32_t b; std::memcpy(&b, &v[i], 4); return b; }()
                  << std::dec << "): got " << got[i] << ", want " << want);
    REQUIRE(same_value(got[i], want));
    REQUIRE(same_value(got2[i], want));
  }
}

TEST_CASE("integers wrap around in their own type", "[numerics]" LOOM_TEST_TAG) {
  constexpr std::int32_t i32max = std::numeric_limits<std::int32_t>::max(), i32min = std::numeric_limits<std::int32_t>::min();
  constexpr std::int64_t i64max = std::numeric_limits<std::int64_t>::max(), i64min = std::numeric_limits<std::int64_t>::min();
  auto a32 = to_space(std::vector<std::int32_t>{i32max, i32min, 1 << 20, -7, i32min});
  auto b32 = to_space(std::vector<std::int32_t>{1, -1, 1 << 12, 3, -1});
  auto s = loom::materialize(a32 + b32);
  auto d = loom::materialize(a32 - b32);
  auto m = loom::materialize(a32 * b32);
  auto ng = loom::materialize(-a32);
  auto ab = loom::materialize(loom::abs(a32));
  auto md = loom::materialize(a32 % b32);
  auto pw = loom::materialize(loom::pow(a32, 3));
  auto wrap32 = [](std::int64_t v) { return static_cast<double>(ref::wrap(ref::kind::i32, v)); };
  for (index_t i = 0; i < 5; ++i) {
    const std::int64_t x = loom::to_host(a32)(i), z = loom::to_host(b32)(i);
    INFO("a = " << x << ", b = " << z);
    CHECK(values_of(s)[static_cast<std::size_t>(i)] == wrap32(x + z));
    CHECK(values_of(d)[static_cast<std::size_t>(i)] == wrap32(x - z));
    CHECK(values_of(m)[static_cast<std::size_t>(i)] == wrap32(x * z));
    CHECK(values_of(ng)[static_cast<std::size_t>(i)] == wrap32(-x));
    CHECK(values_of(ab)[static_cast<std::size_t>(i)] == wrap32(x < 0 ? -x : x));
    const std::int64_t r = z == 0 ? 0 : ((x % z) + z) % z;
    CHECK(values_of(md)[static_cast<std::size_t>(i)] == static_cast<double>(r));
    CHECK(values_of(pw)[static_cast<std::size_t>(i)] == wrap32(ref::wadd(0, ref::wmul(ref::wmul(x, x), x))));
  }
  auto a64 = to_space(std::vector<std::int64_t>{i64max, i64min, i64min});
  auto b64 = to_space(std::vector<std::int64_t>{1, -1, 2});
  const auto s64 = loom::to_host(loom::materialize(a64 + b64));
  const auto m64 = loom::to_host(loom::materialize(a64 * b64));
  const auto n64 = loom::to_host(loom::materialize(-a64));
  CHECK(s64(0) == i64min);
  CHECK(s64(1) == i64max);
  CHECK(m64(1) == i64min);  // -(-2^63) wraps to itself
  CHECK(m64(2) == 0);
  CHECK(n64(1) == i64min);
  // int8 and uint8 wrap too (computed in int, converted back).
  auto a8 = to_space(std::vector<std::int8_t>{127, -128, 100});
  const auto s8 = loom::to_host(loom::materialize(a8 + a8));
  const auto n8 = loom::to_host(loom::materialize(-a8));
  CHECK(s8(0) == -2);
  CHECK(s8(1) == 0);
  CHECK(s8(2) == -56);
  CHECK(n8(1) == -128);
  auto u8 = to_space(std::vector<std::uint8_t>{0, 255});
  const auto du8 = loom::to_host(loom::materialize(u8 - 1));
  CHECK(du8(0) == 255);
  CHECK(du8(1) == 254);
}
