// SPDX-License-Identifier: Apache-2.0
// Creating and indexing tensors, checked on both executors against plain
// loops written here from NumPy's and PyTorch's definitions: arange,
// linspace, eye, index_select, gather, embedding, concat, stack and the
// embedding's backward. The including file defines LOOM_TEST_SPACE and
// LOOM_TEST_TAG.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom_test.hpp"

using loom::index_t;
using loom::none;
using loom::range;
using loom::whole;
using space_t = LOOM_TEST_SPACE;

namespace {
// Matches an exception whose message contains every one of the strings.
struct what_contains : Catch::MatcherBase<std::exception> {
  std::vector<std::string> parts;
  what_contains(std::initializer_list<std::string> p) : parts(p) {}
  bool match(const std::exception& e) const override {
    for (const auto& p : parts)
      if (std::string(e.what()).find(p) == std::string::npos) return false;
    return true;
  }
  std::string describe() const override {
    std::string d = "message contains";
    for (const auto& p : parts) d += " \"" + p + "\"";
    return d;
  }
};

constexpr bool on_device = std::is_same_v<space_t, loom::device>;

template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space(const loom::host_tensor<T, R>& h) {
  if constexpr (on_device)
    return loom::to_device(h);
  else
    return h;
}

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::random_value<T>(g);
  return h;
}

template <class T, std::size_t R>
loom::host_tensor<T, R> random_ids(const loom::shape<R>& s, index_t rows, std::mt19937_64& g) {
  loom::host_tensor<T, R> h(s);
  std::uniform_int_distribution<index_t> d(0, rows - 1);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = static_cast<T>(d(g));
  return h;
}

template <class T, std::size_t R>
loom::tensor<T, R, space_t> poisoned(const loom::shape<R>& s) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::poison_value<T>();
  return in_space(h);
}

// Checks every element of y (row-major index i) against want(i): bit for
// bit when rel is 0, else within rel of the value.
template <class V, class Want>
void check_all(const V& y, Want want, double rel = 0) {
  const auto h = loom::to_host(y);
  using T = typename decltype(h)::value_type;
  index_t bad = 0;
  for (index_t i = 0; i < h.size(); ++i) {
    const double got = loom_test::as_double(h.data()[h.view().offset_of(i)]);
    const double w = want(i);
    const bool ok = rel == 0 ? loom_test::same_bits(h.data()[h.view().offset_of(i)], static_cast<T>(w))
                             : std::abs(got - w) <= rel * std::abs(w) + 1e-30 || (std::isnan(got) && std::isnan(w));
    if (!ok && bad++ < 5) {
      INFO("element " << i << " of " << loom::shape_string(h.extents()) << ": got " << got << ", want " << w);
      CHECK(false);
    }
  }
  CHECK(bad == 0);
}

// Coordinates of row-major element i of shape s.
template <std::size_t R>
std::array<index_t, R> coords(index_t i, const loom::shape<R>& s) {
  std::array<index_t, R> c{};
  for (std::size_t d = R; d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}
}  // namespace

// ---------------------------------------------------------------------------
// Creation leaves

TEST_CASE("arange, linspace and eye give NumPy's and PyTorch's values on every path", "[indexing]" LOOM_TEST_TAG) {
  // Contiguous output: the linear path.
  auto a = poisoned<float, 1>({37});
  a = loom::arange<float>(37);
  CHECK(loom::last_eval().path == loom::eval_path::contiguous);
  check_all(a, [](index_t i) { return static_cast<float>(i); });
  auto b = poisoned<double, 1>({10});
  b = loom::arange<double>(1.5, -2.5, -0.4);  // ceil(-4 / -0.4) = 10 values
  check_all(b, [](index_t i) { return 1.5 + -0.4 * static_cast<double>(i); });
  auto ints = poisoned<std::int64_t, 1>({4});
  ints = loom::arange<std::int64_t>(-3, 9, 3);
  check_all(ints, [](index_t i) { return static_cast<double>(-3 + 3 * i); });
  CHECK(loom::arange<float>(0.0, 1.0, 0.3).extents()[0] == 4);
  CHECK(loom::arange<float>(2.0, 2.0).extents()[0] == 0);
  // linspace: torch.linspace's two halves, both ends exact.
  auto l = poisoned<float, 1>({7});
  l = loom::linspace<float>(-1.0, 2.0, 7);
  check_all(l, [](index_t i) {
    const double step = 3.0 / 6.0;
    return static_cast<double>(static_cast<float>(i < 3 ? -1.0 + step * i : 2.0 - step * (6 - i)));
  });
  // The middle element of an odd count takes the second formula: for
  // (0.1, 0.7, 7) the two give 0.4 and 0.39999999999999997 in double.
  auto mid = poisoned<double, 1>({7});
  mid = loom::linspace<double>(0.1, 0.7, 7);
  CHECK(loom_test::same_bits(loom::to_host(mid).data()[3], 0.7 - (0.6 / 6.0) * 3.0));
  CHECK(!loom_test::same_bits(loom::to_host(mid).data()[3], 0.1 + (0.6 / 6.0) * 3.0));
  auto one = poisoned<float, 1>({1});
  one = loom::linspace<float>(5.0, 9.0, 1);
  check_all(one, [](index_t) { return 5.0; });
  // eye with a diagonal offset, through a transposed output: the general path.
  for (index_t k : {index_t{0}, index_t{2}, index_t{-1}}) {
    auto e = poisoned<float, 2>({9, 5});
    e.t() = loom::eye<float>(5, 9, k);
    CHECK(loom::last_eval().path == loom::eval_path::general);
    check_all(e, [&](index_t i) { return (i / 5) - (i % 5) == k ? 1.0 : 0.0; });  // e[j, r] = eye[r, j]
  }
  // Broadcast into a larger output, and as operands of a row kernel.
  std::mt19937_64 g(loom_test::seed_for("creation rows"));
  const auto xh = random_host<float, 2>({6, 33}, g);
  const auto x = in_space(xh);
  auto y = poisoned<float, 2>({6, 33});
  y = x * loom::arange<float>(33) - loom::row_max(x + loom::eye<float>(6, 33, 3));
  CHECK(loom::last_eval().path == loom::eval_path::rows);
  check_all(
      y,
      [&](index_t i) {
        const index_t r = i / 33, c = i % 33;
        double m = -1e300;
        for (index_t j = 0; j < 33; ++j) m = std::max(m, double(xh(r, j)) + (j - r == 3 ? 1.0 : 0.0));
        return double(xh(r, c)) * double(c) - m;
      },
      1e-6);
  // One kernel for a whole expression of creation leaves and a tensor.
  const auto before = loom::launches();
  y = loom::sin(loom::arange<float>(33) * 0.25f) + x;
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
  check_all(y, [&](index_t i) { return double(std::sin(float(i % 33) * 0.25f) + xh(i / 33, i % 33)); }, 1e-6);
}

