// SPDX-License-Identifier: Apache-2.0
// View semantics (pointer + layout), checked on host memory against independent
// index arithmetic.
#include <numeric>
#include <vector>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::whole;
using loom::index_t;
using loom::none;
using loom::range;

namespace {
// A host tensor whose element at row-major position i holds the value i.
template <std::size_t R>
loom::host_tensor<double, R> iota(const loom::shape<R>& s) {
  loom::host_tensor<double, R> t(s);
  std::iota(t.data(), t.data() + t.size(), 0.0);
  return t;
}

// Python's range(start, stop, step) over already-normalized bounds, by iteration.
std::vector<index_t> python_range(index_t start, index_t stop, index_t step) {
  std::vector<index_t> out;
  if (step > 0)
    for (index_t i = start; i < stop; i += step) out.push_back(i);
  else
    for (index_t i = start; i > stop; i += step) out.push_back(i);
  return out;
}
}  // namespace

TEST_CASE("view slice picks the elements Python's slicing picks", "[tensor][view]") {
  const index_t n = 11;
  auto t = iota(loom::shape<1>{n});
  struct tc {
    index_t start, stop, step;
    index_t ref_start, ref_stop;  // normalized as Python does
  };
  const tc cases[] = {
      {none, none, 1, 0, n},      {2, 9, 3, 2, 9},         {-3, none, 1, n - 3, n},   {none, none, -1, n - 1, -1},
      {8, 2, -2, 8, 2},           {-1, -n, -3, n - 1, 0},  {5, 5, 1, 5, 5},           {7, 3, 1, 7, 3},
      {0, n, 4, 0, n},            {n, none, 1, n, n},      {none, 0, -1, n - 1, 0},   {3, none, -1, 3, -1},
  };
  for (const auto& c : cases) {
    INFO("range(" << c.start << ", " << c.stop << ", " << c.step << ")");
    const auto v = t.slice(range(c.start, c.stop, c.step));
    const auto want = python_range(c.ref_start, c.ref_stop, c.step);
    REQUIRE(v.extent(0) == static_cast<index_t>(want.size()));
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(v(static_cast<index_t>(i)) == static_cast<double>(want[i]));
  }
}

TEST_CASE("view slice with integers drops axes and keeps the rest", "[tensor][view]") {
  auto t = iota(loom::shape<3>{4, 5, 6});
  auto a = t.slice(2);  // rank 2: t[2]
  STATIC_REQUIRE(decltype(a)::rank == 2);
  CHECK(a.extents() == loom::shape<2>{5, 6});
  CHECK(a(3, 4) == 2 * 30 + 3 * 6 + 4);
  auto b = t.slice(whole, -1, range(1, none, 2));  // t[:, -1, 1::2]
  STATIC_REQUIRE(decltype(b)::rank == 2);
  CHECK(b.extents() == loom::shape<2>{4, 3});
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) CHECK(b(i, j) == i * 30 + 4 * 6 + (1 + 2 * j));
  auto c = t.slice(1, 2, 3);
  STATIC_REQUIRE(decltype(c)::rank == 0);
  CHECK(c() == 30 + 12 + 3);
  CHECK_FALSE(b.is_contiguous());
  CHECK(a.is_contiguous());
}

TEST_CASE("view slice rejects out-of-range bounds and zero steps with the values in the message", "[tensor][view]") {
  auto t = iota(loom::shape<2>{3, 4});
  REQUIRE_THROWS_AS(t.slice(3), loom::index_error);
  REQUIRE_THROWS_WITH(t.slice(-4), Contains("index -4") && Contains("axis 0 of extent 3"));
  REQUIRE_THROWS_WITH(t.slice(whole, range(0, 5)), Contains("stop 5") && Contains("axis 1 of extent 4"));
  REQUIRE_THROWS_WITH(t.slice(range(-4, none)), Contains("start -4"));
  REQUIRE_THROWS_WITH(t.slice(range(3, none, -1)), Contains("start 3"));
  REQUIRE_THROWS_AS(t.slice(range(0, 2, 0)), loom::value_error);
  // Empty results are allowed.
  CHECK(t.slice(range(2, 1)).extent(0) == 0);
  CHECK(t.slice(range(2, 1)).empty());
}

TEST_CASE("view permute and transpose move extents and strides together", "[tensor][view]") {
  auto t = iota(loom::shape<3>{2, 3, 4});
  auto p = t.permute({2, 0, 1});
  CHECK(p.extents() == loom::shape<3>{4, 2, 3});
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 2; ++j)
      for (index_t k = 0; k < 3; ++k) CHECK(p(i, j, k) == j * 12 + k * 4 + i);
  auto tr = t.transpose(0, -1);
  CHECK(tr.extents() == loom::shape<3>{4, 3, 2});
  CHECK(tr(3, 1, 1) == t(1, 1, 3));
  REQUIRE_THROWS_WITH(t.permute({0, 0, 1}), Contains("twice"));
  REQUIRE_THROWS_WITH(t.permute({0, 1, 3}), Contains("axis 3 is out of range for rank 3"));
  auto m = iota(loom::shape<2>{3, 5});
  auto mt = m.t();
  CHECK(mt.extents() == loom::shape<2>{5, 3});
  CHECK(mt(4, 2) == 2 * 5 + 4);
  CHECK_FALSE(mt.is_contiguous());
}

