// SPDX-License-Identifier: Apache-2.0
// Scans, sort and top-k checked on both executors against plain double
// loops. The including file defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <loom/reduce/scan.hpp>
#include <loom/reduce/sort.hpp>

#include "loom_test.hpp"

using loom::index_t;
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

// Multiples of 1/8 in [-4, 4] (integers in [-32, 32] for integer types): every
// partial sum of a million of them is exact in float, in any order, so scan
// results can be compared exactly whatever order of combination ran.
template <class T, std::size_t R>
loom::host_tensor<T, R> eighths(const loom::shape<R>& s, std::mt19937_64& g, int spread = 32) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) {
    const int k = static_cast<int>(g() % static_cast<unsigned>(2 * spread + 1)) - spread;
    if constexpr (std::is_same_v<T, bool>)
      h.data()[i] = k > 0;
    else if constexpr (std::is_integral_v<T>)
      h.data()[i] = static_cast<T>(k);
    else
      h.data()[i] = T(static_cast<float>(k) / 8);
  }
  return h;
}

template <class X>
std::vector<double> flat(const X& t) {
  const auto h = loom::to_host(t);
  std::vector<double> v;
  for (index_t i = 0; i < h.size(); ++i) v.push_back(loom_test::as_double(h.data()[i]));
  return v;
}

// Row-major positions of the elements of row r of a scan along `axis` of shape s.
template <std::size_t R>
std::vector<index_t> row_positions(const loom::shape<R>& s, std::size_t axis, index_t r) {
  const auto st = loom::contiguous_strides(s);
  index_t base = 0, rest = r;
  for (std::size_t d = R; d-- > 0;) {
    if (d == axis) continue;
    base += (rest % s[d]) * st[d];
    rest /= s[d];
  }
  std::vector<index_t> pos;
  for (index_t k = 0; k < s[axis]; ++k) pos.push_back(base + k * st[axis]);
  return pos;
}

enum class scan_op { sum, prod, max, min };

// The double reference of one scan over values `in` (row-major, shape s).
// An exclusive cummax/cummin writes `none` (the type's lowest or highest
// value) with index -1 before the first element.
template <std::size_t R>
void reference_scan(scan_op op, bool exclusive, const std::vector<double>& in, const loom::shape<R>& s,
                    std::size_t axis, std::vector<double>& val, std::vector<double>& idx, double none = 0) {
  val.assign(in.size(), 0);
  idx.assign(in.size(), 0);
  const index_t rows = s[axis] ? static_cast<index_t>(in.size()) / s[axis] : 0;
  for (index_t r = 0; r < rows; ++r) {
    const auto pos = row_positions(s, axis, r);
    double acc = op == scan_op::prod ? 1 : 0, best = 0;
    index_t at = 0;
    for (std::size_t k = 0; k < pos.size(); ++k) {
      const double x = in[static_cast<std::size_t>(pos[k])];
      const auto p = static_cast<std::size_t>(pos[k]);
      if (op == scan_op::sum || op == scan_op::prod) {
        if (exclusive) val[p] = acc;
        acc = op == scan_op::sum ? acc + x : acc * x;
        if (!exclusive) val[p] = acc;
        continue;
      }
      if (exclusive) {
        val[p] = k == 0 ? none : best;
        idx[p] = k == 0 ? -1.0 : static_cast<double>(at);
      }
      const bool take = k == 0 || std::isnan(x) ||
                        (!std::isnan(best) && (op == scan_op::max ? x >= best : x <= best));
      if (take) best = x, at = static_cast<index_t>(k);
      if (!exclusive) {
        val[p] = best;
        idx[p] = static_cast<double>(at);
      }
    }
  }
}

// What an exclusive cummax (max) or cummin writes first: the lowest or the
// highest value of T (infinities for floating types).
template <class T>
double scan_none(scan_op op) {
  if constexpr (loom::is_floating_v<T>)
    return op == scan_op::max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  else
    return op == scan_op::max ? static_cast<double>(std::numeric_limits<T>::lowest())
                              : static_cast<double>(std::numeric_limits<T>::max());
}

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// A NaN with its sign bit set, made from bits: converting -NaN from float
// to half or bf16 gives the positive NaN 0x7fff.
template <class T>
T negative_nan() {
  if constexpr (std::is_same_v<T, loom::half>)
    return loom::detail::from_bits<T>(0xfe00);
  else if constexpr (std::is_same_v<T, loom::bf16>)
    return loom::detail::from_bits<T>(0xffc0);
  else
    return -std::numeric_limits<T>::quiet_NaN();
}

// The reference order of sort: the stable order of `key`, ascending or
// descending, with NaN (of either sign) the largest value.
std::vector<index_t> stable_order(const std::vector<double>& key, bool desc) {
  std::vector<index_t> o(key.size());
  std::iota(o.begin(), o.end(), index_t{0});
  std::stable_sort(o.begin(), o.end(), [&](index_t a, index_t b) {
    const double ka = key[static_cast<std::size_t>(a)], kb = key[static_cast<std::size_t>(b)];
    if (std::isnan(ka) || std::isnan(kb)) return desc ? std::isnan(ka) && !std::isnan(kb) : !std::isnan(ka) && std::isnan(kb);
    return desc ? ka > kb : ka < kb;
  });
  return o;
}

template <class T>
double store_rounding() {
  return std::is_same_v<T, loom::half> ? 1.0 / 1024 : (std::is_same_v<T, loom::bf16> ? 1.0 / 128 : 0);
}

void check_values(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = same_value(got[i], want[i]) || std::fabs(got[i] - want[i]) <= rel * std::fabs(want[i]);
    if (!ok) {
      INFO("element " << i << " of " << got.size() << ": got " << got[i] << ", want " << want[i]);
      CHECK(ok);
    }
  }
}
}  // namespace

TEMPLATE_TEST_CASE("cumsum, cumprod, cummax and cummin of one long row match double references",
                   "[reduce][scan]" LOOM_TEST_TAG, float, double, loom::half, std::int32_t, bool) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("scan 1d"));
  for (index_t n : {index_t{0}, index_t{1}, index_t{31}, index_t{32}, index_t{33}, index_t{1000},
                    (index_t{1} << 20) + 3}) {
    INFO(n << " elements of " << loom::dtype_name(loom::dtype_of<T>));
    const auto h = eighths<T, 1>({n}, g);
    const auto x = in_space(h);
    const std::vector<double> in = flat(h);
    std::vector<double> want, widx;
    for (bool ex : {false, true}) {
      const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
      auto c = loom::cumsum(x, 0, kind);
      STATIC_REQUIRE(std::is_same_v<typename decltype(c)::value_type, loom::sum_result_t<T>>);
      reference_scan(scan_op::sum, ex, in, h.extents(), 0, want, widx);
      check_values(flat(c), want, store_rounding<T>());
    }
    if constexpr (!std::is_same_v<T, bool>) {
      for (auto op : {scan_op::max, scan_op::min})
        for (bool ex : {false, true}) {
          INFO((op == scan_op::max ? "cummax" : "cummin") << (ex ? " exclusive" : " inclusive"));
          const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
          auto r = op == scan_op::max ? loom::cummax(x, 0, kind) : loom::cummin(x, 0, kind);
          reference_scan(op, ex, in, h.extents(), 0, want, widx, scan_none<T>(op));
          check_values(flat(r.values), want, 0);
          check_values(flat(r.indices), widx, 0);
        }
    }
  }
}

