// SPDX-License-Identifier: Apache-2.0
// Tensor behaviours checked on both executors. The including file defines
// LOOM_TEST_SPACE (loom::host or loom::device) and LOOM_TEST_TAG.
#include <vector>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::whole;
using loom::index_t;
using loom::none;
using loom::range;
using space_t = LOOM_TEST_SPACE;

#define LOOM_ALL_DTYPES bool, std::int8_t, std::uint8_t, std::int32_t, std::int64_t, loom::half, loom::bf16, float, double

namespace {
// A tensor of space_t holding the given host data.
template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space(const loom::host_tensor<T, R>& h) {
  if constexpr (std::is_same_v<space_t, loom::host>)
    return h;
  else
    return loom::to_device(h);
}

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g) {
  loom::host_tensor<T, R> h(s);
  loom_test::randomize(h.view(), g);
  return h;
}

template <class T, std::size_t R>
void poison(loom::tensor<T, R, space_t>& t) {
  auto h = loom::host_tensor<T, R>(t.extents());
  std::fill(h.data(), h.data() + h.size(), loom_test::poison_value<T>());
  loom::copy(h, t);
}
}  // namespace

TEMPLATE_TEST_CASE("tensor round-trips through its space bit-exactly", "[tensor]" LOOM_TEST_TAG, LOOM_ALL_DTYPES) {
  std::mt19937_64 g(loom_test::seed_for("round trip"));
  for (auto s : {loom::shape<2>{1, 1}, loom::shape<2>{7, 1}, loom::shape<2>{257, 33}}) {
    auto h = random_host<TestType, 2>(s, g);
    auto t = in_space(h);
    auto back = loom::to_host(t);
    REQUIRE(back.extents() == s);
    for (index_t i = 0; i < h.size(); ++i) REQUIRE(loom_test::same_bits(back.data()[i], h.data()[i]));
  }
}

TEMPLATE_TEST_CASE("fill sets every element of strided views in one launch", "[tensor]" LOOM_TEST_TAG, LOOM_ALL_DTYPES) {
  std::mt19937_64 g(loom_test::seed_for("fill"));
  auto h = random_host<TestType, 2>({9, 13}, g);
  auto t = in_space(h);
  const TestType value = loom_test::random_value<TestType>(g);
  const auto before = loom::launches();
  loom::fill(t.slice(range(1, none, 3), range(none, none, -2)), value);
  const auto after = loom::launches();
  if constexpr (std::is_same_v<space_t, loom::host>)
    CHECK(after.host == before.host + 1);
  else
    CHECK(after.device == before.device + 1);
  auto back = loom::to_host(t);
  for (index_t i = 0; i < 9; ++i)
    for (index_t j = 0; j < 13; ++j) {
      const bool hit = (i >= 1 && (i - 1) % 3 == 0) && (j % 2 == 0);
      REQUIRE(loom_test::same_bits(back(i, j), hit ? value : h(i, j)));
    }
}

TEMPLATE_TEST_CASE("copy moves strided and reversed views between spaces", "[tensor]" LOOM_TEST_TAG, LOOM_ALL_DTYPES) {
  std::mt19937_64 g(loom_test::seed_for("strided copy"));
  auto src_h = random_host<TestType, 3>({5, 7, 3}, g);
  auto src = in_space(src_h);
  auto src_v = src.slice(range(none, none, -2), whole, range(1, 3));  // 3 x 7 x 2, negative stride
  // Into a contiguous host tensor (device -> host gather when on the device).
  loom::host_tensor<TestType, 3> dst({3, 7, 2});
  loom::copy(src_v, dst);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 7; ++j)
      for (index_t k = 0; k < 2; ++k) REQUIRE(loom_test::same_bits(dst(i, j, k), src_h(4 - 2 * i, j, 1 + k)));
  // Into a transposed view of a tensor in the same space.
  loom::tensor<TestType, 3, space_t> wide({2, 7, 3});
  poison(wide);
  loom::copy(src_v, wide.permute({2, 1, 0}));
  auto wide_h = loom::to_host(wide);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 7; ++j)
      for (index_t k = 0; k < 2; ++k) REQUIRE(loom_test::same_bits(wide_h(k, j, i), src_h(4 - 2 * i, j, 1 + k)));
  // From a strided host view into a strided view in this space.
  loom::tensor<TestType, 3, space_t> t2({5, 7, 3});
  poison(t2);
  loom::copy(src_h.slice(range(none, none, -2), whole, range(1, 3)), t2.slice(range(0, 3), whole, range(none, 0, -1)));
  auto t2h = loom::to_host(t2);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 7; ++j)
      for (index_t k = 0; k < 2; ++k) REQUIRE(loom_test::same_bits(t2h(i, j, 2 - k), src_h(4 - 2 * i, j, 1 + k)));
}