TEST_CASE("creation helpers return tensors and bad arguments throw", "[indexing]" LOOM_TEST_TAG) {
  const auto a = loom::arange<std::int32_t, space_t>(5);
  check_all(a, [](index_t i) { return static_cast<double>(i); });
  const auto l = loom::linspace<double, space_t>(0.0, 1.0, 5);
  check_all(l, [](index_t i) { return i < 2 ? 0.25 * i : 1.0 - 0.25 * (4 - i); });
  const auto e = loom::eye<loom::bf16, space_t>(3);
  check_all(e, [](index_t i) { return i % 4 == 0 ? 1.0 : 0.0; });
  const auto o = loom::ones<float, 2, space_t>({2, 3});
  check_all(o, [](index_t) { return 1.0; });
  CHECK_THROWS_MATCHES(loom::arange<float>(0.0, 1.0, 0.0), loom::value_error, what_contains({"non-zero step"}));
  CHECK_THROWS_MATCHES(loom::arange<float>(0.0, 1.0, -1.0), loom::value_error, what_contains({"away from stop"}));
  CHECK_THROWS_AS(loom::arange<float>(-1), loom::value_error);
  CHECK_THROWS_AS(loom::linspace<float>(0.0, 1.0, -2), loom::value_error);
  CHECK_THROWS_AS(loom::eye<float>(-1, 2), loom::value_error);
}

// ---------------------------------------------------------------------------
// index_select, gather, embedding

TEMPLATE_TEST_CASE("index_select picks entries along any axis of strided sources through int32 and int64 indices",
                   "[indexing]" LOOM_TEST_TAG, std::int32_t, std::int64_t) {
  using I = TestType;
  std::mt19937_64 g(loom_test::seed_for("index_select"));
  const auto xh = random_host<float, 3>({7, 5, 33}, g);
  const auto x = in_space(xh);
  // The index read with stride 2 (every other element of a longer tensor).
  auto long_ids = random_ids<I, 1>({9}, 5, g);
  const auto ids = in_space(long_ids);
  const auto picks = ids.slice(range(0, none, 2));  // 5 indices, repeated ones likely
  for (int axis : {1, -1, 0}) {
    const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
    const index_t bound = xh.extent(a);
    auto idx_h = random_ids<I, 1>({4}, bound, g);
    const auto idx = in_space(idx_h);
    loom::shape<3> s = xh.extents();
    s[a] = 4;
    auto y = poisoned<float, 3>(s);
    y = loom::index_select(x * 2.0f, axis, idx);
    check_all(y, [&](index_t i) {
      auto c = coords(i, s);
      c[a] = idx_h(c[a]);
      return 2.0 * double(xh(c[0], c[1], c[2]));
    });
  }
  // A permuted source, a strided index, the rows path.
  const auto xp = x.permute({1, 0, 2});  // [5, 7, 33]
  auto z = poisoned<float, 3>({5, 7, 33});
  z = loom::index_select(xp, 0, picks) - loom::row_max(loom::index_select(xp, 0, picks));
  CHECK(loom::last_eval().path == loom::eval_path::rows);
  check_all(z, [&](index_t i) {
    const auto c = coords(i, loom::shape<3>{5, 7, 33});
    const index_t r = long_ids(2 * c[0]);
    double m = -1e300;
    for (index_t j = 0; j < 33; ++j) m = std::max(m, double(xh(c[1], r, j)));
    return double(xh(c[1], r, c[2])) - m;
  });
  // An empty index: an empty result.
  const auto none_h = loom::host_tensor<I, 1>(loom::shape<1>{0});
  auto e = poisoned<float, 3>({7, 0, 33});
  e = loom::index_select(x, 1, in_space(none_h));
  CHECK(e.size() == 0);
}

TEST_CASE("gather reads along an axis at the index's positions, with an index smaller than the source",
          "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("gather"));
  const auto xh = random_host<double, 2>({9, 13}, g);
  const auto x = in_space(xh);
  const auto i0 = random_ids<std::int64_t, 2>({4, 11}, 9, g);
  auto y = poisoned<double, 2>({4, 11});
  y = loom::gather(x, 0, in_space(i0));
  check_all(y, [&](index_t i) { return xh(i0(i / 11, i % 11), i % 11); });
  // Axis -1 through a transposed index: y[r, c] = x[r, index[r, c]].
  const auto i1 = random_ids<std::int32_t, 2>({6, 8}, 13, g);  // read transposed as [8, 6]
  const auto i1d = in_space(i1);
  auto z = poisoned<double, 2>({8, 6});
  z = loom::gather(x, -1, i1d.t()) + 1.0;
  check_all(z, [&](index_t i) { return xh(i / 6, i1(i % 6, i / 6)) + 1.0; });
  // Two identical row reductions over a selection are computed once (same_as).
  const auto sel_h = random_ids<std::int64_t, 1>({5}, 9, g);
  const auto sel = in_space(sel_h);
  const auto e = loom::index_select(x, 0, sel);
  auto sm = poisoned<double, 2>({5, 13});
  sm = loom::exp(e - loom::row_max(e)) / loom::row_sum(loom::exp(e - loom::row_max(e)));
  CHECK(loom::last_eval().row_passes == 2);
  check_all(
      sm,
      [&](index_t i) {
        const index_t r = sel_h(i / 13);
        double m = -1e300, s = 0;
        for (index_t j = 0; j < 13; ++j) m = std::max(m, xh(r, j));
        for (index_t j = 0; j < 13; ++j) s += std::exp(xh(r, j) - m);
        return std::exp(xh(r, i % 13) - m) / s;
      },
      1e-13);
  CHECK_THROWS_MATCHES(loom::gather(x, 0, in_space(random_ids<std::int64_t, 2>({2, 14}, 9, g))), loom::shape_error,
                       what_contains({"[2, 14]", "[9, 13]", "axis 0"}));
}