// The default poison (0xFF bytes) of an int64 index is -1, exactly what an
// exclusive cummax/cummin writes at each line's start, so an index left
// unwritten there would pass. These outputs are poisoned with 0x5A bytes.
TEST_CASE("exclusive cummax and cummin write index -1 at every line's start, over a poison that is not -1",
          "[reduce][scan]" LOOM_TEST_TAG) {
  struct fill_guard {
    bool was_on = loom::fill_uninitialized();
    unsigned char was_byte = loom::fill_byte();
    fill_guard() { loom::set_fill_uninitialized(true, 0x5A); }
    ~fill_guard() { loom::set_fill_uninitialized(was_on, was_byte); }
  } guard;
  std::mt19937_64 g(loom_test::seed_for("scan exclusive poison"));
  // One row of each length (the device: warp, block and single-row paths),
  // then 3-D shapes scanned along each axis: many short lines, rows longer
  // than a tile, a few long rows (the look-back), lines across rows, and a
  // few long lines across rows (their look-back).
  for (index_t n : {index_t{1}, index_t{33}, index_t{1000}, (index_t{1} << 20) + 3}) {
    const auto h = eighths<float, 1>({n}, g);
    const auto x = in_space(h);
    std::vector<double> want, widx;
    INFO("one row of " << n);
    for (auto op : {scan_op::max, scan_op::min}) {
      auto r = op == scan_op::max ? loom::cummax(x, 0, loom::scan_kind::exclusive)
                                  : loom::cummin(x, 0, loom::scan_kind::exclusive);
      reference_scan(op, true, flat(h), h.extents(), 0, want, widx, scan_none<float>(op));
      check_values(flat(r.values), want, 0);
      check_values(flat(r.indices), widx, 0);
    }
  }
  for (auto s : {loom::shape<3>{6, 35, 300}, loom::shape<3>{5, 1, 3000}, loom::shape<3>{1, 2, 9001},
                 loom::shape<3>{3000, 1, 8}}) {
    const auto h = eighths<float, 3>(s, g);
    const auto x = in_space(h);
    std::vector<double> want, widx;
    for (std::size_t axis = 0; axis != 3; ++axis) {
      if (s[axis] == 1) continue;
      INFO(loom::shape_string(s) << " along axis " << axis);
      const int ax = static_cast<int>(axis);
      auto mx = loom::cummax(x.view(), ax, loom::scan_kind::exclusive);
      reference_scan(scan_op::max, true, flat(h), h.extents(), axis, want, widx, scan_none<float>(scan_op::max));
      check_values(flat(mx.values), want, 0);
      check_values(flat(mx.indices), widx, 0);
      auto mn = loom::cummin(x, ax, loom::scan_kind::exclusive);
      reference_scan(scan_op::min, true, flat(h), h.extents(), axis, want, widx, scan_none<float>(scan_op::min));
      check_values(flat(mn.values), want, 0);
      check_values(flat(mn.indices), widx, 0);
    }
  }
}

TEMPLATE_TEST_CASE("scans along first, middle and last axes of 3-D views, inclusive and exclusive",
                   "[reduce][scan]" LOOM_TEST_TAG, float, double, loom::half, std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("scan 3d"));
  const auto h = eighths<T, 3>({6, 35, 300}, g);
  const auto x = in_space(h);
  // A strided view: every other row of axis 1, reversed along axis 2.
  const auto v = x.view().slice(loom::whole, loom::range(0, loom::none, 2), loom::range(loom::none, loom::none, -1));
  const auto hv = loom::contiguous(h.view().slice(loom::whole, loom::range(0, loom::none, 2),
                                                  loom::range(loom::none, loom::none, -1)));
  std::vector<double> want, widx;
  for (std::size_t axis = 0; axis != 3; ++axis) {
    const int ax = static_cast<int>(axis);
    for (bool ex : {false, true}) {
      INFO("axis " << axis << (ex ? " exclusive" : " inclusive"));
      const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
      reference_scan(scan_op::sum, ex, flat(h), h.extents(), axis, want, widx);
      check_values(flat(loom::cumsum(x, ax, kind)), want, store_rounding<T>());
      reference_scan(scan_op::sum, ex, flat(hv), hv.extents(), axis, want, widx);
      check_values(flat(loom::cumsum(v, ax, kind)), want, store_rounding<T>());
    }
    for (bool ex : {false, true}) {
      INFO("cummax / cummin along axis " << axis << (ex ? " exclusive" : " inclusive"));
      const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
      auto mx = loom::cummax(v, ax, kind);
      reference_scan(scan_op::max, ex, flat(hv), hv.extents(), axis, want, widx, scan_none<T>(scan_op::max));
      check_values(flat(mx.values), want, 0);
      check_values(flat(mx.indices), widx, 0);
      auto mn = loom::cummin(x, ax, kind);
      reference_scan(scan_op::min, ex, flat(h), h.extents(), axis, want, widx, scan_none<T>(scan_op::min));
      check_values(flat(mn.values), want, 0);
      check_values(flat(mn.indices), widx, 0);
    }
  }
  // A fused expression with a broadcast operand.
  const auto hb = eighths<T, 1>({300}, g);
  const auto b = in_space(hb);
  std::vector<double> in;
  for (index_t i = 0; i < h.size(); ++i)
    in.push_back(static_cast<double>(static_cast<loom::compute_t<T>>(h.data()[i]) * loom::compute_t<T>(2) -
                                     static_cast<loom::compute_t<T>>(hb.data()[i % 300])));
  for (std::size_t axis = 0; axis != 3; ++axis) {
    reference_scan(scan_op::sum, false, in, h.extents(), axis, want, widx);
    check_values(flat(loom::cumsum(x * T(2) - b, static_cast<int>(axis))), want, store_rounding<T>());
  }
}

TEMPLATE_TEST_CASE("scans of many rows longer than a tile (4096) match double references", "[reduce][scan]" LOOM_TEST_TAG,
                   float, double, std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("scan long rows"));
  // On the device (an H200: 132 SMs) 7 rows of 9001 are too few to fill it
  // and take the look-back along each row; 5 rows of 3000 (and their strided
  // halves of 1500) take the block-per-row kernel, which carries its prefix
  // from tile to tile: 1 tile of 4096 for float sums, 2 of 2048 for double
  // and int64 sums, 3 of 1024 for cummax (2 for the halves).
  for (const loom::shape<2> shape : {loom::shape<2>{7, 9001}, loom::shape<2>{5, 3000}}) {
    INFO("shape " << shape[0] << " x " << shape[1]);
    const auto h = eighths<T, 2>(shape, g);
    const auto x = in_space(h);
    // Every other column, reversed: rows of half the length read through strides.
    const auto v = x.view().slice(loom::whole, loom::range(loom::none, loom::none, -2));
    const auto hv = loom::contiguous(h.view().slice(loom::whole, loom::range(loom::none, loom::none, -2)));
    std::vector<double> want, widx;
    for (bool ex : {false, true}) {
      INFO((ex ? "exclusive" : "inclusive"));
      const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
      reference_scan(scan_op::sum, ex, flat(h), h.extents(), 1, want, widx);
      check_values(flat(loom::cumsum(x, 1, kind)), want, 0);
      reference_scan(scan_op::sum, ex, flat(hv), hv.extents(), 1, want, widx);
      check_values(flat(loom::cumsum(v, -1, kind)), want, 0);
      auto mx = loom::cummax(v, 1, kind);
      reference_scan(scan_op::max, ex, flat(hv), hv.extents(), 1, want, widx, scan_none<T>(scan_op::max));
      check_values(flat(mx.values), want, 0);
      check_values(flat(mx.indices), widx, 0);
      auto mn = loom::cummin(x, 1, kind);
      reference_scan(scan_op::min, ex, flat(h), h.extents(), 1, want, widx, scan_none<T>(scan_op::min));
      check_values(flat(mn.values), want, 0);
      check_values(flat(mn.indices), widx, 0);
    }
  }
}

TEMPLATE_TEST_CASE("scans across rows of a few long lines match double references, one kernel, the same twice",
                   "[reduce][scan]" LOOM_TEST_TAG, float, double, loom::half, std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("scan few long lines"));
  // Few lines, long along the scanned axis: on the device every chunk of
  // 256 positions of 32 lines is a block of the look-back across rows
  // (cumsum; cummax too, which keeps 4 windows of 32 chunks, not 8). A
  // group of 5 lines, of 35 (a whole group and 3 lines), of 6 (axis 1),
  // and 513 chunks of 3 lines (the walk keeps at most 256 chunks, 128 for
  // cummax).
  struct shape_case {
    std::vector<index_t> ext;
    int axis;
  };
  for (const shape_case& c : {shape_case{{2001, 5}, 0}, shape_case{{601, 5, 7}, 0}, shape_case{{3, 777, 2}, 1},
                              shape_case{{(index_t{1} << 17) + 3, 3}, 0}}) {
    INFO("shape " << c.ext.size() << "-D, first extent " << c.ext[0] << ", axis " << c.axis);
    auto one = [&](auto h) {
      const auto x = in_space(h);
      std::vector<double> want, widx, in;
      for (bool ex : {false, true}) {
        INFO((ex ? "exclusive" : "inclusive"));
        const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
        const auto before = loom::launches();
        const auto got = flat(loom::cumsum(x * T(2), c.axis, kind));
        const auto after = loom::launches();
        CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
        in.clear();
        for (index_t i = 0; i < h.size(); ++i) in.push_back(2 * loom_test::as_double(h.data()[i]));
        reference_scan(scan_op::sum, ex, in, h.extents(), static_cast<std::size_t>(c.axis), want, widx);
        check_values(got, want, store_rounding<T>());
        // cummax with its indices (many ties: the later index), one kernel too.
        const auto before_max = loom::launches();
        const auto mx = loom::cummax(x, c.axis, kind);
        const auto after_max = loom::launches();
        CHECK((on_device ? after_max.device - before_max.device : after_max.host - before_max.host) == 1);
        reference_scan(scan_op::max, ex, flat(h), h.extents(), static_cast<std::size_t>(c.axis), want, widx,
                       scan_none<T>(scan_op::max));
        check_values(flat(mx.values), want, 0);
        check_values(flat(mx.indices), widx, 0);
      }
    };
    if (c.ext.size() == 2)
      one(eighths<T, 2>({c.ext[0], c.ext[1]}, g));
    else
      one(eighths<T, 3>({c.ext[0], c.ext[1], c.ext[2]}, g));
  }
  // Random values (not exact in float): the same order of combination twice.
  loom::host_tensor<float, 2> r({4099, 7});
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (index_t i = 0; i < r.size(); ++i) r.data()[i] = d(g);
  const auto xr = in_space(r);
  const auto a = loom::to_host(loom::cumsum(xr, 0)), b = loom::to_host(loom::cumsum(xr, 0));
  CHECK(std::memcmp(a.data(), b.data(), static_cast<std::size_t>(r.size()) * sizeof(float)) == 0);
  std::vector<double> want, widx;
  reference_scan(scan_op::sum, false, flat(r), r.extents(), 0, want, widx);
  index_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::fabs(static_cast<double>(a.data()[i]) - want[i]) > 1e-4 * 64) ++bad;  // 4099 terms of at most 1
  CHECK(bad == 0);
}