TEST_CASE("copy between overlapping views reads every element before it is overwritten", "[tensor]" LOOM_TEST_TAG) {
  loom::host_tensor<double, 1> h({20});
  for (index_t i = 0; i < 20; ++i) h(i) = static_cast<double>(i);
  auto t = in_space(h);
  loom::copy(t.slice(range(0, 15)), t.slice(range(5, 20)));  // shift right by 5
  auto back = loom::to_host(t);
  for (index_t i = 0; i < 5; ++i) CHECK(back(i) == i);
  for (index_t i = 5; i < 20; ++i) CHECK(back(i) == i - 5);
  loom::copy(t.slice(range(none, none, -1)), t.view());  // reverse in place
  back = loom::to_host(t);
  for (index_t i = 0; i < 20; ++i) CHECK(back(i) == (19 - i < 5 ? 19 - i : 19 - i - 5));
}

TEST_CASE("copy with mismatched shapes throws naming both and changes nothing", "[tensor]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("copy mismatch"));
  auto h = random_host<float, 2>({3, 4}, g);
  auto t = in_space(h);
  loom::host_tensor<float, 2> other({4, 3});
  REQUIRE_THROWS_WITH(loom::copy(other, t), Contains("[4, 3]") && Contains("[3, 4]"));
  auto back = loom::to_host(t);
  for (index_t i = 0; i < h.size(); ++i) REQUIRE(back.data()[i] == h.data()[i]);
  // Tensor assignment needs equal shapes too.
  loom::tensor<float, 2, space_t> wrong({2, 2});
  REQUIRE_THROWS_AS(t = wrong, loom::shape_error);
  back = loom::to_host(t);
  for (index_t i = 0; i < h.size(); ++i) REQUIRE(back.data()[i] == h.data()[i]);
}

TEST_CASE("tensor copies are deep and moves transfer ownership", "[tensor]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("deep copy"));
  auto h = random_host<float, 2>({6, 5}, g);
  auto a = in_space(h);
  auto b = a;  // deep copy
  REQUIRE(b.data() != a.data());
  loom::fill(a, 0.0f);
  auto bh = loom::to_host(b);
  for (index_t i = 0; i < h.size(); ++i) REQUIRE(bh.data()[i] == h.data()[i]);
  const float* p = b.data();
  auto c = std::move(b);
  CHECK(c.data() == p);
  CHECK(b.size() == 0);
  loom::tensor<float, 2, space_t> d({6, 5});
  d = a;  // element copy into existing storage
  auto dh = loom::to_host(d);
  for (index_t i = 0; i < h.size(); ++i) REQUIRE(dh.data()[i] == 0.0f);
}

TEST_CASE("new tensors start as 0xFF bytes (NaN, -1) while fill_uninitialized is on, as in the test programs",
          "[tensor]" LOOM_TEST_TAG) {
  REQUIRE(loom::fill_uninitialized());  // tests/main_host.cpp and main_cuda.cpp turn it on
  loom::tensor<float, 2, space_t> f({7, 33});
  loom::tensor<loom::bf16, 1, space_t> b({257});
  loom::tensor<std::int64_t, 1, space_t> i({5});
  auto fe = loom::empty_like(f);
  // Off while copying back, so the host copies start unfilled and only what
  // was copied can be NaN.
  loom::set_fill_uninitialized(false);
  CHECK_FALSE(loom::fill_uninitialized());
  const auto fh = loom::to_host(f), feh = loom::to_host(fe);
  const auto bh = loom::to_host(b);
  const auto ih = loom::to_host(i);
  loom::set_fill_uninitialized(true);
  for (index_t k = 0; k < fh.size(); ++k) REQUIRE((std::isnan(fh.data()[k]) && std::isnan(feh.data()[k])));
  for (index_t k = 0; k < bh.size(); ++k) REQUIRE(std::isnan(static_cast<float>(bh.data()[k])));
  for (index_t k = 0; k < ih.size(); ++k) REQUIRE(ih.data()[k] == -1);
  // Another fill byte, for outputs whose correct value could be NaN or -1.
  CHECK(loom::fill_byte() == 0xFF);
  loom::set_fill_uninitialized(true, 0x5A);
  CHECK(loom::fill_byte() == 0x5A);
  loom::tensor<std::int64_t, 1, space_t> j({3});
  loom::set_fill_uninitialized(false);
  const auto jh = loom::to_host(j);
  loom::set_fill_uninitialized(true);
  CHECK(loom::fill_byte() == 0xFF);
  for (index_t k = 0; k < jh.size(); ++k) CHECK(jh.data()[k] == std::int64_t{0x5A5A5A5A5A5A5A5A});
}