TEMPLATE_TEST_CASE("embedding looks up table rows for ids of any rank, fused with what follows",
                   "[indexing]" LOOM_TEST_TAG, (std::pair<std::int32_t, float>),
                   (std::pair<std::int64_t, loom::bf16>)) {
  using I = typename TestType::first_type;
  using T = typename TestType::second_type;
  std::mt19937_64 g(loom_test::seed_for("embedding"));
  const index_t rows = 37, dim = 40;  // dim: a multiple of every vector width, so whole vectors are read
  const auto th = random_host<T, 2>({rows, dim}, g);
  const auto table = in_space(th);
  const auto posh = random_host<float, 2>({5, dim}, g);
  const auto pos = in_space(posh);
  const auto ids_h = random_ids<I, 2>({5, 3}, rows, g);  // read transposed: [3, 5] tokens
  const auto ids = in_space(ids_h);
  auto y = poisoned<float, 3>({3, 5, dim});
  const auto before = loom::launches();
  y = loom::embedding(ids.t(), table) * 0.5f + pos;
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
  check_all(y, [&](index_t i) {
    const auto c = coords(i, loom::shape<3>{3, 5, dim});
    return double(float(th(ids_h(c[1], c[0]), c[2])) * 0.5f + posh(c[1], c[2]));
  });
  // A table that starts one column in (no aligned vector loads) and odd columns.
  const auto narrow = table.slice(whole, range(1, none));
  auto w = poisoned<T, 2>({5, dim - 1});
  w = loom::embedding(ids.slice(whole, 0), narrow);
  check_all(w, [&](index_t i) { return loom_test::as_double(th(ids_h(i / (dim - 1), 0), 1 + i % (dim - 1))); });
  // Rank-0 ids: one row.
  const auto one = ids.slice(2, 1);
  auto r = poisoned<T, 1>({dim});
  r = loom::embedding(one, table);
  check_all(r, [&](index_t i) { return loom_test::as_double(th(ids_h(2, 1), i)); });
  // Empty ids.
  auto e = poisoned<T, 2>({0, dim});
  e = loom::embedding(ids.slice(range(0, 0), 0), table);
  CHECK(e.size() == 0);
}

// Rows of 64 elements or more are read as whole runs by the host's
// contiguous loop (one copy per row when nothing follows); pieces of the
// loop end in the middle of rows (16384 elements each).
TEST_CASE("embedding and index_select read long rows whole, across pieces, fused or alone, in any element type",
          "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("long rows"));
  const index_t rows = 53, dim = 1001, tokens = 37;  // 37037 elements: three pieces, cut inside rows
  const auto th = random_host<float, 2>({rows, dim}, g);
  const auto table = in_space(th);
  const auto th16 = random_host<loom::bf16, 2>({rows, dim}, g);
  const auto table16 = in_space(th16);
  const auto bias_h = random_host<float, 1>({dim}, g);
  const auto bias = in_space(bias_h);
  const auto rh = random_host<float, 2>({tokens, dim}, g);
  const auto r = in_space(rh);
  const auto ids_h = random_ids<std::int64_t, 1>({tokens}, rows, g);
  const auto ids = in_space(ids_h);
  // A copy, in float and in bf16 (the bits of the table).
  auto y = poisoned<float, 2>({tokens, dim});
  y = loom::embedding(ids, table);
  check_all(y, [&](index_t i) { return double(th(ids_h(i / dim), i % dim)); });
  auto y16 = poisoned<loom::bf16, 2>({tokens, dim});
  y16 = loom::embedding(ids, table16);
  check_all(y16, [&](index_t i) { return loom_test::as_double(th16(ids_h(i / dim), i % dim)); });
  // Converted, and fused with a bias along the row and a dense operand.
  auto yc = poisoned<float, 2>({tokens, dim});
  yc = loom::embedding(ids, table16);
  check_all(yc, [&](index_t i) { return loom_test::as_double(th16(ids_h(i / dim), i % dim)); });
  auto f = poisoned<float, 2>({tokens, dim});
  const auto before = loom::launches();
  f = loom::embedding(ids, table) * 0.5f + bias + loom::embedding(ids, table16) - r;
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
  check_all(f, [&](index_t i) {
    const index_t t = i / dim, c = i % dim;
    return double(th(ids_h(t), c) * 0.5f + bias_h(c) + float(th16(ids_h(t), c)) - rh(t, c));
  });
  // Rows of exactly 64 and of 63 (the run-by-run form), a table one column in.
  for (const index_t width : {index_t{64}, index_t{63}}) {
    auto w = poisoned<float, 2>({tokens, width});
    w = loom::embedding(ids, table.slice(whole, range(1, 1 + width))) + 1.0f;
    check_all(w, [&](index_t i) { return double(th(ids_h(i / width), 1 + i % width) + 1.0f); });
  }
  // Unchecked: an out-of-range id reads the clamped row.
  auto ids_bad_h = ids_h;
  ids_bad_h(3) = rows + 7;
  ids_bad_h(20) = -2;
  auto u = poisoned<float, 2>({tokens, dim});
  u = loom::embedding(in_space(ids_bad_h), table, loom::index_mode::unchecked);
  loom::check_index_errors();
  check_all(u, [&](index_t i) {
    const index_t id = ids_bad_h(i / dim) < 0 ? 0 : ids_bad_h(i / dim) >= rows ? rows - 1 : ids_bad_h(i / dim);
    return double(th(id, i % dim));
  });
  // index_select along the middle axis of a rank-3 source: runs along its last axis.
  const auto sh = random_host<float, 3>({3, 11, 90}, g);
  const auto src = in_space(sh);
  const auto pick_h = random_ids<std::int32_t, 1>({130}, 11, g);
  auto sel = poisoned<float, 3>({3, 130, 90});
  sel = loom::index_select(src, 1, in_space(pick_h)) - 2.0f;
  check_all(sel, [&](index_t i) {
    const auto c = coords(i, loom::shape<3>{3, 130, 90});
    return double(sh(c[0], pick_h(c[1]), c[2]) - 2.0f);
  });
}