TEST_CASE("cumsum of negative zeros is +0 everywhere, as the host's loop from the identity gives",
          "[reduce][scan]" LOOM_TEST_TAG) {
  // -0 + -0 is -0, and 0 + -0 is +0: a kernel that starts a row from its
  // first element instead of the identity leaves -0. The shapes reach every
  // device kernel: one long row and a few (the look-back), short rows (a
  // warp per task), many rows of 1100 (a block per row), across rows of few
  // long lines (the look-back across rows) and of short lines.
  struct shape_case {
    index_t rows, cols;
    int axis;
  };
  for (const shape_case& c : {shape_case{1, 5000, 1}, shape_case{2, 5000, 1}, shape_case{3, 20, 1},
                              shape_case{1100, 1100, 1}, shape_case{300, 2, 0}, shape_case{3, 2, 0}}) {
    INFO(c.rows << " x " << c.cols << " along axis " << c.axis);
    loom::host_tensor<float, 2> h({c.rows, c.cols});
    for (index_t i = 0; i < h.size(); ++i) h.data()[i] = -0.0f;
    const auto x = in_space(h);
    const auto y = loom::to_host(loom::cumsum(x, c.axis));
    index_t negative = 0, nonzero = 0;
    for (index_t i = 0; i < y.size(); ++i) {
      negative += std::signbit(y.data()[i]) ? 1 : 0;
      nonzero += y.data()[i] != 0.0f ? 1 : 0;
    }
    CHECK(negative == 0);
    CHECK(nonzero == 0);
  }
}

TEST_CASE("cumprod matches a double reference along each axis", "[reduce][scan]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("cumprod"));
  loom::host_tensor<float, 3> h({4, 33, 20});
  const float vals[] = {0.5f, 1.0f, 2.0f, -1.0f, -2.0f};  // exact products
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = vals[g() % 5];
  const auto x = in_space(h);
  std::vector<double> want, widx;
  for (std::size_t axis = 0; axis != 3; ++axis)
    for (bool ex : {false, true}) {
      reference_scan(scan_op::prod, ex, flat(h), h.extents(), axis, want, widx);
      check_values(flat(loom::cumprod(x, static_cast<int>(axis),
                                      ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive)),
                   want, 0);
    }
  loom::host_tensor<std::int32_t, 1> hi({40});
  for (index_t i = 0; i < 40; ++i) hi.data()[i] = 2;
  CHECK(loom::to_host(loom::cumprod(in_space(hi), 0))(39) == (std::int64_t{1} << 40));  // int64, no overflow
}