TEST_CASE("view reshape works on contiguous data and refuses strided data", "[tensor][view]") {
  auto t = iota(loom::shape<3>{2, 3, 4});
  auto r = t.reshape(loom::shape<2>{6, -1});
  CHECK(r.extents() == loom::shape<2>{6, 4});
  CHECK(r(5, 3) == 23);
  auto flat = t.slice(1).reshape(loom::shape<1>{12});
  CHECK(flat(0) == 12);
  REQUIRE_THROWS_WITH(t.reshape(loom::shape<2>{5, 5}), Contains("[2, 3, 4]") && Contains("[5, 5]"));
  REQUIRE_THROWS_WITH(t.reshape(loom::shape<2>{-1, -1}), Contains("more than one -1"));
  REQUIRE_THROWS_WITH(t.reshape(loom::shape<2>{5, -1}), Contains("cannot reshape"));
  REQUIRE_THROWS_WITH(t.transpose(0, 2).reshape(loom::shape<1>{24}),
                      Contains("non-contiguous") && Contains("loom::contiguous"));
  // Reshaping a strided view leaves it usable: nothing was changed.
  auto s = t.slice(whole, range(0, 3, 2));
  REQUIRE_THROWS_AS(s.reshape(loom::shape<1>{16}), loom::shape_error);
  CHECK(s(1, 1, 2) == 12 + 8 + 2);
}

TEST_CASE("view broadcast_to repeats with stride 0 and names both shapes on failure", "[tensor][view]") {
  auto b = iota(loom::shape<2>{1, 4});
  auto v = b.broadcast_to(loom::shape<3>{2, 3, 4});
  CHECK(v.strides() == loom::shape<3>{0, 0, 1});
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 4; ++k) CHECK(v(i, j, k) == k);
  CHECK_FALSE(v.is_contiguous());
  REQUIRE_THROWS_WITH(b.broadcast_to(loom::shape<2>{3, 5}), Contains("[1, 4]") && Contains("[3, 5]"));
}

TEST_CASE("view squeeze and unsqueeze add and remove unit axes", "[tensor][view]") {
  auto t = iota(loom::shape<3>{2, 1, 3});
  auto s = t.squeeze(1);
  CHECK(s.extents() == loom::shape<2>{2, 3});
  CHECK(s(1, 2) == 5);
  REQUIRE_THROWS_WITH(t.squeeze(0), Contains("extent 2, not 1"));
  REQUIRE_THROWS_AS(t.squeeze(3), loom::index_error);
  auto u = s.unsqueeze(-1);
  CHECK(u.extents() == loom::shape<3>{2, 3, 1});
  CHECK(u(1, 2, 0) == 5);
  auto u0 = s.unsqueeze(0);
  CHECK(u0.extents() == loom::shape<3>{1, 2, 3});
  CHECK(u0.is_contiguous());
}

TEST_CASE("view at checks bounds and offset_of walks row-major order", "[tensor][view]") {
  auto t = iota(loom::shape<2>{3, 4});
  REQUIRE_THROWS_WITH(t.view().at(1, 4), Contains("index 4") && Contains("axis 1 of extent 4"));
  auto rev = t.slice(range(none, none, -1), range(none, none, -2));
  CHECK(rev.extents() == loom::shape<2>{3, 2});
  const double want[] = {11, 9, 7, 5, 3, 1};
  for (index_t i = 0; i < rev.size(); ++i) CHECK(rev.data()[rev.offset_of(i)] == want[i]);
}

TEST_CASE("may_overlap detects shared memory between views", "[tensor][view]") {
  auto t = iota(loom::shape<1>{10});
  CHECK(loom::may_overlap(t.slice(range(0, 5)), t.slice(range(4, 9))));
  CHECK_FALSE(loom::may_overlap(t.slice(range(0, 5)), t.slice(range(5, 10))));
  CHECK(loom::may_overlap(t.slice(range(none, none, -1)), t.slice(range(9, 10))));
  CHECK_FALSE(loom::may_overlap(t.slice(range(3, 3)), t.view()));
}

TEST_CASE("views are trivially copyable and convert to const", "[tensor][view]") {
  STATIC_REQUIRE(std::is_trivially_copyable_v<loom::view<float, 3, loom::device>>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<loom::view<const loom::bf16, 8, loom::host>>);
  STATIC_REQUIRE(std::is_convertible_v<loom::host_view<float, 2>, loom::host_view<const float, 2>>);
  STATIC_REQUIRE(!std::is_convertible_v<loom::host_view<const float, 2>, loom::host_view<float, 2>>);
  STATIC_REQUIRE(!std::is_convertible_v<loom::host_view<float, 2>, loom::device_view<float, 2>>);
}