TEST_CASE("out-of-range indices throw index_error naming the index and the bound, or are clamped unchecked",
          "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("out of range"));
  const auto th = random_host<float, 2>({5, 8}, g);
  const auto table = in_space(th);
  const auto bad = in_space(loom::host_tensor<std::int64_t, 1>({3}, {1, 5, 2}));
  const auto negative = in_space(loom::host_tensor<std::int32_t, 1>({2}, {0, -1}));
  auto y = poisoned<float, 2>({3, 8});
  if constexpr (!on_device) {
    CHECK_THROWS_MATCHES(y = loom::embedding(bad, table), loom::index_error,
                         what_contains({"embedding: index 5 is out of range for axis 0 of extent 5", "[1]"}));
    // Nothing was written.
    check_all(y, [](index_t) { return std::nan(""); }, 1);
    CHECK_THROWS_MATCHES(y.slice(range(0, 2)) = loom::index_select(table, 0, negative), loom::index_error,
                         what_contains({"index_select: index -1", "extent 5"}));
    const auto picks =
        in_space(loom::host_tensor<std::int32_t, 2>({2, 8}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0}));
    CHECK_THROWS_MATCHES(y.slice(range(0, 2)) = loom::gather(table.slice(range(0, 2)), 1, picks),
                         loom::index_error, what_contains({"gather: index 8 is out of range for axis 1 of extent 8"}));
  } else {
    // The device reads a clamped row and reports at the next synchronization.
    y = loom::embedding(bad, table);
    CHECK_THROWS_MATCHES(loom::synchronize(), loom::index_error,
                         what_contains({"embedding: index 5 is out of range for axis 0 of extent 5"}));
    loom::synchronize();  // reported once
    check_all(y, [&](index_t i) { return double(th(i / 8 == 1 ? 4 : i / 8 == 0 ? 1 : 2, i % 8)); });
  }
  // Unchecked: the index is clamped into range, nothing is reported.
  y = loom::embedding(bad, table, loom::index_mode::unchecked);
  loom::check_index_errors();
  check_all(y, [&](index_t i) { return double(th(i / 8 == 1 ? 4 : i / 8 == 0 ? 1 : 2, i % 8)); });
  auto z = poisoned<float, 2>({2, 8});
  z = loom::index_select(table, 0, negative, loom::index_mode::unchecked);
  check_all(z, [&](index_t i) { return double(th(0, i % 8)); });
  // An empty source has nothing to clamp into: an error in either mode.
  auto e = poisoned<float, 2>({3, 8});
  CHECK_THROWS_MATCHES(e = loom::embedding(bad, table.slice(range(0, 0)), loom::index_mode::unchecked),
                       loom::index_error, what_contains({"every index is out of range for axis 0 of extent 0"}));
  // The output may not overlap the source.
  auto t2 = in_space(th);
  CHECK_THROWS_AS(t2.slice(range(0, 3)) = loom::embedding(bad, t2, loom::index_mode::unchecked), loom::aliasing_error);
}

// ---------------------------------------------------------------------------
// concat and stack

TEST_CASE("concat and stack join expressions along any axis in one kernel", "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("concat"));
  const auto ah = random_host<float, 3>({3, 5, 7}, g);
  const auto bh = random_host<std::int32_t, 3>({3, 2, 7}, g);
  const auto ch = random_host<float, 3>({3, 5, 7}, g);
  const auto a = in_space(ah);
  const auto b = in_space(bh);
  const auto c = in_space(ch);
  auto y = poisoned<float, 3>({3, 12, 7});
  const auto before = loom::launches();
  y = loom::concat(a * 2.0f, b, a, 1);
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
  check_all(y, [&](index_t i) {
    const auto k = coords(i, loom::shape<3>{3, 12, 7});
    if (k[1] < 5) return 2.0 * ah(k[0], k[1], k[2]);
    if (k[1] < 7) return double(bh(k[0], k[1] - 5, k[2]));
    return double(ah(k[0], k[1] - 7, k[2]));
  });
  // The last axis, as a row kernel's operand, through a permuted operand.
  auto r = poisoned<float, 3>({3, 5, 14});
  r = loom::concat(a, c.permute({0, 1, 2}), -1) / loom::row_sum(loom::concat(a, c, -1));
  check_all(
      r,
      [&](index_t i) {
        const auto k = coords(i, loom::shape<3>{3, 5, 14});
        double s = 0;
        for (index_t j = 0; j < 7; ++j) s += double(ah(k[0], k[1], j)) + double(ch(k[0], k[1], j));
        return (k[2] < 7 ? double(ah(k[0], k[1], k[2])) : double(ch(k[0], k[1], k[2] - 7))) / s;
      },
      1e-5);
  // The default axis 0.
  auto v = poisoned<float, 3>({6, 5, 7});
  v = loom::concat(a, c);
  check_all(v, [&](index_t i) {
    const auto k = coords(i, loom::shape<3>{6, 5, 7});
    return double(k[0] < 3 ? ah(k[0], k[1], k[2]) : ch(k[0] - 3, k[1], k[2]));
  });
  // stack along a new middle axis, and at the end.
  auto s = poisoned<float, 4>({3, 2, 5, 7});
  s = loom::stack(a, c, 1);
  check_all(s, [&](index_t i) {
    const auto k = coords(i, loom::shape<4>{3, 2, 5, 7});
    return double(k[1] == 0 ? ah(k[0], k[2], k[3]) : ch(k[0], k[2], k[3]));
  });
  auto s2 = poisoned<float, 4>({3, 5, 7, 3});
  s2 = loom::stack(a, c, a - c, -1);
  check_all(s2, [&](index_t i) {
    const auto k = coords(i, loom::shape<4>{3, 5, 7, 3});
    const double x = ah(k[0], k[1], k[2]), z = ch(k[0], k[1], k[2]);
    return k[3] == 0 ? x : k[3] == 1 ? z : double(float(x) - float(z));
  });
  CHECK_THROWS_MATCHES(loom::concat(a, b, 2), loom::shape_error,
                       what_contains({"[3, 5, 7]", "[3, 2, 7]", "axis 2"}));
  CHECK_THROWS_MATCHES(loom::stack(a, b, 0), loom::shape_error, what_contains({"[3, 5, 7]", "[3, 2, 7]"}));
  CHECK_THROWS_AS(loom::concat(a, c, 3), loom::index_error);
  auto a2 = in_space(ah);
  CHECK_THROWS_AS(a2.slice(range(0, 2)) = loom::concat(a2.slice(range(0, 1)), a2.slice(range(2, 3)), 0),
                  loom::aliasing_error);
}