TEST_CASE("a long float cumsum is bitwise the same run to run and close to a double reference",
          "[reduce][scan]" LOOM_TEST_TAG) {
  // Random floats (not exact in float): the order of combination shows in the
  // low bits, so equal results mean the same order ran twice.
  std::mt19937_64 g(loom_test::seed_for("scan determinism"));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (index_t n : {index_t{4095}, index_t{4097}, (index_t{1} << 20) + 3}) {
    INFO(n << " elements");
    loom::host_tensor<float, 1> h({n});
    for (index_t i = 0; i < n; ++i) h.data()[i] = d(g);
    const auto x = in_space(h);
    for (bool ex : {false, true}) {
      const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
      const auto before = loom::launches();
      const auto a = loom::to_host(loom::cumsum(x * 2.0f, 0, kind));
      const auto after = loom::launches();
      // One pass: one kernel on either executor (the device's look-back scan
      // beyond 4096 elements, a block for the row below).
      CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
      const auto b = loom::to_host(loom::cumsum(x * 2.0f, 0, kind));
      CHECK(std::memcmp(a.data(), b.data(), static_cast<std::size_t>(n) * sizeof(float)) == 0);
      std::vector<double> want, widx, in;
      for (index_t i = 0; i < n; ++i) in.push_back(2.0 * h.data()[i]);
      reference_scan(scan_op::sum, ex, in, h.extents(), 0, want, widx);
      // The rounding bound of a float sum: u * (sum of |partial sums|) for a
      // left-to-right order, plus u * depth * sum |x| for the tree parts.
      const double u = 0x1p-24;
      double partials = 0, magnitude = 0, prefix = 0;
      index_t bad = 0;
      for (index_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        prefix += in[k];
        partials += std::fabs(prefix);
        magnitude += std::fabs(in[k]);
        if (std::fabs(static_cast<double>(a.data()[i]) - want[k]) > u * (partials + 16 * magnitude)) ++bad;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("cummax takes the later index of ties and propagates NaN", "[reduce][scan]" LOOM_TEST_TAG) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  loom::host_tensor<float, 1> h({7}, {1, 3, 3, 2, nan, 5, nan});
  auto r = loom::cummax(in_space(h), 0);
  const auto v = flat(r.values), i = flat(r.indices);
  CHECK(v[0] == 1);
  CHECK(v[2] == 3);
  CHECK(i[2] == 2);
  CHECK(i[3] == 2);
  CHECK(std::isnan(v[4]));
  CHECK(std::isnan(v[5]));
  CHECK(i[5] == 4);
  CHECK(i[6] == 6);
}

TEMPLATE_TEST_CASE("sort is stable, ascending or descending, with indices, NaN last ascending, -0 == +0",
                   "[reduce][sort]" LOOM_TEST_TAG, float, double, loom::half, loom::bf16, std::int32_t, std::int64_t,
                   bool) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("sort"));
  for (auto s : {loom::shape<2>{1, 1}, loom::shape<2>{3, 31}, loom::shape<2>{5, 33}, loom::shape<2>{2, 1000},
                 loom::shape<2>{1, 70001}, loom::shape<2>{0, 4}}) {
    auto h = eighths<T, 2>(s, g, 4);  // few distinct values: many ties
    // NaNs of both signs (both sort as the largest value), -0.0 beside the
    // +0.0 of eighths (equal: a tie that keeps input order) and, for float
    // and double, the smallest subnormals (ordered apart from zero, also on
    // a device build that flushes subnormals).
    if constexpr (loom::is_floating_v<T>) {
      if (h.size() > 3) h.data()[2] = T(std::numeric_limits<float>::quiet_NaN());
      if (h.size() > 6) h.data()[5] = negative_nan<T>();
      for (index_t i = 7; i < h.size(); i += 11) h.data()[i] = T(-0.0f);
    }
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      for (index_t i = 4; i < h.size(); i += 23) h.data()[i] = std::numeric_limits<T>::denorm_min();
      for (index_t i = 6; i < h.size(); i += 29) h.data()[i] = -std::numeric_limits<T>::denorm_min();
    }
    const auto x = in_space(h);
    for (auto order : {loom::sort_order::ascending, loom::sort_order::descending}) {
      INFO(loom::shape_string(s) << (order == loom::sort_order::ascending ? " ascending" : " descending"));
      const bool desc = order == loom::sort_order::descending;
      auto r = loom::sort(x, order);
      // Values are compared by their bits: each is a copy of the element its
      // index names (the sign of a zero and a NaN's bits included).
      const auto hv = loom::to_host(r.values);
      const auto ix = flat(r.indices);
      for (index_t row = 0; row < s[0]; ++row) {
        std::vector<double> keys;
        for (index_t j = 0; j < s[1]; ++j) keys.push_back(loom_test::as_double(h(row, j)));
        const auto want = stable_order(keys, desc);
        for (index_t j = 0; j < s[1]; ++j) {
          const auto p = static_cast<std::size_t>(row * s[1] + j);
          const index_t w = want[static_cast<std::size_t>(j)];
          if (ix[p] != static_cast<double>(w) || !loom_test::same_bits(hv(row, j), h(row, w))) {
            INFO("row " << row << " position " << j << ": got index " << ix[p] << " value "
                        << loom_test::as_double(hv(row, j)) << ", want index " << w);
            CHECK(false);
          }
        }
      }
      // topk's first k columns are the sort's, bit for bit.
      if (s[1] > 3) {
        auto t = loom::topk(x, 3, order);
        const auto tv = loom::to_host(t.values);
        const auto ti = loom::to_host(t.indices);
        const auto si = loom::to_host(r.indices);
        index_t bad = 0;
        for (index_t row = 0; row < s[0]; ++row)
          for (index_t j = 0; j < 3; ++j) bad += !loom_test::same_bits(tv(row, j), hv(row, j)) || ti(row, j) != si(row, j);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("topk gives the k largest or smallest of each row of an expression", "[reduce][sort]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("topk"));
  const auto h = eighths<float, 3>({3, 4, 50}, g, 400);
  const auto x = in_space(h);
  auto t = loom::topk(x * 2.0f, 5);
  CHECK(loom::to_host(t.values).extents() == loom::shape<3>{3, 4, 5});
  auto b = loom::topk(x, 3, loom::sort_order::ascending);
  const auto tv = flat(t.values), ti = flat(t.indices), bv = flat(b.values);
  for (index_t r = 0; r < 12; ++r) {
    std::vector<double> row;
    for (index_t j = 0; j < 50; ++j) row.push_back(static_cast<double>(h.data()[r * 50 + j]));
    std::vector<double> sorted = row;
    std::sort(sorted.begin(), sorted.end());
    for (index_t j = 0; j < 5; ++j) {
      const auto p = static_cast<std::size_t>(r * 5 + j);
      CHECK(tv[p] == 2 * sorted[sorted.size() - 1 - static_cast<std::size_t>(j)]);
      CHECK(2 * row[static_cast<std::size_t>(ti[p])] == tv[p]);
    }
    for (index_t j = 0; j < 3; ++j) CHECK(bv[static_cast<std::size_t>(r * 3 + j)] == sorted[static_cast<std::size_t>(j)]);
  }
  CHECK_THROWS_AS(loom::topk(x, 51), loom::value_error);
}

TEMPLATE_TEST_CASE("scans along every axis of 4-D strided views and broadcast expressions", "[reduce][scan]" LOOM_TEST_TAG,
                   float, std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("scan 4d"));
  const auto h = eighths<T, 4>({3, 5, 4, 37}, g);
  const auto x = in_space(h);
  // Axes permuted (a transposed, non-contiguous view) and every other
  // element of the last axis, reversed.
  auto pick = [](const auto& t) {
    return t.view().permute({2, 0, 3, 1}).slice(loom::whole, loom::whole, loom::range(loom::none, loom::none, -2));
  };
  const auto v = pick(x);
  const auto hv = loom::contiguous(pick(h));
  REQUIRE(hv.extents() == loom::shape<4>{4, 3, 19, 5});
  const auto hb = eighths<T, 2>({19, 5}, g);  // broadcast over the two leading axes
  const auto b = in_space(hb);
  std::vector<double> in;
  for (index_t i = 0; i < hv.size(); ++i)
    in.push_back(static_cast<double>(static_cast<loom::compute_t<T>>(hv.data()[i]) -
                                     static_cast<loom::compute_t<T>>(hb.data()[i % hb.size()])));
  std::vector<double> want, widx;
  for (int axis = 0; axis != 4; ++axis)
    for (bool ex : {false, true}) {
      INFO("axis " << axis << (ex ? " exclusive" : " inclusive"));
      const auto kind = ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive;
      const auto a = static_cast<std::size_t>(axis);
      reference_scan(scan_op::sum, ex, flat(h), h.extents(), a, want, widx);
      check_values(flat(loom::cumsum(x, axis, kind)), want, 0);
      reference_scan(scan_op::sum, ex, flat(hv), hv.extents(), a, want, widx);
      check_values(flat(loom::cumsum(v, axis, kind)), want, 0);
      reference_scan(scan_op::sum, ex, in, hv.extents(), a, want, widx);
      check_values(flat(loom::cumsum(v - b, axis, kind)), want, 0);
      auto mn = loom::cummin(v - b, axis, kind);
      reference_scan(scan_op::min, ex, in, hv.extents(), a, want, widx, scan_none<T>(scan_op::min));
      check_values(flat(mn.values), want, 0);
      check_values(flat(mn.indices), widx, 0);
    }
}

TEMPLATE_TEST_CASE("cumprod of one row of every test length matches a double reference", "[reduce][scan]" LOOM_TEST_TAG,
                   float, double, std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("cumprod lengths"));
  for (index_t n : {index_t{0}, index_t{1}, index_t{31}, index_t{32}, index_t{33}, index_t{1000},
                    (index_t{1} << 20) + 3}) {
    INFO(n << " elements of " << loom::dtype_name(loom::dtype_of<T>));
    // Signs and powers of two: every product is exact and stays in range
    // (at most 24 factors of 2 or 1/2 among the first elements, then +-1).
    loom::host_tensor<T, 1> h({n});
    for (index_t i = 0; i < n; ++i) {
      const int k = static_cast<int>(g() % 4);
      const bool power = i < 48 && k >= 2 && (std::is_floating_point_v<T> || k == 2);
      const double x = power ? (k == 2 ? 2.0 : 0.5) : (g() % 2 ? 1.0 : -1.0);
      h.data()[i] = static_cast<T>(x);
    }
    const auto x = in_space(h);
    std::vector<double> want, widx;
    for (bool ex : {false, true}) {
      reference_scan(scan_op::prod, ex, flat(h), h.extents(), 0, want, widx);
      check_values(flat(loom::cumprod(x, 0, ex ? loom::scan_kind::exclusive : loom::scan_kind::inclusive)), want, 0);
    }
  }
}

TEST_CASE("sort and topk read strided views and broadcast expressions, rows of 0, 32 and 2^20 + 3",
          "[reduce][sort]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("sort layouts"));
  auto check_rows = [&](const std::vector<double>& in, index_t rows, index_t len, index_t k, bool desc,
                        const std::vector<double>& v, const std::vector<double>& ix) {
    REQUIRE(v.size() == static_cast<std::size_t>(rows * k));
    REQUIRE(ix.size() == v.size());
    index_t bad = 0;
    for (index_t r = 0; r < rows; ++r) {
      const std::vector<double> key(in.begin() + r * len, in.begin() + (r + 1) * len);
      const auto o = stable_order(key, desc);
      for (index_t j = 0; j < k; ++j) {
        const auto p = static_cast<std::size_t>(r * k + j);
        const auto want = o[static_cast<std::size_t>(j)];
        bad += ix[p] != static_cast<double>(want) || v[p] != key[static_cast<std::size_t>(want)];
      }
    }
    CHECK(bad == 0);
  };
  // Rows of 32 and of 2^20 + 3, few distinct values (ties everywhere).
  for (index_t len : {index_t{32}, (index_t{1} << 20) + 3}) {
    INFO("rows of " << len);
    const auto h = eighths<float, 2>({2, len}, g, 3);
    for (bool desc : {false, true}) {
      const auto order = desc ? loom::sort_order::descending : loom::sort_order::ascending;
      auto r = loom::sort(in_space(h), order);
      check_rows(flat(h), 2, len, len, desc, flat(r.values), flat(r.indices));
    }
  }
  // Rows of length 0.
  const loom::host_tensor<float, 2> none({3, 0});
  auto r0 = loom::sort(in_space(none));
  CHECK(loom::to_host(r0.values).extents() == loom::shape<2>{3, 0});
  CHECK(loom::to_host(loom::topk(in_space(none), 0).indices).extents() == loom::shape<2>{3, 0});
  // A transposed view (rows read down columns of the stored matrix) and a
  // broadcast expression, sorted and top-k'd, ties included; k = 0 too.
  const auto h = eighths<float, 2>({45, 6}, g, 5);
  const auto hb = eighths<float, 1>({6}, g, 5);
  const auto x = in_space(h);
  const auto b = in_space(hb);
  std::vector<double> tin, ein;
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 45; ++j) tin.push_back(static_cast<double>(h(j, i)));
  for (index_t i = 0; i < 45; ++i)
    for (index_t j = 0; j < 6; ++j) ein.push_back(static_cast<double>(h(i, j) * 2.0f + hb(j)));
  for (bool desc : {false, true}) {
    INFO((desc ? "descending" : "ascending"));
    const auto order = desc ? loom::sort_order::descending : loom::sort_order::ascending;
    auto st = loom::sort(x.view().t(), order);
    check_rows(tin, 6, 45, 45, desc, flat(st.values), flat(st.indices));
    auto kt = loom::topk(x.view().t(), 7, order);
    check_rows(tin, 6, 45, 7, desc, flat(kt.values), flat(kt.indices));
    auto ke = loom::topk(x * 2.0f + b, 4, order);
    check_rows(ein, 45, 6, 4, desc, flat(ke.values), flat(ke.indices));
    auto k0 = loom::topk(x * 2.0f + b, 0, order);
    CHECK(loom::to_host(k0.values).extents() == loom::shape<2>{45, 0});
  }
  // Rows of the lengths of the reduction tests, the first k of each order.
  for (index_t len : {index_t{1}, index_t{31}, index_t{33}, index_t{1000}}) {
    const auto hr = eighths<float, 2>({3, len}, g, 6);
    const auto xr = in_space(hr);
    for (index_t k : {index_t{1}, std::min<index_t>(len, 9)})
      for (bool desc : {false, true}) {
        INFO("top " << k << " of rows of " << len << (desc ? " descending" : " ascending"));
        auto t = loom::topk(xr, k, desc ? loom::sort_order::descending : loom::sort_order::ascending);
        check_rows(flat(hr), 3, len, k, desc, flat(t.values), flat(t.indices));
      }
  }
  // k is checked before anything runs: no launch, nothing allocated.
  const auto before = loom::launches();
  CHECK_THROWS_AS(loom::topk(x, -1), loom::value_error);
  CHECK_THROWS_WITH(loom::topk(x * 2.0f + b, 7), Catch::Matchers::Contains("expected 0 <= k <= 6"));
  CHECK((on_device ? loom::launches().device - before.device : loom::launches().host - before.host) == 0);
  if constexpr (on_device) {
    // More rows than the device sort's 32-bit row numbers hold, as a
    // broadcast view of one element: refused before the keys are evaluated.
    const loom::host_tensor<float, 1> one({1}, {1.0f});
    const auto o = in_space(one);
    const auto tall = o.view().broadcast_to(loom::shape<2>{(index_t{1} << 32) + 1, 1});
    CHECK_THROWS_WITH(loom::sort(tall), Catch::Matchers::Contains("at most 2^32 rows"));
    CHECK(loom::launches().device == before.device);
  }
}

#if LOOM_CUDA_COMPILER
// A device sort must enqueue its work and return: nothing in it may wait for
// the host (CUB's segmented sort of more than a few hundred segments copies
// sizes to the host and synchronizes, which a stream capture refuses). So a
// sort and a top-k of 1031 rows are captured into a CUDA graph, launched,
// and checked against the reference's stable order.
TEST_CASE("device sort and topk of 1031 rows wait for nothing on the host: a CUDA graph captures them",
          "[reduce][sort]" LOOM_TEST_TAG) {
  if constexpr (on_device) {
    std::mt19937_64 g(loom_test::seed_for("sort capture"));
    const auto h = eighths<float, 2>({1031, 37}, g, 6);
    const auto x = loom::to_device(h);
    struct graph_parts {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ~graph_parts() {
        if (exec) (void)cudaGraphExecDestroy(exec);
        if (graph) (void)cudaGraphDestroy(graph);
      }
    };
    loom::stream s;
    graph_parts gp;
    loom::values_indices<float, 2, loom::device> sorted, top;
    {
      loom::stream_guard on(s);
      LOOM_CUDA_CHECK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeRelaxed));
      std::string failure;
      try {
        sorted = loom::sort(x, loom::sort_order::descending);
        top = loom::topk(x * 2.0f, 9);
      } catch (const loom::error& e) {
        failure = e.what();
      }
      const cudaError_t ended = cudaStreamEndCapture(s.get(), &gp.graph);
      INFO(failure);
      REQUIRE(failure.empty());
      REQUIRE(ended == cudaSuccess);
    }
    REQUIRE(cudaGraphInstantiate(&gp.exec, gp.graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(gp.exec, s.get()) == cudaSuccess);
    s.synchronize();
    const auto v = flat(sorted.values), ix = flat(sorted.indices), tv = flat(top.values), ti = flat(top.indices);
    REQUIRE(v.size() == 1031u * 37u);
    REQUIRE(tv.size() == 1031u * 9u);
    index_t bad = 0;
    for (index_t r = 0; r < 1031; ++r) {
      std::vector<double> key;
      for (index_t j = 0; j < 37; ++j) key.push_back(static_cast<double>(h(r, j)));
      const auto want = stable_order(key, true);
      for (index_t j = 0; j < 37; ++j) {
        const auto p = static_cast<std::size_t>(r * 37 + j);
        const auto w = static_cast<std::size_t>(want[static_cast<std::size_t>(j)]);
        bad += ix[p] != static_cast<double>(w) || v[p] != key[w];
        if (j < 9) {
          const auto q = static_cast<std::size_t>(r * 9 + j);
          bad += ti[q] != static_cast<double>(w) || tv[q] != 2 * key[w];
        }
      }
    }
    CHECK(bad == 0);
  }
}
#endif