TEST_CASE("zeros full contiguous and empty_like build tensors with the right contents", "[tensor]" LOOM_TEST_TAG) {
  auto z = loom::zeros<std::int32_t, 2, space_t>({3, 5});
  auto zh = loom::to_host(z);
  for (index_t i = 0; i < zh.size(); ++i) REQUIRE(zh.data()[i] == 0);
  auto f = loom::full<loom::bf16, 1, space_t>({33}, loom::bf16(2.5f));
  auto fh = loom::to_host(f);
  for (index_t i = 0; i < 33; ++i) REQUIRE(static_cast<float>(fh(i)) == 2.5f);
  std::mt19937_64 g(loom_test::seed_for("contiguous"));
  auto h = random_host<double, 2>({4, 6}, g);
  auto t = in_space(h);
  auto c = loom::contiguous(t.t());
  STATIC_REQUIRE(std::is_same_v<decltype(c), loom::tensor<double, 2, space_t>>);
  auto ch = loom::to_host(c);
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 4; ++j) REQUIRE(ch(i, j) == h(j, i));
  auto e = loom::empty_like(t.slice(1));
  CHECK(e.extents() == loom::shape<1>{6});
  loom::tensor<float, 0, space_t> scalar(loom::shape<0>{});
  CHECK(scalar.size() == 1);
  loom::fill(scalar, 4.0f);
  CHECK(loom::to_host(scalar)() == 4.0f);
}

namespace {
// Users pass weights as const references: every view function of a const
// tensor gives a view of const elements over the same memory.
template <class T>
void check_const_views(const loom::tensor<T, 3, space_t>& x, const loom::host_tensor<T, 3>& h) {
  auto p = x.permute({2, 0, 1});
  auto tr = x.transpose(0, 2);
  auto r = x.reshape(loom::shape<2>{-1, x.extent(2)});
  auto b = x.slice(0).broadcast_to(loom::shape<3>{2, x.extent(1), x.extent(2)});
  auto u = x.unsqueeze(1);
  auto s = u.squeeze(1);
  auto m = x.slice(1).t();
  STATIC_REQUIRE(std::is_same_v<decltype(p), loom::view<const T, 3, space_t>>);
  STATIC_REQUIRE(std::is_same_v<decltype(tr), loom::view<const T, 3, space_t>>);
  STATIC_REQUIRE(std::is_same_v<decltype(r), loom::view<const T, 2, space_t>>);
  STATIC_REQUIRE(std::is_same_v<decltype(b), loom::view<const T, 3, space_t>>);
  STATIC_REQUIRE(std::is_same_v<decltype(u), loom::view<const T, 4, space_t>>);
  STATIC_REQUIRE(std::is_same_v<decltype(s), loom::view<const T, 3, space_t>>);
  STATIC_REQUIRE(std::is_same_v<decltype(m), loom::view<const T, 2, space_t>>);
  const index_t n0 = x.extent(0), n1 = x.extent(1), n2 = x.extent(2);
  const auto ph = loom::to_host(loom::contiguous(p));
  const auto th = loom::to_host(loom::contiguous(tr));
  const auto rh = loom::to_host(loom::contiguous(r));
  const auto bh = loom::to_host(loom::contiguous(b));
  const auto sh = loom::to_host(loom::contiguous(s));
  const auto mh = loom::to_host(loom::contiguous(m));
  for (index_t i = 0; i < n0; ++i)
    for (index_t j = 0; j < n1; ++j)
      for (index_t k = 0; k < n2; ++k) {
        REQUIRE(ph(k, i, j) == h(i, j, k));
        REQUIRE(th(k, j, i) == h(i, j, k));
        REQUIRE(rh(i * n1 + j, k) == h(i, j, k));
        REQUIRE(sh(i, j, k) == h(i, j, k));
      }
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < n1; ++j)
      for (index_t k = 0; k < n2; ++k) REQUIRE(bh(i, j, k) == h(0, j, k));
  for (index_t k = 0; k < n2; ++k)
    for (index_t j = 0; j < n1; ++j) REQUIRE(mh(k, j) == h(1, j, k));
}

// A layer body that takes its weight by const reference and reads it
// transposed.
template <class T>
void scaled_by_transpose(loom::tensor<T, 2, space_t>& y, const loom::tensor<T, 2, space_t>& x,
                         const loom::tensor<T, 2, space_t>& w) {
  y = x * w.t() + T(1);
}
}  // namespace

TEST_CASE("a const tensor gives views of const elements through every view function", "[tensor]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("const views"));
  const auto h = random_host<float, 3>({3, 5, 7}, g);
  const auto x = in_space(h);
  check_const_views(x, h);
  const auto xh = random_host<float, 2>({5, 7}, g);
  const auto wh = random_host<float, 2>({7, 5}, g);
  loom::tensor<float, 2, space_t> y({5, 7});
  poison(y);
  scaled_by_transpose(y, in_space(xh), in_space(wh));
  const auto yh = loom::to_host(y);
  // Float arithmetic (the device may contract it into one fma): within two
  // roundings of the double result.
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 7; ++j) {
      const double want = static_cast<double>(xh(i, j)) * wh(j, i) + 1.0;
      REQUIRE(std::fabs(yh(i, j) - want) <= 2.5e-7 * (std::fabs(want) + std::fabs(xh(i, j) * wh(j, i))));
    }
}