// ---------------------------------------------------------------------------
// The embedding's backward

TEMPLATE_TEST_CASE("embedding_backward sums repeated ids in position order, deterministically, padding excluded",
                   "[indexing]" LOOM_TEST_TAG, (std::pair<std::int64_t, float>),
                   (std::pair<std::int32_t, loom::bf16>)) {
  using I = typename TestType::first_type;
  using T = typename TestType::second_type;
  std::mt19937_64 g(loom_test::seed_for("embedding backward"));
  const index_t rows = 23, dim = 37;
  const auto ids_h = random_ids<I, 2>({9, 13}, rows / 3, g);  // few distinct ids: many repeats
  const auto gh = random_host<T, 3>({13, 9, dim}, g);         // read permuted as [9, 13, dim]
  const auto ids = in_space(ids_h);
  const auto grad = in_space(gh);
  for (index_t padding : {loom::no_padding, index_t{2}, index_t{-rows + 4}}) {
    const index_t pad = padding == loom::no_padding ? -1 : padding < 0 ? padding + rows : padding;
    auto out = poisoned<T, 2>({rows, dim});
    loom::embedding_backward(out, grad.permute({1, 0, 2}), ids, padding);
    // Reference: the float sum in position order (bits), and a double sum (value).
    std::vector<double> exact(static_cast<std::size_t>(rows * dim), 0.0);
    std::vector<float> ordered(static_cast<std::size_t>(rows * dim), 0.0f);
    for (index_t p = 0; p < 9 * 13; ++p) {
      const index_t v = ids_h(p / 13, p % 13);
      if (v == pad) continue;
      for (index_t c = 0; c < dim; ++c) {
        const float x = static_cast<float>(gh(p % 13, p / 13, c));
        ordered[static_cast<std::size_t>(v * dim + c)] += x;
        exact[static_cast<std::size_t>(v * dim + c)] += x;
      }
    }
    check_all(out, [&](index_t i) { return double(static_cast<T>(ordered[static_cast<std::size_t>(i)])); });
    check_all(out, [&](index_t i) { return exact[static_cast<std::size_t>(i)]; }, 2e-2);
    // The same bits again.
    const auto again = loom::embedding_backward(grad.permute({1, 0, 2}), ids, rows, padding);
    const auto h1 = loom::to_host(out), h2 = loom::to_host(again);
    CHECK(std::memcmp(h1.data(), h2.data(), h1.nbytes()) == 0);
  }
  // Empty ids: all zeros.
  const auto none_ids = in_space(loom::host_tensor<I, 1>(loom::shape<1>{0}));
  const auto none_grad = in_space(loom::host_tensor<T, 2>(loom::shape<2>{0, dim}));
  check_all(loom::embedding_backward(none_grad, none_ids, rows), [](index_t) { return 0.0; });
  CHECK_THROWS_MATCHES(loom::embedding_backward(grad, ids, rows), loom::shape_error, what_contains({"[13, 9, 37]"}));
  CHECK_THROWS_MATCHES(loom::embedding_backward(grad.permute({1, 0, 2}), ids, rows, rows), loom::index_error,
                       what_contains({"padding_idx 23"}));
}

TEST_CASE("embedding_backward reports out-of-range ids, or skips them unchecked", "[indexing]" LOOM_TEST_TAG) {
  const auto ids = in_space(loom::host_tensor<std::int32_t, 1>({3}, {1, 7, 1}));
  const auto grad = in_space(loom::host_tensor<float, 2>({3, 2}, {1, 2, 3, 4, 5, 6}));
  auto out = poisoned<float, 2>({4, 2});
  if constexpr (!on_device) {
    CHECK_THROWS_MATCHES(loom::embedding_backward(out, grad, ids), loom::index_error,
                         what_contains({"embedding_backward: index 7 is out of range for axis 0 of extent 4"}));
  } else {
    loom::embedding_backward(out, grad, ids);
    CHECK_THROWS_MATCHES(loom::synchronize(), loom::index_error, what_contains({"index 7"}));
  }
  loom::embedding_backward(out, grad, ids, loom::no_padding, loom::index_mode::unchecked);
  check_all(out, [](index_t i) { return i == 2 ? 6.0 : i == 3 ? 8.0 : 0.0; });
}

// ---------------------------------------------------------------------------
// Gradients through embedding and index_select (loom::grad's scatter rule)

namespace {
// Checks each element of y (row-major i) against want[i] within tol times
// scale[i], the magnitude of the terms behind it (so a sum that cancels is
// held to its terms' rounding, not to its own small value), plus rel times
// |want[i]| (the output type's rounding).
template <class V>
void check_scaled(const V& y, const std::vector<double>& want, const std::vector<double>& scale, double tol,
                  double rel = 0) {
  const auto h = loom::to_host(y);
  index_t bad = 0;
  for (index_t i = 0; i < h.size(); ++i) {
    const double got = loom_test::as_double(h.data()[h.view().offset_of(i)]);
    const auto k = static_cast<std::size_t>(i);
    if (!(std::abs(got - want[k]) <= tol * scale[k] + rel * std::abs(want[k]) + 1e-30) && bad++ < 5) {
      INFO("element " << i << " of " << loom::shape_string(h.extents()) << ": got " << got << ", want " << want[k]);
      CHECK(false);
    }
  }
  CHECK(bad == 0);
}

// The values of y in row-major order, as bytes (to compare runs bit for bit).
template <class V>
std::vector<unsigned char> bytes_of(const V& y) {
  const auto h = loom::contiguous(loom::to_host(y));
  std::vector<unsigned char> b(static_cast<std::size_t>(h.nbytes()));
  std::memcpy(b.data(), h.data(), b.size());
  return b;
}

// The central finite difference of loss at x[k], in double.
template <class Loss>
double central_difference(std::vector<double>& x, std::size_t k, Loss loss) {
  const double x0 = x[k], h = 1e-5 * std::max(1.0, std::abs(x0));
  x[k] = x0 + h;
  const double up = loss(x);
  x[k] = x0 - h;
  const double down = loss(x);
  x[k] = x0;
  return (up - down) / (2 * h);
}
}  // namespace