#if defined(LOOM_SCAN_REPLAY)
namespace {
template <class A>
bool same_acc(const A& a, const A& b) {
  if constexpr (std::is_class_v<A>)
    return loom_test::same_bits(a.v, b.v) && a.i == b.i;
  else
    return loom_test::same_bits(a, b);
}

// cross_scan_kernel replayed on the host: every tile of 32 lines, step by
// step, every warp and lane in turn, through the kernel's own per-thread
// parts (loom::detail::reduce::line_base, cross_scan_run, cross_scan_prefix,
// cross_scan_write), into a NaN-poisoned output.
template <class Op, bool Indices, class E>
std::pair<std::vector<double>, std::vector<double>> replay_cross_scan(const E& e, std::size_t axis, bool exclusive) {
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using namespace loom::detail::scan;
  using namespace loom::detail::sort;
  using acc = typename Op::acc;
  constexpr std::size_t R = node_t<E>::rank;
  const auto n = as_node(e);
  const loom::shape<R> ext = n.extents();
  bind_info info;
  const auto b = bind_for_read(n, ext, info);
  index_t inner = 1;
  for (std::size_t d = axis + 1; d < R; ++d) inner *= ext[d];
  REQUIRE(info.contiguous);
  REQUIRE(inner > 1);
  const index_t len = ext[axis], lines = loom::shape_size(ext) / len;
  loom::host_tensor<typename Op::result, R> values(ext);
  loom::host_tensor<std::int64_t, R> indices(ext);
  using result_t = typename Op::result;
  for (index_t i = 0; i < values.size(); ++i) {
    if constexpr (loom::is_floating_v<result_t>)
      values.data()[i] = result_t(std::numeric_limits<float>::quiet_NaN());
    else
      values.data()[i] = std::numeric_limits<result_t>::min();
    indices.data()[i] = -7;
  }
  const Op op{};
  const scan_writer<Op, Indices, R> w{values.data(), Indices ? indices.data() : nullptr, op, scan_out<R>{}};
  const inclusive_sink<scan_writer<Op, Indices, R>, Op> sink{w, op, exclusive};
  const fast_divmod div(static_cast<std::uint64_t>(inner));
  bool carried_same = true;
  for (index_t tile = 0; tile * 32 < lines; ++tile) {
    std::vector<acc> carry(32, op.identity());
    for (index_t p0 = 0; p0 < len; p0 += cross_scan_step) {
      std::vector<std::array<acc, cross_scan_items>> v(cross_scan_warps * 32);
      acc totals[cross_scan_warps][32];
      for (int warp = 0; warp < cross_scan_warps; ++warp)
        for (int lane = 0; lane < 32; ++lane) {
          const index_t o = tile * 32 + lane, q0 = p0 + warp * cross_scan_items;
          acc run[cross_scan_items];
          for (auto& x : run) x = op.identity();
          if (o < lines) cross_scan_run(op, b, line_base(o, div, len), inner, len, q0, run);
          std::copy(run, run + cross_scan_items, v[warp * 32 + lane].begin());
          totals[warp][lane] = run[cross_scan_items - 1];
        }
      std::vector<acc> next(32);
      for (int warp = 0; warp < cross_scan_warps; ++warp)
        for (int lane = 0; lane < 32; ++lane) {
          const index_t o = tile * 32 + lane, q0 = p0 + warp * cross_scan_items;
          acc c = carry[lane];
          const acc prefix = cross_scan_prefix(op, [&](int k) { return totals[k][lane]; }, warp, c);
          carried_same = carried_same && (warp == 0 || same_acc(c, next[lane]));  // every warp carries the same value on
          next[lane] = c;
          acc run[cross_scan_items];
          std::copy(v[warp * 32 + lane].begin(), v[warp * 32 + lane].end(), run);
          if (o < lines) cross_scan_write(sink, op, line_base(o, div, len), inner, len, q0, prefix, run);
        }
      carry = next;
    }
  }
  CHECK(carried_same);
  return {flat(values), flat(indices)};
}
}  // namespace

TEMPLATE_TEST_CASE("scans across rows of contiguous inputs, replayed from the device kernel's parts on the host",
                   "[reduce][scan]", float, std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("scan across rows"));
  // Lines of 1, of fewer positions than a step (16 warps x 8), of more (300,
  // with a partial run and a partial step), and a tile of fewer than 32 lines.
  const auto h = eighths<T, 3>({300, 5, 7}, g);
  const auto small = eighths<T, 2>({3, 33}, g);
  std::vector<double> want, widx;
  for (bool ex : {false, true}) {
    for (std::size_t axis : {0, 1}) {
      INFO("axis " << axis << (ex ? " exclusive" : " inclusive"));
      const auto [got, gi] = replay_cross_scan<loom::detail::reduce::sum_op<T>, false>(h, axis, ex);
      reference_scan(scan_op::sum, ex, flat(h), h.extents(), axis, want, widx);
      check_values(got, want, 0);
      const auto [mv, mi] = replay_cross_scan<loom::detail::reduce::cum_extreme_op<T, true>, true>(h * T(2), axis, ex);
      std::vector<double> in;
      for (double x : flat(h)) in.push_back(2 * x);
      reference_scan(scan_op::max, ex, in, h.extents(), axis, want, widx, scan_none<T>(scan_op::max));
      check_values(mv, want, 0);
      check_values(mi, widx, 0);
    }
    const auto [got, gi] = replay_cross_scan<loom::detail::reduce::sum_op<T>, false>(small, 0, ex);
    reference_scan(scan_op::sum, ex, flat(small), small.extents(), 0, want, widx);
    check_values(got, want, 0);
  }
}

namespace {
// cross_lookback_kernel replayed on the host: tile after tile in ticket
// order (chunk by chunk), every warp and lane in turn, through the kernel's
// own per-thread parts (cross_tile_of, cross_chunk_runs, cross_scan_prefix,
// cross_chunk_value, cross_scan_write), into a NaN-poisoned output. Each
// line's prefix is the serial chain of its earlier chunks' aggregates (the
// value of lookback_fold wherever the walk stops, tested below).
template <class Op, bool Indices = false, class E>
std::pair<std::vector<double>, std::vector<double>> replay_cross_lookback(const E& e, std::size_t axis,
                                                                          bool exclusive) {
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using namespace loom::detail::scan;
  using namespace loom::detail::sort;
  using acc = typename Op::acc;
  constexpr std::size_t R = node_t<E>::rank;
  const auto n = as_node(e);
  const loom::shape<R> ext = n.extents();
  bind_info info;
  const auto b = bind_for_read(n, ext, info);
  index_t inner = 1;
  for (std::size_t d = axis + 1; d < R; ++d) inner *= ext[d];
  REQUIRE(info.contiguous);
  REQUIRE(inner > 1);
  const index_t len = ext[axis], lines = loom::shape_size(ext) / len;
  const index_t groups = (lines + 31) / 32, chunks = (len + cross_chunk - 1) / cross_chunk;
  REQUIRE(chunks > 1);
  loom::host_tensor<typename Op::result, R> values(ext);
  loom::host_tensor<std::int64_t, R> indices(ext);
  for (index_t i = 0; i < values.size(); ++i) {
    values.data()[i] = typename Op::result(std::numeric_limits<float>::quiet_NaN());
    indices.data()[i] = -7;
  }
  const Op op{};
  const scan_writer<Op, Indices, R> w{values.data(), Indices ? indices.data() : nullptr, op, scan_out<R>{}};
  const inclusive_sink<scan_writer<Op, Indices, R>, Op> sink{w, op, exclusive};
  const fast_divmod div(static_cast<std::uint64_t>(inner));
  std::vector<acc> inclusive(static_cast<std::size_t>(lines * chunks));  // per line and chunk, once published
  std::vector<bool> published(inclusive.size(), false);
  bool carried_same = true;
  for (index_t id = 0; id < groups * chunks; ++id) {
    index_t chunk, group;
    cross_tile_of(id, groups, chunk, group);
    acc v[cross_scan_warps][32][cross_chunk_steps][cross_scan_items];
    for (int warp = 0; warp < cross_scan_warps; ++warp)
      for (int lane = 0; lane < 32; ++lane) {
        const index_t o = group * 32 + lane;
        for (auto& step : v[warp][lane])
          for (auto& x : step) x = op.identity();
        if (o < lines) cross_chunk_runs(op, b, line_base(o, div, len), inner, len, chunk, warp, v[warp][lane]);
      }
    acc within[cross_scan_warps][32][cross_chunk_steps];
    std::vector<acc> carry(32 * cross_scan_warps, op.identity());
    for (int s = 0; s < cross_chunk_steps; ++s) {
      acc totals[cross_scan_warps][32];
      for (int warp = 0; warp < cross_scan_warps; ++warp)
        for (int lane = 0; lane < 32; ++lane) totals[warp][lane] = v[warp][lane][s][cross_scan_items - 1];
      for (int warp = 0; warp < cross_scan_warps; ++warp)
        for (int lane = 0; lane < 32; ++lane)
          within[warp][lane][s] = cross_scan_prefix(op, [&](int k) { return totals[k][lane]; }, warp,
                                                    carry[static_cast<std::size_t>(warp * 32 + lane)]);
    }
    for (int lane = 0; lane < 32; ++lane) {
      const index_t o = group * 32 + lane;
      for (int warp = 1; warp < cross_scan_warps; ++warp)  // every warp ends with the line's chunk aggregate
        carried_same = carried_same && same_acc(carry[static_cast<std::size_t>(warp * 32 + lane)],
                                                carry[static_cast<std::size_t>(lane)]);
      if (o >= lines) continue;
      const auto at = static_cast<std::size_t>(o * chunks + chunk);
      REQUIRE((chunk == 0 || published[at - 1]));  // tickets number chunk by chunk: the earlier chunk has run
      const acc prefix = chunk > 0 ? inclusive[at - 1] : op.identity();
      inclusive[at] = cross_chunk_value(op, chunk, prefix, carry[static_cast<std::size_t>(lane)]);
      published[at] = true;
      for (int warp = 0; warp < cross_scan_warps; ++warp)
        for (int s = 0; s < cross_chunk_steps; ++s)
          cross_scan_write(sink, op, line_base(o, div, len), inner, len, cross_chunk_q0(chunk, s, warp),
                           cross_chunk_value(op, chunk, prefix, within[warp][lane][s]), v[warp][lane][s]);
    }
  }
  CHECK(carried_same);
  return {flat(values), flat(indices)};
}
}  // namespace

TEMPLATE_TEST_CASE("scans across rows of a few long lines, replayed from the look-back kernel's parts on the host",
                   "[reduce][scan]", float, double) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("scan across few lines"));
  // 35 lines of 601 (two groups, the second of 3 lines; a last chunk of 89
  // positions, so some warps' runs are partial and some empty), 6 lines of
  // 777 along a middle axis, 5 lines of 512 (two whole chunks), and 5 of
  // 467 (a run of the last chunk's second step ends past the line).
  const auto a = eighths<T, 3>({601, 5, 7}, g);
  const auto m = eighths<T, 3>({3, 777, 2}, g);
  const auto w = eighths<T, 2>({512, 5}, g);
  const auto p = eighths<T, 2>({467, 5}, g);
  std::vector<double> want, widx;
  for (bool ex : {false, true}) {
    INFO((ex ? "exclusive" : "inclusive"));
    reference_scan(scan_op::sum, ex, flat(a), a.extents(), 0, want, widx);
    check_values(replay_cross_lookback<loom::detail::reduce::sum_op<T>>(a, 0, ex).first, want, 0);
    reference_scan(scan_op::sum, ex, flat(m), m.extents(), 1, want, widx);
    check_values(replay_cross_lookback<loom::detail::reduce::sum_op<T>>(m, 1, ex).first, want, 0);
    reference_scan(scan_op::sum, ex, flat(w), w.extents(), 0, want, widx);
    check_values(replay_cross_lookback<loom::detail::reduce::sum_op<T>>(w, 0, ex).first, want, 0);
    reference_scan(scan_op::sum, ex, flat(p), p.extents(), 0, want, widx);
    check_values(replay_cross_lookback<loom::detail::reduce::sum_op<T>>(p, 0, ex).first, want, 0);
    // cummax with its indices (ties in these eighths take the later index;
    // the look-back across rows serves it too since 2026-12-02).
    for (const auto* h : {&a, &m}) {
      const std::size_t axis = h == &a ? 0 : 1;
      const auto [mv, mi] = replay_cross_lookback<loom::detail::reduce::cum_extreme_op<T, true>, true>(*h, axis, ex);
      reference_scan(scan_op::max, ex, flat(*h), h->extents(), axis, want, widx, scan_none<T>(scan_op::max));
      check_values(mv, want, 0);
      check_values(mi, widx, 0);
    }
  }
}