TEMPLATE_TEST_CASE("loom::grad of an embedding scatters its adjoint into the table, repeats summed, padding row zero",
                   "[indexing]" LOOM_TEST_TAG, (std::pair<std::int32_t, float>), (std::pair<std::int64_t, loom::bf16>)) {
  using I = typename TestType::first_type;
  using T = typename TestType::second_type;
  std::mt19937_64 g(loom_test::seed_for("grad of embedding"));
  const index_t rows = 13, dim = 37, B = 3, S = 7;
  auto ids_h = random_ids<I, 2>({S, B}, rows / 2, g);  // read permuted as [B, S]; few distinct ids
  ids_h(0, 0) = 2;                                     // the padding rows below occur
  ids_h(1, 0) = 1;
  const auto tab_h = random_host<T, 2>({rows, dim + 1}, g);  // the table: columns 1.., a strided view
  const auto pos_h = random_host<float, 3>({B, S, dim}, g);
  const auto dy_h = random_host<float, 3>({B, S, dim}, g);
  const auto ids = in_space(ids_h);
  const auto tab = in_space(tab_h);
  const auto pos = in_space(pos_h);
  const auto dy = in_space(dy_h);
  const auto idv = ids.permute({1, 0});
  const auto table = tab.slice(whole, range(1, none));
  // The table as doubles (the rounded inputs), and the loss sum(dy * y) in double.
  std::vector<double> t(static_cast<std::size_t>(rows * dim));
  for (index_t v = 0; v < rows; ++v)
    for (index_t c = 0; c < dim; ++c) t[static_cast<std::size_t>(v * dim + c)] = loom_test::as_double(tab_h(v, c + 1));
  const auto loss = [&](const std::vector<double>& tt) {
    double l = 0;
    for (index_t b = 0; b < B; ++b)
      for (index_t s = 0; s < S; ++s)
        for (index_t c = 0; c < dim; ++c)
          l += double(dy_h(b, s, c)) * std::tanh(tt[static_cast<std::size_t>(index_t(ids_h(s, b)) * dim + c)]) *
               double(pos_h(b, s, c));
    return l;
  };
  CHECK_THROWS_MATCHES(loom::embedding(idv, table, rows), loom::index_error, what_contains({"padding_idx 13"}));
  const auto layer_for = [](index_t padding) {  // one layer type for every padding index
    return loom::layer([padding](auto i, auto w, auto p) { return tanh(loom::embedding(i, w, padding)) * p; });
  };
  {  // An embedding of shape [1, S, dim] broadcast to the output [B, S, dim]: its source is not differentiated.
    const auto l = layer_for(loom::no_padding);
    auto dt = poisoned<T, 2>({dim, rows});
    auto dp = poisoned<float, 3>({B, S, dim});
    const auto grads = loom::grad<1, 2>(l)(idv.slice(range(0, 1)), table, pos, dy);
    CHECK_THROWS_MATCHES(grads.into(dt.t(), dp),
                         loom::shape_error, what_contains({"embedding of shape [1, 7, 37] is broadcast to [3, 7, 37]"}));
  }
  for (index_t padding : {loom::no_padding, index_t{2}, index_t{1 - rows}}) {
    const index_t pad = padding == loom::no_padding ? -1 : padding < 0 ? padding + rows : padding;
    const auto l = layer_for(padding);
    std::vector<unsigned char> first_dt, first_dp;
    for (int run = 0; run < 2; ++run) {
      auto dt_store = poisoned<T, 2>({dim, rows});  // dtable is its transpose: a strided output
      auto dp = poisoned<float, 3>({B, S, dim});
      const auto dt = dt_store.t();
      const loom::grad_info info = loom::grad<1, 2>(l)(idv, table, pos, dy).into(dt, dp);
      // dtable: the adjoint's materialization, the ids' copy (permuted), the
      // scatter (on the device: the positions' fill, the sort, the kernel); dpos: 1.
      CHECK(info.kernels == (on_device ? 6 : 4));
      CHECK(loom::last_grad().kernels == info.kernels);
      CHECK(loom::grad<1>(l)(idv, table, pos, dy).kind() == loom::gradient_kind::scatter);
      if (run == 0) {
        first_dt = bytes_of(dt);
        first_dp = bytes_of(dp);
        // The reference: a plain loop scatter in double.
        std::vector<double> want_t(t.size(), 0.0), scale_t(t.size(), 0.0);
        std::vector<double> want_p(static_cast<std::size_t>(B * S * dim)), scale_p(want_p.size());
        for (index_t b = 0; b < B; ++b)
          for (index_t s = 0; s < S; ++s) {
            const index_t v = ids_h(s, b);
            for (index_t c = 0; c < dim; ++c) {
              const double x = t[static_cast<std::size_t>(v * dim + c)], th = std::tanh(x);
              const double d = dy_h(b, s, c), p = pos_h(b, s, c);
              const auto k = static_cast<std::size_t>((b * S + s) * dim + c);
              want_p[k] = d * th;
              scale_p[k] = std::abs(want_p[k]);
              if (v == pad) continue;
              want_t[static_cast<std::size_t>(v * dim + c)] += d * p * (1 - th * th);
              scale_t[static_cast<std::size_t>(v * dim + c)] += std::abs(d * p);  // 1 - tanh^2 is rounded in float
            }
          }
        const double rel = std::is_same_v<T, float> ? 0 : 1.0 / 256;  // bf16: its rounding of the sum
        check_scaled(dt, want_t, scale_t, 1e-6, rel);
        check_scaled(dp, want_p, scale_p, 1e-5);
        // Central differences of the loss at entries of every row but the padding row (zero).
        const auto hdt = loom::to_host(dt);
        for (index_t v = 0; v < rows; ++v)
          for (index_t c : {index_t{0}, index_t{17}, dim - 1}) {
            const double want = v == pad ? 0.0 : central_difference(t, static_cast<std::size_t>(v * dim + c), loss);
            INFO("row " << v << ", column " << c);
            CHECK(std::abs(loom_test::as_double(hdt(v, c)) - want) <=
                  1e-6 * scale_t[static_cast<std::size_t>(v * dim + c)] + rel * std::abs(want) + 1e-6);
          }
      } else {
        CHECK(bytes_of(dt) == first_dt);
        CHECK(bytes_of(dp) == first_dp);
      }
    }
  }
}