namespace {
// warp_scan_kernel replayed on the host: every task of whole rows, pass by
// pass, its 32 lanes in lock step through the kernel's own per-lane parts
// (warp_scan_rows, warp_scan_load, warp_scan_level, warp_scan_carry), a
// shuffle being a read of another lane's value of the level before, into a
// NaN-poisoned output.
template <class Op, bool Indices, class E>
std::pair<std::vector<double>, std::vector<double>> replay_warp_scan(const E& e, std::size_t axis, bool exclusive) {
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using namespace loom::detail::scan;
  using namespace loom::detail::sort;
  using acc = typename Op::acc;
  constexpr std::size_t R = node_t<E>::rank;
  const auto n = as_node(e);
  const loom::shape<R> ext = n.extents();
  std::array<std::size_t, R> order{};
  std::size_t q = 0;
  for (std::size_t d = 0; d != R; ++d)
    if (d != axis) order[q++] = d;
  order[q] = axis;
  bool row_major = false;
  const axis_map<R> m = make_axis_map(ext, order, row_major);
  bind_info info;
  const auto b = bind_for_read(n, ext, info);
  const index_t len = ext[axis], rows = loom::shape_size(ext) / len;
  loom::host_tensor<typename Op::result, R> values(ext);
  loom::host_tensor<std::int64_t, R> indices(ext);
  using result_t = typename Op::result;
  for (index_t i = 0; i < values.size(); ++i) {
    if constexpr (loom::is_floating_v<result_t>)
      values.data()[i] = result_t(std::numeric_limits<float>::quiet_NaN());
    else
      values.data()[i] = std::numeric_limits<result_t>::min();
    indices.data()[i] = -7;
  }
  const Op op{};
  const scan_writer<Op, Indices, R> w{values.data(), Indices ? indices.data() : nullptr, op,
                                      scan_out<R>{m, loom::contiguous_strides(ext), row_major}};
  const inclusive_sink<scan_writer<Op, Indices, R>, Op> sink{w, op, exclusive};
  const fast_divmod div(static_cast<std::uint64_t>(len));
  auto run = [&](auto linear_tag) {
    constexpr bool L = decltype(linear_tag)::value;
    const index_t per = warp_scan_rows(len), tasks = (rows + per - 1) / per;
    for (index_t t = 0; t < tasks; ++t) {
      const index_t begin = t * per * len, end = std::min((t + 1) * per, rows) * len;
      acc carry = op.identity();
      for (index_t p = begin; p < end; p += warp_scan_span) {
        acc x[32][warp_scan_items];
        int k[32][warp_scan_items];
        for (int lane = 0; lane < 32; ++lane) warp_scan_load<L>(op, b, m, div, p, end, lane, x[lane], k[lane]);
        for (int u = 0; u < warp_scan_items; ++u) {
          for (int d = 1; d < 32; d *= 2) {
            acc before[32];
            for (int lane = 0; lane < 32; ++lane) before[lane] = x[lane][u];
            for (int lane = 0; lane < 32; ++lane)
              x[lane][u] = warp_scan_level(op, before[lane], before[lane >= d ? lane - d : lane], k[lane][u], lane, d);
          }
          for (int lane = 0; lane < 32; ++lane) x[lane][u] = warp_scan_carry(op, carry, x[lane][u], k[lane][u], lane);
          carry = x[31][u];
          for (int lane = 0; lane < 32; ++lane) {
            const index_t j = p + static_cast<index_t>(u) * 32 + lane;
            if (j < end) sink(j, x[lane][u], j - k[lane][u], j - k[lane][u] + len);
          }
        }
      }
    }
  };
  if (info.contiguous && row_major)
    run(std::true_type{});
  else
    run(std::false_type{});
  return {flat(values), flat(indices)};
}
}  // namespace

TEMPLATE_TEST_CASE("scans of rows up to 1024, replayed from the warp kernel's parts on the host", "[reduce][scan]",
                   float, std::int32_t) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("warp scan replay"));
  std::vector<double> want, widx;
  // Rows of 1, 7, 16, 31, 32, 33, 255, 256, 257, 1000 and 1024 elements
  // (tasks of many rows, of one, runs that start inside a row, and a last
  // task with fewer rows), contiguous, and along axis 0 of a 3-D tensor
  // (read through the axis map).
  for (index_t len : {1, 7, 16, 31, 32, 33, 255, 256, 257, 1000, 1024}) {
    INFO("rows of " << len);
    const auto h = eighths<T, 2>({37, len}, g);
    for (bool ex : {false, true}) {
      INFO((ex ? "exclusive" : "inclusive"));
      const auto [got, gi] = replay_warp_scan<loom::detail::reduce::sum_op<T>, false>(h, 1, ex);
      reference_scan(scan_op::sum, ex, flat(h), h.extents(), 1, want, widx);
      check_values(got, want, 0);
      const auto [mv, mi] = replay_warp_scan<loom::detail::reduce::cum_extreme_op<T, true>, true>(h, 1, ex);
      reference_scan(scan_op::max, ex, flat(h), h.extents(), 1, want, widx, scan_none<T>(scan_op::max));
      check_values(mv, want, 0);
      check_values(mi, widx, 0);
    }
  }
  const auto c = eighths<T, 3>({300, 5, 7}, g);
  for (bool ex : {false, true}) {
    const auto [got, gi] = replay_warp_scan<loom::detail::reduce::sum_op<T>, false>(c, 0, ex);
    reference_scan(scan_op::sum, ex, flat(c), c.extents(), 0, want, widx);
    check_values(got, want, 0);
  }
}

// The look-back of lookback_scan_kernel replayed on the host for every tile
// of a long row: each earlier tile has published either its aggregate or
// its inclusive prefix (tile 0 always the latter; random snapshots from none
// to all), the walk reads windows of 32 tiles, keeps up to
// lookback_windows of them and starts again when none holds an inclusive
// prefix (meanwhile more tiles publish theirs). The prefix the kernel's
// lookback_fold makes of what the walk found must be bitwise the serial
// left-to-right chain of aggregates, wherever the walk stopped. The data
// spans 40 binades, so any other order of combination rounds differently.
TEMPLATE_TEST_CASE("the look-back scan's tile prefix is the serial chain value wherever the look-back stops",
                   "[reduce][scan]", float, double) {
  using T = TestType;
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using namespace loom::detail::scan;
  using namespace loom::detail::sort;
  std::mt19937_64 g(loom_test::seed_for("look-back fold"));
  constexpr int tiles = 700;  // up to 22 windows back: walks that restart
  std::uniform_real_distribution<double> mant(1.0, 2.0), near1(-0.01, 0.01);
  std::uniform_int_distribution<int> binade(-20, 20);
  auto check_op = [&](const auto op, auto gen, const char* what) {
    using acc = typename std::remove_const_t<decltype(op)>::acc;
    static_assert(std::is_same_v<acc, T>);
    std::vector<acc> agg(tiles), chain(tiles);
    for (auto& a : agg) a = gen();
    chain[0] = lookback_first(op, agg[0]);
    for (int i = 1; i < tiles; ++i) chain[i] = op(chain[i - 1], agg[i]);
    // Sensitivity: folding the same aggregates right to left gives other bits.
    acc right = agg[tiles - 1];
    for (int i = tiles - 2; i >= 0; --i) right = op(agg[i], right);
    REQUIRE_FALSE(loom_test::same_bits(right, chain[tiles - 1]));
    int wrong = 0, walks = 0, with_kept = 0, restarted = 0, mid_window = 0, first_wrong = -1;
    for (double p : {0.0, 0.01, 0.2, 1.0}) {
      std::bernoulli_distribution published(p), later(0.3);
      std::vector<char> inclusive(tiles);
      for (int i = 1; i < tiles; ++i) {
        for (int j = 0; j < i; ++j) inclusive[j] = j == 0 || published(g);
        int end = i, kept = 0;
        bool restart = false;
        acc saved[lookback_windows][32];
        for (;;) {
          acc v[32];
          unsigned found = 0;
          for (int l = 0; l < 32; ++l) {
            const int j = end - 1 - l;
            if (j < 0) {
              v[l] = op.identity();
              continue;
            }
            // What the kernel reads of tile j: a float tile's status and
            // value come through the 64-bit word it publishes.
            unsigned status = inclusive[j] ? tile_inclusive : tile_aggregate;
            v[l] = inclusive[j] ? chain[j] : agg[j];
            if constexpr (std::is_same_v<acc, float>) {
              const std::uint64_t word = lookback_pack(status, v[l]);
              status = lookback_status(word);
              v[l] = lookback_value(word);
            }
            if (status == tile_inclusive) found |= 1u << l;
          }
          if (found != 0) {
            int first = 0;
            while (!(found >> first & 1u)) ++first;
            const acc r = lookback_fold(
                op, first, kept, [&](int l) { return v[l]; }, [&](int k, int l) { return saved[k][l]; });
            ++walks;
            with_kept += kept > 0;
            restarted += restart;
            mid_window += first > 0 && first < 31;
            if (!loom_test::same_bits(r, chain[i - 1]) && wrong++ == 0) first_wrong = i;
            break;
          }
          if (kept == lookback_windows) {
            restart = true;
            kept = 0;
            end = i;
            for (int j = 0; j < i; ++j) inclusive[j] = inclusive[j] || later(g);
            continue;
          }
          std::copy(v, v + 32, saved[kept]);
          ++kept;
          end -= 32;
        }
      }
    }
    INFO(what << ": first tile with another prefix " << first_wrong);
    CHECK(wrong == 0);
    CHECK(walks == 4 * (tiles - 1));
    CHECK(with_kept > 0);
    CHECK(restarted > 0);
    CHECK(mid_window > 0);
  };
  check_op(
      sum_op<T>{},
      [&] {
        const double x = std::ldexp(mant(g), binade(g));
        return static_cast<T>(g() % 2 ? x : -x);
      },
      "sum");
  check_op(prod_op<T>{}, [&] { return static_cast<T>(1.0 + near1(g)); }, "prod");
  // A row whose first tiles hold only -0 (each aggregate -0): tile 0 must
  // publish +0, as the host's loop from the identity gives, so that the
  // prefix of tile 5 (lanes 0..3 read the aggregates of tiles 4..1, lane 4
  // tile 0's inclusive prefix) is +0 too, not -0.
  const sum_op<T> op{};
  const T nz = static_cast<T>(-0.0);
  T window[32];
  for (int l = 0; l < 32; ++l) window[l] = l < 4 ? nz : lookback_first(op, nz);
  const T prefix = lookback_fold(
      op, 4, 0, [&](int l) { return window[l]; }, [&](int, int) { return op.identity(); });
  CHECK_FALSE(std::signbit(lookback_first(op, nz)));
  CHECK_FALSE(std::signbit(prefix));
  CHECK(prefix == 0);
}

// A float tile's published state is one 64-bit word (lookback_packed): the
// word must give back the status and every bit of the value, NaN payloads,
// signed zeros, infinities and subnormals included, and never be the
// pending word 0 the state is cleared to.
TEST_CASE("the look-back scan's 64-bit tile word keeps the status and every bit of the value", "[reduce][scan]") {
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using namespace loom::detail::scan;
  using namespace loom::detail::sort;
  std::mt19937 g(loom_test::seed_for("look-back word"));
  std::vector<std::uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                     0xffc00001u, 0x7f800001u, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
                                     0x3f800000u, 0xffffffffu};
  for (int i = 0; i < 10000; ++i) bits.push_back(static_cast<std::uint32_t>(g()));
  int checked = 0;
  for (const std::uint32_t b : bits) {
    float v;
    std::memcpy(&v, &b, sizeof v);
    for (const unsigned status : {unsigned{tile_aggregate}, unsigned{tile_inclusive}}) {
      const std::uint64_t word = lookback_pack(status, v);
      const float back = lookback_value(word);
      std::uint32_t got;
      std::memcpy(&got, &back, sizeof got);
      INFO("bits " << std::hex << b << " status " << status);
      REQUIRE(word != 0);
      REQUIRE(lookback_status(word) == status);
      REQUIRE(got == b);
      ++checked;
    }
  }
  CHECK(lookback_status(0) == tile_pending);
  CHECK(checked == 2 * static_cast<int>(bits.size()));
}

// The device sort replayed on the host through its own per-element parts
// (loom::detail::sort::to_radix_key, flat_position, row_of_position, row_key_bits,
// gather_sorted), with std::stable_sort standing in for each
// cub::DeviceRadixSort call (a stable sort of unsigned keys, or of signed and
// bool keys by value, as CUB documents it; descending for the first call
// when asked, over the first row_key_bits(rows) bits for the second): each
// row must come out as the reference's stable order, NaN of either sign the
// largest value and -0.0 tied with +0.0. Rows of 1031 x 5 are many more
// than one sorting call of CUB's segmented sort would take without waiting
// for the host.
TEMPLATE_TEST_CASE("the device sort's two radix sorts, replayed on the host, sort each row stably", "[reduce][sort]",
                   float, double, loom::half, loom::bf16, std::int32_t, std::int64_t) {
  using T = TestType;
  using namespace loom::detail;
  using namespace loom::detail::reduce;
  using namespace loom::detail::scan;
  using namespace loom::detail::sort;
  using K = sort_key_t<T>;
  std::mt19937_64 g(loom_test::seed_for("sort replay"));
  for (auto s : {loom::shape<2>{1, 1}, loom::shape<2>{1, 4099}, loom::shape<2>{7, 33}, loom::shape<2>{1031, 5},
                 loom::shape<2>{2, 1000}, loom::shape<2>{300, 1}}) {
    const index_t rows = s[0], len = s[1], total = rows * len;
    auto h = eighths<T, 2>(s, g, 4);
    if constexpr (loom::is_floating_v<T>) {
      for (index_t i = 2; i < total; i += 13) h.data()[i] = T(std::numeric_limits<float>::quiet_NaN());
      for (index_t i = 5; i < total; i += 17) h.data()[i] = T(-std::numeric_limits<float>::quiet_NaN());
      for (index_t i = 7; i < total; i += 11) h.data()[i] = T(-0.0f);
      for (index_t i = 3; i < total; i += 19) h.data()[i] = T(-std::numeric_limits<float>::infinity());
    }
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      // The smallest subnormals, apart from the zeros (their keys come from
      // bits, so a build flushing subnormals orders them as the host does).
      for (index_t i = 4; i < total; i += 23) h.data()[i] = std::numeric_limits<T>::denorm_min();
      for (index_t i = 6; i < total; i += 29) h.data()[i] = -std::numeric_limits<T>::denorm_min();
    }
    std::vector<K> key(static_cast<std::size_t>(total));
    for (index_t i = 0; i < total; ++i) {
      if constexpr (loom::is_floating_v<T>)
        to_radix_key<T>{h.data(), key.data()}(i);
      else
        key[static_cast<std::size_t>(i)] = h.data()[i];
    }
    for (const bool desc : {false, true}) {
      INFO(loom::shape_string(s) << (desc ? " descending" : " ascending"));
      std::vector<std::int64_t> p0(static_cast<std::size_t>(total)), p1 = p0;
      for (index_t i = 0; i < total; ++i) flat_position{p0.data()}(i);
      // 1: (key, position) pairs by key.
      std::vector<std::size_t> o(p0.size());
      std::iota(o.begin(), o.end(), std::size_t{0});
      std::stable_sort(o.begin(), o.end(), [&](std::size_t a, std::size_t b) { return desc ? key[a] > key[b] : key[a] < key[b]; });
      for (std::size_t i = 0; i < o.size(); ++i) p1[i] = p0[o[i]];
      const loom::detail::fast_divmod by_len(static_cast<std::uint64_t>(len));
      const std::int64_t* sorted = p1.data();
      std::vector<std::int64_t> p2(p0.size());
      if (rows > 1) {
        // 2: the positions by row number, over the bits the device call reads.
        std::vector<std::uint32_t> row(p0.size());
        for (index_t i = 0; i < total; ++i) row_of_position{p1.data(), row.data(), by_len}(i);
        const int bits = row_key_bits(rows);
        REQUIRE(bits >= 1);
        REQUIRE(bits <= 32);
        const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
        std::iota(o.begin(), o.end(), std::size_t{0});
        std::stable_sort(o.begin(), o.end(), [&](std::size_t a, std::size_t b) { return (row[a] & mask) < (row[b] & mask); });
        for (std::size_t i = 0; i < o.size(); ++i) p2[i] = p1[o[i]];
        sorted = p2.data();
      }
      std::vector<T> values(p0.size(), T(7));
      std::vector<std::int64_t> idx(p0.size(), -5);
      for (index_t i = 0; i < total; ++i) gather_sorted<T>{h.data(), sorted, values.data(), idx.data(), by_len}(i);
      index_t bad = 0;
      for (index_t r = 0; r < rows; ++r) {
        std::vector<double> want_keys;
        for (index_t j = 0; j < len; ++j) want_keys.push_back(loom_test::as_double(h(r, j)));
        const auto want = stable_order(want_keys, desc);
        for (index_t j = 0; j < len; ++j) {
          const auto p = static_cast<std::size_t>(r * len + j);
          const auto w = want[static_cast<std::size_t>(j)];
          const bool ok = idx[p] == w && same_value(loom_test::as_double(values[p]), want_keys[static_cast<std::size_t>(w)]);
          if (!ok && bad < 5) {
            INFO("row " << r << " position " << j << ": got index " << idx[p] << ", want " << w);
            CHECK(ok);
          }
          bad += !ok;
        }
      }
      CHECK(bad == 0);
    }
  }
  CHECK(row_key_bits(2) == 1);
  CHECK(row_key_bits(1031) == 11);
  CHECK(row_key_bits(index_t{1} << 32) == 32);
}
#endif