TEST_CASE("loom::grad of an index_select scatters its adjoint along any axis into contiguous or permuted sources",
          "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("grad of index_select"));
  const loom::shape<3> xs{5, 6, 7};
  const auto x_h = random_host<float, 3>(xs, g);
  const auto x = in_space(x_h);
  std::vector<double> xd(static_cast<std::size_t>(x_h.size()));
  for (index_t i = 0; i < x_h.size(); ++i) xd[static_cast<std::size_t>(i)] = x_h.data()[i];
  for (int axis : {1, -1, 0}) {
    const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + 3 : axis);
    const index_t n = 9;
    const auto idx_h = random_ids<std::int32_t, 1>({2 * n}, xs[a] - 1, g);  // read every other: strided
    const auto idx = in_space(idx_h);
    const auto iv = idx.slice(range(0, none, 2));
    loom::shape<3> ys = xs;
    ys[a] = n;
    const auto w_h = random_host<float, 3>(ys, g);
    const auto dy_h = random_host<float, 3>(ys, g);
    const auto w = in_space(w_h);
    const auto dy = in_space(dy_h);
    const auto l = loom::layer([axis](auto s, auto i, auto m) { return loom::index_select(s, axis, i) * m; });
    // The reference: dx[.., idx[j], ..] += dy * w at [.., j, ..], in double.
    std::vector<double> want(xd.size(), 0.0), scale(xd.size(), 0.0);
    const auto loss = [&](const std::vector<double>& xx) {
      double sum = 0;
      for (index_t e = 0; e < loom::shape_size(ys); ++e) {
        auto c = coords(e, ys);
        c[a] = idx_h(2 * c[a]);
        sum += double(dy_h.data()[e]) * double(w_h.data()[e]) *
               xx[static_cast<std::size_t>((c[0] * xs[1] + c[1]) * xs[2] + c[2])];
      }
      return sum;
    };
    for (index_t e = 0; e < loom::shape_size(ys); ++e) {
      auto c = coords(e, ys);
      c[a] = idx_h(2 * c[a]);
      const auto k = static_cast<std::size_t>((c[0] * xs[1] + c[1]) * xs[2] + c[2]);
      want[k] += double(dy_h.data()[e]) * double(w_h.data()[e]);
      scale[k] += std::abs(double(dy_h.data()[e]) * double(w_h.data()[e]));
    }
    for (bool permuted : {false, true}) {
      INFO("axis " << axis << (permuted ? ", a permuted output" : ""));
      std::vector<unsigned char> first;
      for (int run = 0; run < 2; ++run) {
        auto dx_store = poisoned<float, 3>(permuted ? loom::shape<3>{xs[2], xs[0], xs[1]} : xs);
        const auto dx = permuted ? dx_store.permute({1, 2, 0}) : dx_store.view();
        auto dw = poisoned<float, 3>(ys);
        const loom::grad_info info = loom::grad<0, 2>(l)(x, iv, w, dy).into(dx, dw);
        // The materialization, the scatter (on the device: the strided
        // index's copy, the fill, the sort, the kernel), a copy into a
        // permuted output whose other axes do not merge; dw: 1.
        const bool merges = permuted ? a == 2 : a != 1;
        CHECK(info.kernels == (on_device ? 6 : 3) + (merges ? 0 : 1));
        if (run == 0) {
          first = bytes_of(dx);
          check_scaled(dx, want, scale, 1e-6);
          check_all(dw, [&](index_t e) {
            auto c = coords(e, ys);
            c[a] = idx_h(2 * c[a]);
            return double(dy_h.data()[e]) * xd[static_cast<std::size_t>((c[0] * xs[1] + c[1]) * xs[2] + c[2])];
          }, 1e-6);
          const auto hdx = loom::to_host(dx);
          for (std::size_t k = 0; k < xd.size(); k += 11) {
            const auto c = coords(static_cast<index_t>(k), xs);
            CHECK(std::abs(double(hdx(c[0], c[1], c[2])) - central_difference(xd, k, loss)) <= 1e-6 * scale[k] + 1e-6);
          }
        } else {
          CHECK(bytes_of(dx) == first);
        }
      }
    }
  }
}

namespace {
// The storage of a view whose axes are reversed.
template <std::size_t R>
loom::shape<R> reversed(const loom::shape<R>& s) {
  loom::shape<R> r{};
  for (std::size_t d = 0; d != R; ++d) r[d] = s[R - 1 - d];
  return r;
}
template <std::size_t R>
std::array<int, R> reverse_axes() {
  std::array<int, R> p{};
  for (std::size_t d = 0; d != R; ++d) p[d] = static_cast<int>(R - 1 - d);
  return p;
}

// loom::grad of gather(x, axis, idx) * m for a source of shape xs and an
// index of shape ys (ids drawn from [0, xs[axis]), so repeated), each of x,
// idx and dx read through reversed axes where asked: dx against a plain
// scatter loop in double and central differences, dm against its product,
// the kernel count, the same bytes on a second run, and an out-of-range
// (negative) index rejected on the host.
template <class T, class I, std::size_t R>
void check_gather_grad(const loom::shape<R>& xs, const loom::shape<R>& ys, int axis, bool permuted_source,
                       bool permuted_index, bool permuted_output, std::mt19937_64& g) {
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + static_cast<int>(R) : axis);
  const auto rev = reverse_axes<R>();
  const auto x_h = random_host<T, R>(permuted_source ? reversed(xs) : xs, g);
  const auto i_h = random_ids<I, R>(permuted_index ? reversed(ys) : ys, xs[a], g);
  const auto m_h = random_host<float, R>(ys, g);
  const auto dy_h = random_host<float, R>(ys, g);
  const auto xc = loom::contiguous(permuted_source ? x_h.permute(rev) : x_h.view());  // row-major, on the host
  const auto ic = loom::contiguous(permuted_index ? i_h.permute(rev) : i_h.view());
  std::vector<double> xd(static_cast<std::size_t>(xc.size()));
  for (std::size_t k = 0; k < xd.size(); ++k) xd[k] = loom_test::as_double(xc.data()[k]);
  // The row-major source element that output element e reads.
  const auto source_of = [&](index_t e) {
    auto c = coords(e, ys);
    c[a] = static_cast<index_t>(ic.data()[e]);
    index_t k = 0;
    for (std::size_t d = 0; d != R; ++d) k = k * xs[d] + c[d];
    return static_cast<std::size_t>(k);
  };
  // The reference: dx[source_of(e)] += dy[e] * m[e], in double; loss = sum(dy * y).
  std::vector<double> want(xd.size(), 0.0), scale(xd.size(), 0.0);
  for (index_t e = 0; e < m_h.size(); ++e) {
    const double d = double(dy_h.data()[e]) * double(m_h.data()[e]);
    want[source_of(e)] += d;
    scale[source_of(e)] += std::abs(d);
  }
  const auto loss = [&](const std::vector<double>& xx) {
    double sum = 0;
    for (index_t e = 0; e < m_h.size(); ++e)
      sum += double(dy_h.data()[e]) * double(m_h.data()[e]) * xx[source_of(e)];
    return sum;
  };
  const auto x_s = in_space(x_h);
  const auto i_s = in_space(i_h);
  const auto m = in_space(m_h);
  const auto dy = in_space(dy_h);
  const auto x = permuted_source ? x_s.permute(rev) : x_s.view();
  const auto idx = permuted_index ? i_s.permute(rev) : i_s.view();
  const auto l = loom::layer([axis](auto s, auto i, auto w) { return loom::gather(s, axis, i) * w; });
  CHECK(loom::grad<0>(l)(x, idx, m, dy).kind() == loom::gradient_kind::scatter);
  // Rank 1 (index_select's rule): the materialization, the scatter (on the
  // device: the fill, the sort, the kernel). Rank >= 2: the ids, the
  // materialization, the scatter, a copy into a non-contiguous output. dm: 1.
  const int kernels = R == 1 ? (on_device ? 5 : 3) : (on_device ? 6 : 4) + (permuted_output ? 1 : 0);
  const double rel = std::is_same_v<T, float> ? 0 : 1.0 / 256;  // bf16: its rounding of the sum
  std::vector<unsigned char> first_dx, first_dm;
  for (int run = 0; run < 2; ++run) {
    auto dx_store = poisoned<T, R>(permuted_output ? reversed(xs) : xs);
    const auto dx = permuted_output ? dx_store.permute(rev) : dx_store.view();
    auto dm = poisoned<float, R>(ys);
    const loom::grad_info info = loom::grad<0, 2>(l)(x, idx, m, dy).into(dx, dm);
    CHECK(info.kernels == kernels);
    CHECK(loom::last_grad().kernels == kernels);
    if (run == 1) {
      CHECK(bytes_of(dx) == first_dx);
      CHECK(bytes_of(dm) == first_dm);
      continue;
    }
    first_dx = bytes_of(dx);
    first_dm = bytes_of(dm);
    check_scaled(dx, want, scale, 1e-6, rel);
    check_all(dm, [&](index_t e) { return double(dy_h.data()[e]) * xd[source_of(e)]; }, 1e-6);
    const auto hdx = loom::contiguous(loom::to_host(dx));
    for (std::size_t k = 0; k < xd.size(); k += 5) {
      INFO("source element " << k);
      CHECK(std::abs(loom_test::as_double(hdx.data()[k]) - central_difference(xd, k, loss)) <=
            1e-6 * scale[k] + rel * std::abs(want[k]) + 1e-6);
    }
  }
  if constexpr (!on_device) {  // indices lie in [0, extent): a negative one is out of range, as in the forward
    auto bad_h = loom::contiguous(ic.view());
    bad_h.data()[bad_h.size() / 2] = -1;
    const auto bad = in_space(bad_h);
    auto dx = poisoned<T, R>(xs);
    auto dm = poisoned<float, R>(ys);
    const auto grads = loom::grad<0, 2>(l)(x, bad.view(), m, dy);
    CHECK_THROWS_AS(grads.into(dx, dm), loom::index_error);
  }
}
}  // namespace

TEST_CASE("loom::grad of a rank-2 gather along either axis sums its adjoint into the source elements read",
          "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("grad of gather rank 2"));
  SECTION("axis 0, a permuted source") {
    check_gather_grad<float, std::int32_t, 2>({5, 7}, {9, 6}, 0, true, false, false, g);
  }
  SECTION("axis -1, a permuted index") {
    check_gather_grad<float, std::int32_t, 2>({5, 7}, {4, 11}, -1, false, true, false, g);
  }
}

TEST_CASE("loom::grad of a rank-3 bf16 gather along a middle axis sums its adjoint into a permuted output",
          "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("grad of gather rank 3"));
  check_gather_grad<loom::bf16, std::int64_t, 3>({3, 5, 7}, {3, 9, 6}, 1, false, true, true, g);
}

TEST_CASE("loom::grad of a rank-1 gather sums its adjoint into the source elements read", "[indexing]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("grad of gather rank 1"));
  check_gather_grad<float, std::int64_t, 1>({11}, {17}, 0, false, false, false, g);
}
