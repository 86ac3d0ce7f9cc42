// SPDX-License-Identifier: Apache-2.0
// Row reductions and the layers built on them, checked on both executors
// against double-precision references (and central finite differences for
// the backward passes). The including file defines LOOM_TEST_SPACE and
// LOOM_TEST_TAG.
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using loom::none;
using loom::range;
using loom::whole;
using space_t = LOOM_TEST_SPACE;

// LOOM_NN_PART (0 to 1) compiles one part of the cases (all without it),
// so the parts of a test program compile side by side; the helpers
// that only the other parts use are then unused here.
#if defined(LOOM_NN_PART)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
namespace {
constexpr bool on_device = std::is_same_v<space_t, loom::device>;
constexpr double inf = std::numeric_limits<double>::infinity();

template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space(const loom::host_tensor<T, R>& h) {
  if constexpr (on_device)
    return loom::to_device(h);
  else
    return h;
}

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g, double lo = -3, double hi = 3) {
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

template <class T>
double tol() {
  if constexpr (std::is_same_v<T, loom::half>)
    return 3e-3;
  else if constexpr (std::is_same_v<T, loom::bf16>)
    return 2e-2;
  else if constexpr (std::is_same_v<T, float>)
    return 2e-5;
  else
    return 1e-12;
}

// Rows of a host tensor as doubles: rows[r][c].
template <class T, std::size_t R>
std::vector<std::vector<double>> rows_of(const loom::host_tensor<T, R>& h) {
  const index_t c = h.extent(R - 1), n = c ? h.size() / c : 0;
  std::vector<std::vector<double>> out(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(c)));
  for (index_t i = 0; i < h.size(); ++i)
    out[static_cast<std::size_t>(i / c)][static_cast<std::size_t>(i % c)] = loom_test::as_double(h.data()[i]);
  return out;
}

template <class T, std::size_t R>
void check_rows(const loom::tensor<T, R, space_t>& y, const std::vector<std::vector<double>>& want, double rel,
                double abs_tol) {
  const auto got = rows_of(loom::to_host(y));
  REQUIRE(got.size() == want.size());
  for (std::size_t r = 0; r < want.size(); ++r)
    for (std::size_t c = 0; c < want[r].size(); ++c) {
      const double g = got[r][c], w = want[r][c];
      const bool ok = std::isnan(w) ? std::isnan(g) : (std::isinf(w) ? g == w : std::fabs(g - w) <= abs_tol + rel * std::fabs(w));
      if (!ok) {
        INFO("row " << r << ", column " << c << ": got " << g << ", want " << w);
        REQUIRE(ok);
      }
    }
}

using row_fn = std::function<std::vector<double>(const std::vector<double>&)>;

std::vector<std::vector<double>> map_rows(const std::vector<std::vector<double>>& x, const row_fn& f) {
  std::vector<std::vector<double>> out;
  for (const auto& r : x) out.push_back(f(r));
  return out;
}

std::vector<double> ref_softmax(const std::vector<double>& x) {
  double m = -inf;
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> y;
  for (double v : x) y.push_back(std::exp(v - m) / s);
  return y;
}
std::vector<double> ref_log_softmax(const std::vector<double>& x) {
  double m = -inf;
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> y;
  for (double v : x) y.push_back(v - m - std::log(s));
  return y;
}
std::vector<double> ref_layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  std::vector<double> y;
  for (std::size_t i = 0; i < x.size(); ++i) y.push_back((x[i] - mean) / std::sqrt(var + eps) * w[i] + b[i]);
  return y;
}
std::vector<double> ref_rms_norm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  ms /= static_cast<double>(x.size());
  std::vector<double> y;
  for (std::size_t i = 0; i < x.size(); ++i) y.push_back(x[i] / std::sqrt(ms + eps) * w[i]);
  return y;
}

// d/dx of sum_i dy_i f(x)_i by central differences, in double.
std::vector<double> fd_grad(const row_fn& f, std::vector<double> x, const std::vector<double>& dy, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) {
    const double keep = x[j];
    x[j] = keep + h;
    const auto up = f(x);
    x[j] = keep - h;
    const auto dn = f(x);
    x[j] = keep;
    double s = 0;
    for (std::size_t i = 0; i < x.size(); ++i) s += dy[i] * (up[i] - dn[i]);
    g[j] = s / (2 * h);
  }
  return g;
}

template <class F>
void expect_one_launch(F&& f) {
  const auto before = loom::launches();
  f();
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
}
}  // namespace

#if !defined(LOOM_NN_PART) || LOOM_NN_PART == 0
TEMPLATE_TEST_CASE("row reductions reduce the last axis and broadcast back", "[nn][rows]" LOOM_TEST_TAG, float,
                   loom::half, loom::bf16, double) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("row reductions"));
  for (index_t cols : {1, 7, 32, 33, 1000, 5000}) {
    INFO("cols " << cols);
    auto xh = random_host<T, 3>({2, 3, cols}, g);
    auto x = in_space(xh);
    const auto rows = rows_of(xh);
    auto y = poisoned<T, 3>({2, 3, cols});
    expect_one_launch([&] { y = x - row_max(x) + row_sum(x) * 0.5f - row_mean(x) + row_min(x); });
    CHECK(loom::last_eval().path == loom::eval_path::rows);
    check_rows(y, map_rows(rows, [](const std::vector<double>& r) {
      double mx = -inf, mn = inf, s = 0;
      for (double v : r) mx = std::max(mx, v), mn = std::min(mn, v), s += v;
      std::vector<double> o;
      for (double v : r) o.push_back(v - mx + s * 0.5 - s / static_cast<double>(r.size()) + mn);
      return o;
    }), tol<T>(), tol<T>() * (1 + 0.05 * std::sqrt(static_cast<double>(cols))));
    // A reduction assigned to a [..., 1] output: rows of another length than the output's.
    auto s = poisoned<T, 3>({2, 3, 1});
    s = row_sum(x * x);
    check_rows(s, map_rows(rows, [](const std::vector<double>& r) {
      double a = 0;
      for (double v : r) a += v * v;
      return std::vector<double>{a};
    }), tol<T>() * 2, 1e-4);
  }
}

TEST_CASE("row max propagates NaN and row reductions accept strided rows", "[nn][rows]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("row nan"));
  auto xh = random_host<float, 2>({9, 40}, g);
  xh(3, 17) = std::numeric_limits<float>::quiet_NaN();
  auto x = in_space(xh);
  auto m = poisoned<float, 2>({9, 1});
  m = row_max(x);
  const auto mh = loom::to_host(m);
  for (index_t r = 0; r < 9; ++r) {
    if (r == 3) {
      CHECK(std::isnan(mh(r, 0)));
      continue;
    }
    double want = -inf;
    for (index_t c = 0; c < 40; ++c) want = std::max(want, static_cast<double>(xh(r, c)));
    CHECK(mh(r, 0) == want);
  }
  // Columns of x as rows: a transposed (strided) input.
  auto t = poisoned<float, 2>({40, 9});
  t = loom::softmax(x.t());
  const auto th = loom::to_host(t);
  for (index_t c = 0; c < 40; ++c) {
    std::vector<double> col;
    for (index_t r = 0; r < 9; ++r) col.push_back(xh(r, c));
    const auto want = ref_softmax(col);
    for (index_t r = 0; r < 9; ++r) {
      if (std::isnan(want[static_cast<std::size_t>(r)])) {
        CHECK(std::isnan(th(c, r)));
      } else {
        CHECK(std::fabs(th(c, r) - want[static_cast<std::size_t>(r)]) <= 1e-6);
      }
    }
  }
}

TEST_CASE("a row sum of float values cast to double is accumulated and kept in double", "[nn][rows]" LOOM_TEST_TAG) {
  // 2^24, then 37 (or 4099) ones: every partial sum is exact in double, while
  // 2^24 + 37 is odd, so a float cannot hold the row's sum. The per-row
  // results must be double when the reduction accumulates in double, though
  // every leaf is float (on the device: a warp per row, and a block per row).
  for (const index_t cols : {index_t{38}, index_t{4100}}) {
    INFO("rows of " << cols);
    const index_t rows = 5;
    loom::host_tensor<float, 2> xh({rows, cols});
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < cols; ++c) xh(r, c) = c == r ? 16777216.0f : 1.0f;
    const auto x = in_space(xh);
    const double total = 16777216.0 + (cols - 1);
    auto y = poisoned<double, 2>({rows, 1});
    y = loom::row_sum(loom::cast<double>(x));
    const auto yh = loom::to_host(y);
    for (index_t r = 0; r < rows; ++r) CHECK(yh(r, 0) == total);
    // Broadcast back along the row.
    auto z = poisoned<double, 2>({rows, cols});
    z = loom::cast<double>(x) - loom::row_sum(loom::cast<double>(x));
    const auto zh = loom::to_host(z);
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < cols; ++c) CHECK(zh(r, c) == static_cast<double>(xh(r, c)) - total);
  }
}

TEST_CASE("identical row reductions are computed once and in-place layers work", "[nn][rows]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dedupe"));
  auto xh = random_host<float, 2>({17, 300}, g);
  auto x = in_space(xh);
  auto y = poisoned<float, 2>({17, 300});
  y = exp(x - row_max(x)) / row_sum(exp(x - row_max(x)));
  CHECK(loom::last_eval().row_passes == 2);
  check_rows(y, map_rows(rows_of(xh), ref_softmax), 2e-6, 1e-7);
  // The same expression over two different tensors keeps both reductions.
  auto zh = random_host<float, 2>({17, 300}, g);
  auto z = in_space(zh);
  y = exp(x - row_max(x)) / row_sum(exp(z - row_max(z)));
  CHECK(loom::last_eval().row_passes == 3);
  // In place: each row is reduced completely before it is written.
  x = loom::softmax(x);
  check_rows(x, map_rows(rows_of(xh), ref_softmax), 2e-6, 1e-7);
  // Reading other rows of the output is refused.
  auto w = in_space(random_host<float, 2>({4, 8}, g));
  REQUIRE_THROWS_AS(w.slice(range(0, 2)) = w.slice(range(2, 4)) - row_max(w.slice(range(0, 2)).t().t()) +
                                              row_sum(w.slice(range(0, 2), range(0, 4))),
                    loom::aliasing_error);
}

namespace {
// Checks y and want (same shape) bit for bit.
template <class T, std::size_t R>
void check_same_bits(const loom::tensor<T, R, space_t>& y, const loom::tensor<T, R, space_t>& want) {
  const auto a = loom::to_host(y), b = loom::to_host(want);
  index_t bad = 0;
  for (index_t i = 0; i < a.size(); ++i)
    if (!loom_test::same_bits(a.data()[i], b.data()[i]) && bad++ < 3)
      FAIL_CHECK("element " << i << ": " << loom_test::as_double(a.data()[i]) << ", want "
                            << loom_test::as_double(b.data()[i]));
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("reductions of one level share a pass and give the bits of one pass each", "[nn][rows]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("levels"));
  // Rows of three lengths: a vector step's tail differs for each (45, 70
  // and 33 columns), and b is read through a transposed view (no vector
  // form) in the second round.
  for (bool strided : {false, true}) {
    INFO("strided " << strided);
    auto a = in_space(random_host<float, 2>({9, 45}, g));
    auto bt = in_space(random_host<float, 2>({70, 9}, g));
    auto bd = in_space(loom::to_host(bt.t()));
    auto x = in_space(random_host<float, 2>({9, 33}, g));
    const auto run = [&](const auto& b) {
      // Each reduction alone (one pass each), then the same difference.
      auto s1 = poisoned<float, 2>({9, 1});
      auto s2 = poisoned<float, 2>({9, 1});
      s1 = row_sum(a * a);
      CHECK(loom::last_eval().row_passes == 1);
      s2 = row_max(b);
      auto want = poisoned<float, 2>({9, 1});
      want = s1 - s2;
      // Both in one pass (level 0), as a column and under a row output.
      auto d = poisoned<float, 2>({9, 1});
      d = row_sum(a * a) - row_max(b);
      CHECK(loom::last_eval().row_passes == 1);
      check_same_bits(d, want);
      auto y = poisoned<float, 2>({9, 33});
      y = x * (row_sum(a * a) - row_max(b)) + row_mean(x - row_max(b));
      CHECK(loom::last_eval().row_passes == 2);  // row_mean reads row_max: the next level
      auto m = poisoned<float, 2>({9, 1});
      m = row_mean(x - s2);
      auto y_want = poisoned<float, 2>({9, 33});
      y_want = x * want + m;
      const auto yh = loom::to_host(y), yw = loom::to_host(y_want);
      for (index_t i = 0; i < yh.size(); ++i)
        REQUIRE(std::fabs(yh.data()[i] - yw.data()[i]) <= 1e-5f * (1 + std::fabs(yw.data()[i])));
    };
    if (strided)
      run(bt.t());
    else
      run(bd);
  }
}

TEST_CASE("per-row values are computed once per row on the host, with the bits of a per-row output",
          "[nn][rows]" LOOM_TEST_TAG) {
  // rsqrt(row_mean(x * x) + eps) and log(row_sum(exp(x - row_max(x)))) have
  // one value per row: the host computes each once per row (eval_info
  // says how many), the device in every column. Either way the layer's
  // bits are those of the same value assigned to an [N, 1] tensor and
  // broadcast along the rows by an elementwise assignment.
  std::mt19937_64 g(loom_test::seed_for("per-row values"));
  const index_t n = 37, c = 301;
  auto x = in_space(random_host<float, 2>({n, c}, g));
  auto w = in_space(random_host<float, 1>({c}, g));
  auto y = poisoned<float, 2>({n, c});
  auto want = poisoned<float, 2>({n, c});
  auto r = poisoned<float, 2>({n, 1});
  auto m = poisoned<float, 2>({n, 1});

  y = loom::rms_norm(x, w, 1e-6);
  CHECK(loom::last_eval().per_row_values == (on_device ? 0 : 1));
  r = loom::rms_norm_rstd(x, 1e-6);
  want = x * r * w;
  check_same_bits(y, want);

  y = loom::log_softmax(x);
  // The shift stop_gradient(row_max(x)) (twice) and the log of the sum.
  CHECK(loom::last_eval().per_row_values == (on_device ? 0 : 3));
  m = row_max(x);
  r = log(row_sum(exp(x - m)));
  want = x - m - r;
  check_same_bits(y, want);

  // In a reduction's own pass: layer_norm_backward_input's mean(g * xhat)
  // reads rstd in every column of its pass.
  auto dy = in_space(random_host<float, 2>({n, c}, g));
  y = loom::layer_norm_backward_input(x, w, dy, 1e-5);
  if (!on_device) CHECK(loom::last_eval().per_row_values > 0);
  const auto yh = loom::to_host(y);
  const auto xr = rows_of(loom::to_host(x)), dr = rows_of(loom::to_host(dy));
  const auto wh = loom::to_host(w);
  for (index_t i = 0; i < n; ++i) {
    const auto& xi = xr[static_cast<std::size_t>(i)];
    const auto& di = dr[static_cast<std::size_t>(i)];
    double mean = 0, var = 0, sg = 0, sgx = 0;
    for (double v : xi) mean += v / c;
    for (double v : xi) var += (v - mean) * (v - mean) / c;
    const double rstd = 1 / std::sqrt(var + 1e-5);
    for (index_t j = 0; j < c; ++j) {
      const double gj = di[static_cast<std::size_t>(j)] * wh.data()[j];
      sg += gj / c;
      sgx += gj * (xi[static_cast<std::size_t>(j)] - mean) * rstd / c;
    }
    for (index_t j = 0; j < c; ++j) {
      const double xhat = (xi[static_cast<std::size_t>(j)] - mean) * rstd;
      const double ref = rstd * (di[static_cast<std::size_t>(j)] * wh.data()[j] - sg - xhat * sgx);
      CHECK(std::fabs(yh.data()[i * c + j] - ref) <= 1e-4 * (1 + std::fabs(ref)));
    }
  }
}

TEMPLATE_TEST_CASE("softmax and log_softmax match double references", "[nn][softmax]" LOOM_TEST_TAG, float, loom::half,
                   loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("softmax"));
  for (index_t cols : {1, 7, 32, 33, 1000, 4096}) {
    INFO("cols " << cols);
    auto xh = random_host<T, 2>({5, cols}, g, -8, 8);
    auto x = in_space(xh);
    auto y = poisoned<T, 2>({5, cols});
    expect_one_launch([&] { y = loom::softmax(x); });
    check_rows(y, map_rows(rows_of(xh), ref_softmax), tol<T>(), tol<T>() * 0.01);
    expect_one_launch([&] { y = loom::log_softmax(x); });
    check_rows(y, map_rows(rows_of(xh), ref_log_softmax), tol<T>(), tol<T>());
  }
}

TEST_CASE("softmax handles huge logits, masks, temperature and fully masked rows", "[nn][softmax]" LOOM_TEST_TAG) {
  loom::host_tensor<float, 2> xh({3, 4}, {1e4f, -1e4f, 0.f, 1e4f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f});
  loom::host_tensor<float, 2> mh({3, 4}, {0.f, 0.f, 0.f, 0.f, 0.f, -INFINITY, 0.f, -INFINITY, -INFINITY, -INFINITY,
                                          -INFINITY, -INFINITY});
  auto x = in_space(xh);
  auto mask = in_space(mh);
  auto y = poisoned<float, 2>({3, 4});
  y = loom::softmax(x, mask, 2.0);
  const auto yh = loom::to_host(y);
  CHECK(yh(0, 0) == Approx(0.5));
  CHECK(yh(0, 3) == Approx(0.5));
  CHECK(yh(0, 1) == 0.0f);
  const double e1 = std::exp(0.5), e3 = std::exp(1.5);
  CHECK(yh(1, 0) == Approx(e1 / (e1 + e3)));
  CHECK(yh(1, 1) == 0.0f);
  CHECK(yh(1, 2) == Approx(e3 / (e1 + e3)));
  for (index_t c = 0; c < 4; ++c) CHECK(std::isnan(yh(2, c)));  // documented: a fully masked row is NaN
  y = loom::log_softmax(x, mask, 2.0);
  const auto lh = loom::to_host(y);
  CHECK(lh(0, 0) == Approx(std::log(0.5)));
  CHECK(lh(1, 1) == -INFINITY);
}

TEST_CASE("the layers' arguments mean what docs/04_layers.md says, defaults included", "[nn]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("layer arguments"));
  const index_t n = 7, c = 33;
  const auto xh = random_host<double, 2>({n, c}, g, -3, 3);
  const auto bh = random_host<double, 1>({c}, g, -1, 1);
  const auto x = in_space(xh);
  const auto b = in_space(bh);
  // softmax(x, bias, T) is softmax(x / T + bias), not softmax((x + bias) / T).
  auto y = poisoned<double, 2>({n, c});
  y = loom::softmax(x, b, 0.7);
  auto scaled_first = rows_of(xh);
  for (auto& row : scaled_first)
    for (std::size_t k = 0; k < row.size(); ++k) row[k] = row[k] / 0.7 + bh(static_cast<index_t>(k));
  check_rows(y, map_rows(scaled_first, ref_softmax), 1e-12, 1e-15);
  y = loom::log_softmax(x, b, 0.7);
  check_rows(y, map_rows(scaled_first, ref_log_softmax), 1e-12, 1e-12);
  // The norms' default eps: 1e-5 for layer norm, 1e-6 for RMS norm. Rows of
  // a small spread, so that eps changes the result.
  const auto th = random_host<double, 2>({n, c}, g, -1e-3, 1e-3);
  const auto t = in_space(th);
  const auto w = in_space(random_host<double, 1>({c}, g, 0.5, 2));
  auto d = poisoned<double, 2>({n, c});
  auto e = poisoned<double, 2>({n, c});
  auto same = [&](double eps) {
    const auto dh = loom::to_host(d), eh = loom::to_host(e);
    INFO("eps " << eps);
    CHECK(std::memcmp(dh.data(), eh.data(), static_cast<std::size_t>(dh.size()) * sizeof(double)) == 0);
  };
  d = loom::layer_norm(t, w, b);
  e = loom::layer_norm(t, w, b, 1e-5);
  same(1e-5);
  d = loom::rms_norm(t, w);
  e = loom::rms_norm(t, w, 1e-6);
  same(1e-6);
  // cross_entropy_backward's grad (a double) scales the gradient of the mean loss.
  const loom::host_tensor<std::int64_t, 1> targets({n}, {0, 5, 32, 7, 1, 30, 2});
  const auto tt = in_space(targets);
  const auto unit = loom::to_host(loom::cross_entropy_backward(x, tt));
  const auto scaled = loom::to_host(loom::cross_entropy_backward(x, tt, 0.3));
  for (index_t i = 0; i < unit.size(); ++i) CHECK(scaled.data()[i] == Approx(0.3 * unit.data()[i]).epsilon(1e-14));
}

TEMPLATE_TEST_CASE("layer_norm and rms_norm match double references", "[nn][norm]" LOOM_TEST_TAG, float, loom::half,
                   loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("norms"));
  for (index_t cols : {1, 7, 33, 1000, 5000}) {
    INFO("cols " << cols);
    auto xh = random_host<T, 3>({2, 3, cols}, g, -200, 300);  // x^2 overflows half: computed in float
    auto wh = random_host<T, 1>({cols}, g, 0.5, 2);
    auto bh = random_host<T, 1>({cols}, g);
    auto x = in_space(xh);
    auto w = in_space(wh);
    auto b = in_space(bh);
    const auto wr = rows_of(wh)[0], br = rows_of(bh)[0];
    auto y = poisoned<T, 3>({2, 3, cols});
    expect_one_launch([&] { y = loom::layer_norm(x, w, b, 1e-5); });
    check_rows(y, map_rows(rows_of(xh), [&](const std::vector<double>& r) { return ref_layer_norm(r, wr, br, 1e-5); }),
               tol<T>() * 2, tol<T>() * 4);
    expect_one_launch([&] { y = loom::rms_norm(x, w, 1e-6); });
    check_rows(y, map_rows(rows_of(xh), [&](const std::vector<double>& r) { return ref_rms_norm(r, wr, 1e-6); }),
               tol<T>() * 2, tol<T>() * 4);
  }
  // A constant row has zero variance: the output is finite (the bias).
  loom::host_tensor<float, 2> ch({1, 5});
  loom::fill(ch, 3.0f);
  auto c = in_space(ch);
  auto y = poisoned<float, 2>({1, 5});
  y = loom::layer_norm(c, 1.0f, 0.25f);
  check_rows(y, {{0.25, 0.25, 0.25, 0.25, 0.25}}, 0, 1e-6);
}

TEMPLATE_TEST_CASE("layer_norm of a constant row gives exactly the bias at any length", "[nn][norm]" LOOM_TEST_TAG,
                   float, loom::half, loom::bf16, double) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("layer_norm constant rows"));
  // The float mean of 0.7 over 4099 (or 4096) columns is 8 ulps off; centred
  // values of that error, scaled by 1/sqrt(eps), put the output 1.5e-4 from the bias.
  for (index_t cols : {1, 7, 257, 4096, 4099, 40000}) {
    for (double value : {0.7, -3.3, 1000.5, 1e-3}) {
      INFO("cols " << cols << ", value " << value);
      loom::host_tensor<T, 2> xh({3, cols});
      loom::fill(xh, T(value));
      const auto x = in_space(xh);
      const auto bh = random_host<T, 1>({cols}, g);
      const auto b = in_space(bh);
      auto y = poisoned<T, 2>({3, cols});
      expect_one_launch([&] { y = loom::layer_norm(x, 1.0f, 0.25f, 1e-5); });
      const auto yh = loom::to_host(y);
      for (index_t i = 0; i < yh.size(); ++i) REQUIRE(loom_test::as_double(yh.data()[i]) == 0.25);
      y = loom::layer_norm(x, loom::full<T, 1, space_t>({cols}, T(1.5)), b, 1e-5);
      check_rows(y, std::vector<std::vector<double>>(3, rows_of(bh)[0]), 0, 0);
      auto mean = poisoned<T, 2>({3, 1});
      mean = loom::layer_norm_mean(x);
      check_rows(mean, std::vector<std::vector<double>>(3, {loom_test::as_double(T(value))}), 0, 0);
    }
  }
}

TEMPLATE_TEST_CASE("layer_norm of rows far from 0 with a small spread is off by at most one ulp of the mean",
                   "[nn][norm]" LOOM_TEST_TAG, float, double) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("layer_norm offset rows"));
  for (index_t cols : {257, 4099, 40000}) {
    INFO("cols " << cols);
    // 1000 +- 0.01: an error of the row mean, even one ulp of 1000, is
    // 1/100 (float) of the spread, and the output inherits it divided by
    // the spread. The best a T mean can do is half an ulp.
    const auto xh = random_host<T, 2>({5, cols}, g, 999.99, 1000.01);
    const auto wh = random_host<T, 1>({cols}, g, 0.5, 2);
    const auto bh = random_host<T, 1>({cols}, g);
    auto y = poisoned<T, 2>({5, cols});
    y = loom::layer_norm(in_space(xh), in_space(wh), in_space(bh), 1e-5);
    const auto yh = loom::to_host(y);
    const double ulp = static_cast<double>(std::nextafter(T(1000), T(2000)) - T(1000));
    double worst = 0;  // the largest error as a fraction of what is allowed
    for (index_t r = 0; r < 5; ++r) {  // the reference in long double: double rows need more than double
      long double mean = 0, var = 0;
      for (index_t k = 0; k < cols; ++k) mean += xh(r, k);
      mean /= static_cast<long double>(cols);
      for (index_t k = 0; k < cols; ++k) var += (xh(r, k) - mean) * (xh(r, k) - mean);
      const long double rstd_long = 1 / std::sqrt(var / static_cast<long double>(cols) + 1e-5L);
      const double rstd = static_cast<double>(rstd_long);
      for (index_t k = 0; k < cols; ++k) {
        const double want = static_cast<double>((xh(r, k) - mean) * rstd_long * wh(k) + bh(k));
        const double allowed = wh(k) * ulp * rstd + 1e3 * ulp * std::fabs(want);
        worst = std::max(worst, std::fabs(yh(r, k) - want) / allowed);
      }
    }
    CHECK(worst <= 1.0);
  }
}
#endif

#if !defined(LOOM_NN_PART) || LOOM_NN_PART == 1
TEST_CASE("backward passes match analytic and finite-difference gradients", "[nn][backward]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("backward"));
  for (index_t cols : {1, 7, 33, 257}) {
    INFO("cols " << cols);
    auto xh = random_host<double, 2>({4, cols}, g);
    auto dyh = random_host<double, 2>({4, cols}, g);
    auto wh = random_host<double, 1>({cols}, g, 0.5, 2);
    auto x = in_space(xh);
    auto dy = in_space(dyh);
    auto w = in_space(wh);
    const auto xr = rows_of(xh), dr = rows_of(dyh);
    const auto wr = rows_of(wh)[0];
    const std::vector<double> zeros(static_cast<std::size_t>(cols), 0.0);
    auto fd = [&](const row_fn& f) {
      std::vector<std::vector<double>> out;
      for (std::size_t r = 0; r < xr.size(); ++r) out.push_back(fd_grad(f, xr[r], dr[r]));
      return out;
    };
    auto y = poisoned<double, 2>({4, cols});
    auto dx = poisoned<double, 2>({4, cols});
    y = loom::softmax(x);
    expect_one_launch([&] { dx = loom::softmax_backward(y, dy); });
    check_rows(dx, fd(ref_softmax), 1e-6, 1e-8);
    y = loom::log_softmax(x);
    expect_one_launch([&] { dx = loom::log_softmax_backward(y, dy); });
    check_rows(dx, fd(ref_log_softmax), 1e-6, 1e-8);
    expect_one_launch([&] { dx = loom::layer_norm_backward_input(x, w, dy, 1e-5); });
    check_rows(dx, fd([&](const std::vector<double>& r) { return ref_layer_norm(r, wr, zeros, 1e-5); }), 1e-5, 1e-6);
    expect_one_launch([&] { dx = loom::rms_norm_backward_input(x, w, dy, 1e-6); });
    check_rows(dx, fd([&](const std::vector<double>& r) { return ref_rms_norm(r, wr, 1e-6); }), 1e-5, 1e-6);
  }
}

namespace {
double ref_ce_row(const std::vector<double>& z, std::int64_t t, double s) {
  double m = -inf;
  for (double v : z) m = std::max(m, v);
  double sum = 0, mean = 0;
  for (double v : z) sum += std::exp(v - m), mean += v;
  mean /= static_cast<double>(z.size());
  const double lse = std::log(sum) + m;
  return (1 - s) * (lse - z[static_cast<std::size_t>(t)]) + s * (lse - mean);
}
}  // namespace

TEST_CASE("cross_entropy matches PyTorch's definition and its gradient", "[nn][loss]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("cross entropy"));
  const index_t n = 9, c = 33;
  auto zh = random_host<float, 2>({n, c}, g, -5, 5);
  loom::host_tensor<std::int64_t, 1> th({n});
  for (index_t r = 0; r < n; ++r) th(r) = static_cast<std::int64_t>(g() % c);
  th(2) = -100;  // ignored
  th(5) = c + 4;  // out of range: NaN
  auto z = in_space(zh);
  auto t = in_space(th);
  const auto zr = rows_of(zh);
  for (double s : {0.0, 0.1}) {
    INFO("label smoothing " << s);
    loom::cross_entropy_options o;
    o.label_smoothing = s;
    const auto per = loom::to_host(loom::cross_entropy_per_row(z, t, o));
    double sum = 0;
    int counted = 0;
    for (index_t r = 0; r < n; ++r) {
      if (r == 2) {
        CHECK(per(r) == 0.0f);
      } else if (r == 5) {
        CHECK(std::isnan(per(r)));
      } else {
        const double want = ref_ce_row(zr[static_cast<std::size_t>(r)], th(r), s);
        CHECK(per(r) == Approx(want).epsilon(1e-5));
        sum += want;
        ++counted;
      }
    }
    // Reductions over rows without the NaN row.
    th(5) = 1;
    auto t2 = in_space(th);
    sum += ref_ce_row(zr[5], 1, s);
    ++counted;
    o.reduction = loom::loss_reduction::mean;
    CHECK(loom::to_host(loom::cross_entropy(z, t2, o))() == Approx(sum / counted).epsilon(1e-5));
    o.reduction = loom::loss_reduction::sum;
    CHECK(loom::to_host(loom::cross_entropy(z, t2, o))() == Approx(sum).epsilon(1e-5));
    // Gradient of the mean loss, against central differences of the double loss.
    o.reduction = loom::loss_reduction::mean;
    const auto dz = loom::to_host(loom::cross_entropy_backward(z, t2, 1.0, o));
    for (index_t r = 0; r < n; ++r) {
      std::vector<double> row = zr[static_cast<std::size_t>(r)];
      for (index_t k = 0; k < c; ++k) {
        double want = 0;
        if (r != 2) {
          const double keep = row[static_cast<std::size_t>(k)], h = 1e-6;
          row[static_cast<std::size_t>(k)] = keep + h;
          const double up = ref_ce_row(row, th(r), s);
          row[static_cast<std::size_t>(k)] = keep - h;
          const double dn = ref_ce_row(row, th(r), s);
          row[static_cast<std::size_t>(k)] = keep;
          want = (up - dn) / (2 * h) / counted;
        }
        REQUIRE(dz(r, k) == Approx(want).margin(1e-6));
      }
    }
    th(5) = c + 4;
  }
  loom::host_tensor<std::int64_t, 1> short_t({n - 1});
  REQUIRE_THROWS_WITH(loom::cross_entropy(z, in_space(short_t)), Contains("[9, 33]") && Contains("[8]"));
}

TEST_CASE("cross_entropy_with_gradient writes the loss and the logits' gradient in one row kernel, in place too",
          "[nn][loss]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("fused classifier"));
  const index_t n = 7, c = 45;
  auto zh = random_host<float, 2>({n, c}, g, -6, 6);
  loom::host_tensor<std::int64_t, 1> th({n});
  for (index_t r = 0; r < n; ++r) th(r) = static_cast<std::int64_t>(g() % c);
  th(3) = -100;  // ignored: no loss, a zero gradient row
  auto z = in_space(zh);
  auto t = in_space(th);
  for (const bool mean : {true, false})
    for (double s : {0.0, 0.1}) {
      INFO("mean " << mean << " label smoothing " << s);
      loom::cross_entropy_options o;
      o.label_smoothing = s;
      o.reduction = mean ? loom::loss_reduction::mean : loom::loss_reduction::sum;
      // The reference in double: the smoothed target's cross-entropy and
      // (softmax - target) * grad / counted rows.
      const double scale = 0.7;
      double total = 0;
      std::vector<std::vector<double>> want(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(c), 0.0));
      for (index_t r = 0; r < n; ++r) {
        if (r == 3) continue;
        double mx = -inf, sum = 0, mean_z = 0;
        for (index_t k = 0; k < c; ++k) mx = std::max(mx, double(zh(r, k)));
        for (index_t k = 0; k < c; ++k) sum += std::exp(double(zh(r, k)) - mx), mean_z += zh(r, k);
        const double lse = std::log(sum) + mx;
        total += (1 - s) * (lse - zh(r, static_cast<index_t>(th(r)))) + s * (lse - mean_z / double(c));
        for (index_t k = 0; k < c; ++k)
          want[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)] =
              std::exp(double(zh(r, k)) - lse) - (k == th(r) ? 1 - s : 0.0) - s / double(c);
      }
      const double counted = mean ? n - 1 : 1;
      for (auto& row : want)
        for (auto& v : row) v *= scale / counted;
      for (const bool in_place : {false, true}) {
        INFO("in place " << in_place);
        auto d = poisoned<float, 2>({n, c});
        if (in_place) loom::assign(d, z);
        loom::reset_launch_counts();
        const auto loss = loom::cross_entropy_with_gradient(in_place ? d : z, t, d, scale, o);
        const auto l = loom::launches();
        CHECK(l.host + l.device == 3u);  // the count of rows, the row kernel, the mean or sum
        CHECK(loom::to_host(loss)() == Approx(total / counted).epsilon(1e-5));
        check_rows(d, want, 0, 1e-6);
      }
    }
  // A target outside [0, C): NaN loss and a NaN gradient row; dlogits of another shape refused.
  th(5) = c;
  auto bad_t = in_space(th);
  auto d = poisoned<float, 2>({n, c});
  CHECK(std::isnan(loom::to_host(loom::cross_entropy_with_gradient(z, bad_t, d))()));
  const auto dh = loom::to_host(d);
  CHECK(std::isnan(dh(5, 0)));
  CHECK(std::isfinite(dh(4, 0)));
  auto wrong = poisoned<float, 2>({n, c - 1});
  REQUIRE_THROWS_WITH(loom::cross_entropy_with_gradient(z, t, wrong), Contains("[7, 44]") && Contains("[7, 45]"));
}

namespace {
// The cross-entropy of one row in long double (an independent reference for double logits).
long double ref_ce_row_long(const loom::host_tensor<double, 2>& z, index_t r, std::int64_t t, long double s) {
  const index_t c = z.extent(1);
  long double m = -std::numeric_limits<long double>::infinity();
  for (index_t k = 0; k < c; ++k) m = std::max(m, static_cast<long double>(z(r, k)));
  long double sum = 0, mean = 0;
  for (index_t k = 0; k < c; ++k) {
    sum += std::exp(static_cast<long double>(z(r, k)) - m);
    mean += z(r, k);
  }
  mean /= static_cast<long double>(c);
  const long double lse = std::log(sum) + m;
  return (1 - s) * (lse - z(r, static_cast<index_t>(t))) + s * (lse - mean);
}
}  // namespace

TEST_CASE("cross_entropy of double logits computes and returns double losses", "[nn][loss]" LOOM_TEST_TAG) {
  // The issue's example: float64 gives 1.1019428482, a float computation 1.1019428968.
  const loom::host_tensor<double, 2> small_h({1, 3}, {0.1, 0.2, 0.3});
  const loom::host_tensor<std::int64_t, 1> one({1}, {1});
  const auto small_loss = loom::to_host(loom::cross_entropy(in_space(small_h), in_space(one)));
  CHECK(std::is_same_v<decltype(small_loss)::value_type, double>);
  const double small_want = static_cast<double>(ref_ce_row_long(small_h, 0, 1, 0));
  CHECK(small_loss() == Approx(small_want).epsilon(1e-15));
  CHECK(std::fabs(small_loss() - static_cast<double>(static_cast<float>(small_want))) > 1e-9);

  std::mt19937_64 g(loom_test::seed_for("cross entropy double"));
  const index_t n = 257, c = 33;
  const auto zh = random_host<double, 2>({n, c}, g, -5, 5);
  loom::host_tensor<std::int64_t, 1> th({n});
  for (index_t r = 0; r < n; ++r) th(r) = static_cast<std::int64_t>(g() % c);
  th(7) = -100;  // ignored
  const auto z = in_space(zh);
  const auto t = in_space(th);
  for (double s : {0.0, 0.1}) {
    INFO("label smoothing " << s);
    loom::cross_entropy_options o;
    o.label_smoothing = s;
    const auto per = loom::to_host(loom::cross_entropy_per_row(z, t, o));
    CHECK(std::is_same_v<decltype(per)::value_type, double>);
    long double sum = 0;
    for (index_t r = 0; r < n; ++r) {
      const long double want = r == 7 ? 0.0L : ref_ce_row_long(zh, r, th(r), s);
      sum += want;
      if (r == 7) {
        CHECK(per(r) == 0.0);
      } else {
        INFO("row " << r);
        CHECK(per(r) == Approx(static_cast<double>(want)).epsilon(1e-13));
      }
    }
    const auto mean = loom::to_host(loom::cross_entropy(z, t, o));
    CHECK(mean() == Approx(static_cast<double>(sum / (n - 1))).epsilon(1e-13));
    o.reduction = loom::loss_reduction::sum;
    const auto total = loom::to_host(loom::cross_entropy(z, t, o));
    CHECK(total() == Approx(static_cast<double>(sum)).epsilon(1e-13));
  }
  // Float logits keep float losses.
  const auto zf = in_space(random_host<float, 2>({5, 7}, g));
  const loom::host_tensor<std::int64_t, 1> tf({5}, {0, 6, 3, 2, 1});
  CHECK(std::is_same_v<decltype(loom::cross_entropy(zf, in_space(tf)))::value_type, float>);
}

// An [N, 1] output never takes a vector store (a step is 16 bytes, 4 floats)
// and a target broadcast along the row is one element read and repeated, so
// neither needs 16-byte alignment: the passes over the rows keep their 16-byte
// loads on the device. (Until 2026-12-02 both turned the vector form off:
// every row sum into [N, 1] and every cross-entropy pass loaded 4 bytes.)
// The values are checked on both executors, the vector width on the device.
TEST_CASE("row reductions into one column and per-row targets keep the vector form", "[nn][rows][loss]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("row vector forms"));
  const index_t n = 37, c = 1000;
  auto zh = random_host<float, 2>({n, c}, g, -5, 5);
  loom::host_tensor<std::int64_t, 1> th({n});
  for (index_t r = 0; r < n; ++r) th(r) = static_cast<std::int64_t>(g() % c);
  auto z = in_space(zh);
  auto t = in_space(th);
  const auto zr = rows_of(zh);
  const int vec = on_device ? 4 : 1;

  auto s = poisoned<float, 2>({n, 1});
  expect_one_launch([&] { s = row_sum(z * z) + row_max(z); });
  CHECK(loom::last_eval().vector_width == vec);
  check_rows(s, map_rows(zr, [](const std::vector<double>& r) {
    double a = 0, m = -inf;
    for (double v : r) a += v * v, m = std::max(m, v);
    return std::vector<double>{a + m};
  }), 1e-5, 1e-4);

  // Rows at an odd offset are not aligned: the scalar form on both.
  const auto zo = z.view().slice(whole, range(1, none));
  s = row_sum(zo);
  CHECK(loom::last_eval().vector_width == 1);
  check_rows(s, map_rows(zr, [](const std::vector<double>& r) {
    double a = 0;
    for (std::size_t k = 1; k < r.size(); ++k) a += r[k];
    return std::vector<double>{a};
  }), 1e-5, 1e-4);

  for (double sm : {0.0, 0.1}) {
    INFO("label smoothing " << sm);
    loom::cross_entropy_options o;
    o.label_smoothing = sm;
    const auto per_t = loom::cross_entropy_per_row(z, t, o);
    CHECK(loom::last_eval().vector_width == vec);
    const auto per = loom::to_host(per_t);
    for (index_t r = 0; r < n; ++r)
      CHECK(per(r) == Approx(ref_ce_row(zr[static_cast<std::size_t>(r)], th(r), sm)).epsilon(1e-5));
    // The sum's gradient: softmax(z) - the smoothed one-hot target.
    o.reduction = loom::loss_reduction::sum;
    const auto dz_t = loom::cross_entropy_backward(z, t, 1.0, o);
    CHECK(loom::last_eval().vector_width == vec);
    const auto dz = loom::to_host(dz_t);
    for (index_t r = 0; r < n; ++r) {
      const auto p = ref_softmax(zr[static_cast<std::size_t>(r)]);
      for (index_t k = 0; k < c; ++k) {
        const double want = p[static_cast<std::size_t>(k)] - (k == th(r) ? 1 - sm : 0) - sm / static_cast<double>(c);
        REQUIRE(dz(r, k) == Approx(want).margin(1e-6));
      }
    }
  }
}

namespace {
// PyTorch's cross-entropy of one row in double, each term only where its
// weight is not 0 (a masked class makes the smoothing term infinite).
double ref_ce_masked(const std::vector<double>& z, std::int64_t t, double s) {
  double m = -inf;
  for (double v : z) m = std::max(m, v);
  double sum = 0, mean = 0;
  for (double v : z) sum += std::exp(v - m), mean += v;
  mean /= static_cast<double>(z.size());
  const double lse = std::log(sum) + m;
  return (s == 1 ? 0.0 : (1 - s) * (lse - z[static_cast<std::size_t>(t)])) + (s == 0 ? 0.0 : s * (lse - mean));
}
}  // namespace

TEST_CASE("cross_entropy of masked logits is finite, takes strided targets and keeps double gradients double",
          "[nn][loss]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("cross entropy masked"));
  const index_t n = 7, c = 37;
  auto zh = random_host<float, 2>({n, c}, g, -4, 4);
  // Every row masks a few classes (-inf), never its target, except row 3,
  // whose target is masked: its loss is inf.
  loom::host_tensor<std::int64_t, 1> th({n});
  for (index_t r = 0; r < n; ++r) {
    th(r) = static_cast<std::int64_t>(g() % c);
    for (index_t k = 0; k < c; k += 5)
      if (k != th(r)) zh(r, k) = -std::numeric_limits<float>::infinity();
  }
  zh(3, th(3)) = -std::numeric_limits<float>::infinity();
  auto z = in_space(zh);
  auto t = in_space(th);
  const auto zr = rows_of(zh);
  for (double s : {0.0, 0.1, 1.0}) {
    INFO("label smoothing " << s);
    loom::cross_entropy_options o;
    o.label_smoothing = s;
    const auto per = loom::to_host(loom::cross_entropy_per_row(z, t, o));
    for (index_t r = 0; r < n; ++r) {
      INFO("row " << r);
      const double want = ref_ce_masked(zr[static_cast<std::size_t>(r)], th(r), s);
      if (std::isinf(want)) {
        CHECK(per(r) == std::numeric_limits<float>::infinity());
      } else {
        REQUIRE(std::isfinite(want));
        CHECK(per(r) == Approx(want).epsilon(1e-5));
      }
    }
  }
  // Without smoothing, the rows whose target is not masked reduce to a
  // finite mean, and their gradient is finite (0 at the masked classes).
  loom::host_tensor<std::int64_t, 1> tk = th;
  tk(3) = -100;  // ignored
  auto tki = in_space(tk);
  double sum = 0;
  for (index_t r = 0; r < n; ++r)
    if (r != 3) sum += ref_ce_masked(zr[static_cast<std::size_t>(r)], tk(r), 0.0);
  CHECK(loom::to_host(loom::cross_entropy(z, tki))() == Approx(sum / (n - 1)).epsilon(1e-5));
  const auto dz = loom::to_host(loom::cross_entropy_backward(z, tki));
  for (index_t r = 0; r < n; ++r)
    for (index_t k = 0; k < c; ++k) {
      REQUIRE(std::isfinite(dz(r, k)));
      if (k % 5 == 0 && k != tk(r)) CHECK(dz(r, k) == 0.0f);
    }

  // Targets as a strided view (every other element of a longer tensor):
  // the same results as the contiguous targets.
  loom::host_tensor<std::int64_t, 1> wide({2 * n});
  for (index_t r = 0; r < n; ++r) wide(2 * r) = tk(r), wide(2 * r + 1) = 12345;
  auto wd = in_space(wide);
  const auto ts = wd.view().slice(loom::range(0, loom::none, 2));
  CHECK(loom::to_host(loom::cross_entropy(z, ts))() == loom::to_host(loom::cross_entropy(z, tki))());
  // A target out of range (not ignore_index): NaN for its row's gradient,
  // as for its loss; the other rows keep theirs.
  loom::host_tensor<std::int64_t, 1> tb = tk;
  tb(1) = c, tb(4) = -1;
  const auto dzb = loom::to_host(loom::cross_entropy_backward(z, in_space(tb), 1.0,
                                                              {-100, 0.0, loom::loss_reduction::sum}));
  const auto dzk = loom::to_host(loom::cross_entropy_backward(z, tki, 1.0, {-100, 0.0, loom::loss_reduction::sum}));
  for (index_t r = 0; r < n; ++r)
    for (index_t k = 0; k < c; ++k) {
      if (r == 1 || r == 4)
        CHECK(std::isnan(dzb(r, k)));
      else
        CHECK(dzb(r, k) == dzk(r, k));
    }
  const auto dzs = loom::to_host(loom::cross_entropy_backward(z, ts));
  for (index_t r = 0; r < n; ++r)
    for (index_t k = 0; k < c; ++k) CHECK(dzs(r, k) == dz(r, k));

  // Double logits with label smoothing: the gradient (softmax - smoothed
  // one-hot) / rows, to double precision.
  auto zd = random_host<double, 2>({n, c}, g, -3, 3);
  auto zdi = in_space(zd);
  loom::cross_entropy_options o;
  o.label_smoothing = 0.1;
  o.reduction = loom::loss_reduction::sum;
  const auto dd = loom::to_host(loom::cross_entropy_backward(zdi, tki, 1.0, o));
  for (index_t r = 0; r < n; ++r) {
    double m = -inf, se = 0;
    for (index_t k = 0; k < c; ++k) m = std::max(m, zd(r, k));
    for (index_t k = 0; k < c; ++k) se += std::exp(zd(r, k) - m);
    for (index_t k = 0; k < c; ++k) {
      const double want =
          r == 3 ? 0.0 : std::exp(zd(r, k) - m) / se - ((k == tk(r) ? 0.9 : 0.0) + 0.1 / static_cast<double>(c));
      CHECK(dd(r, k) == Approx(want).margin(1e-13));
    }
  }
}

TEST_CASE("cross_entropy_rows takes one target per row as a vector or a column, in a layer and under loom::grad",
          "[nn][loss]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("cross entropy rows targets"));
  // Rows and classes, N == C included (there [N] targets broadcast as a row
  // of [N, C] unless they are read as one class index per row).
  for (const auto& [n, c] : std::initializer_list<std::pair<index_t, index_t>>{{9, 33}, {7, 7}, {1, 3}}) {
    INFO("logits [" << n << ", " << c << "]");
    const auto zh = random_host<float, 2>({n, c}, g, -5, 5);
    loom::host_tensor<std::int64_t, 1> th({n});
    for (index_t r = 0; r < n; ++r) th(r) = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(c));
    if (n > 2) th(1) = -100;  // ignored: loss 0, gradient 0
    // The targets [N] as every other element of a longer tensor (a strided view).
    loom::host_tensor<std::int64_t, 1> wide({2 * n});
    for (index_t r = 0; r < n; ++r) wide(2 * r) = th(r), wide(2 * r + 1) = 12345;
    const auto z = in_space(zh);
    const auto t = in_space(th);
    const auto wd = in_space(wide);
    const auto t_strided = wd.view().slice(loom::range(0, loom::none, 2));
    const auto t_column = t.view().unsqueeze(1);
    const auto zr = rows_of(zh);
    for (double s : {0.0, 0.1}) {
      INFO("label smoothing " << s);
      loom::cross_entropy_options o;
      o.label_smoothing = s;
      std::vector<std::vector<double>> want;
      for (index_t r = 0; r < n; ++r)
        want.push_back({th(r) == -100 ? 0.0 : ref_ce_row(zr[static_cast<std::size_t>(r)], th(r), s)});
      auto y = poisoned<float, 2>({n, 1});
      expect_one_launch([&] { y = loom::cross_entropy_rows(z, t, o); });
      check_rows(y, want, 1e-5, 1e-6);
      y = poisoned<float, 2>({n, 1});
      y = loom::cross_entropy_rows(z, t_strided, o);
      check_rows(y, want, 1e-5, 1e-6);
      y = poisoned<float, 2>({n, 1});
      y = loom::cross_entropy_rows(z, t_column, o);
      check_rows(y, want, 1e-5, 1e-6);
    }
    // In a layer (its parameters are tagged leaves) and differentiated: the
    // gradient of the summed loss is softmax(z) - onehot(target), 0 for the ignored row.
    constexpr auto ce = loom::layer([](auto logits, auto target) { return loom::cross_entropy_rows(logits, target); });
    auto y = poisoned<float, 2>({n, 1});
    y = ce(z, t);
    std::vector<std::vector<double>> want_loss, want_grad;
    for (index_t r = 0; r < n; ++r) {
      const auto& row = zr[static_cast<std::size_t>(r)];
      want_loss.push_back({th(r) == -100 ? 0.0 : ref_ce_row(row, th(r), 0.0)});
      double m = -inf, se = 0;
      for (double v : row) m = std::max(m, v);
      for (double v : row) se += std::exp(v - m);
      std::vector<double> d(row.size(), 0.0);
      if (th(r) != -100)
        for (std::size_t k = 0; k < row.size(); ++k)
          d[k] = std::exp(row[k] - m) / se - (static_cast<std::int64_t>(k) == th(r) ? 1.0 : 0.0);
      want_grad.push_back(d);
    }
    check_rows(y, want_loss, 1e-5, 1e-6);
    loom::host_tensor<float, 2> ones_h({n, 1});
    loom::fill(ones_h, 1.0f);
    const auto ones = in_space(ones_h);
    for (int shape_of_targets = 0; shape_of_targets < 2; ++shape_of_targets) {
      INFO((shape_of_targets ? "targets [N, 1]" : "targets [N]"));
      auto dz = poisoned<float, 2>({n, c});
      if (shape_of_targets == 0)
        dz = loom::grad<0>(ce)(z, t, ones);
      else
        dz = loom::grad<0>(ce)(z, t_column, ones);
      check_rows(dz, want_grad, 1e-5, 1e-6);
    }
  }
  // Targets of any other shape: the message names the shapes it takes.
  const auto z = in_space(random_host<float, 2>({4, 4}, g));
  loom::host_tensor<std::int64_t, 2> square_h({4, 4});
  loom::host_tensor<std::int64_t, 1> short_h({3});
  loom::fill(square_h, std::int64_t{0});
  loom::fill(short_h, std::int64_t{0});
  const auto square = in_space(square_h);
  const auto short_t = in_space(short_h);
  auto y = poisoned<float, 2>({4, 1});
  REQUIRE_THROWS_AS(y = loom::cross_entropy_rows(z, square), loom::shape_error);
  REQUIRE_THROWS_WITH(y = loom::cross_entropy_rows(z, square),
                      Contains("targets of shape [4, 4]") && Contains("[4] or [4, 1]"));
  REQUIRE_THROWS_WITH(y = loom::cross_entropy_rows(z, short_t),
                      Contains("targets of shape [3]") && Contains("[4] or [4, 1]"));
}

namespace {
// A user layer: RMSNorm followed by a SwiGLU gate, in a few lines.
constexpr auto rms_swiglu = loom::layer([](auto x, auto w, auto gate) {
  auto n = x * loom::rsqrt(loom::row_mean(x * x) + 1e-6) * w;
  return loom::silu(gate) * n;
});
}  // namespace

TEST_CASE("a user-written layer fuses into one kernel", "[nn][layer]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("user layer"));
  auto xh = random_host<loom::bf16, 2>({6, 129}, g);
  auto wh = random_host<loom::bf16, 1>({129}, g);
  auto gh = random_host<loom::bf16, 2>({6, 129}, g);
  auto x = in_space(xh);
  auto w = in_space(wh);
  auto gt = in_space(gh);
  auto y = poisoned<loom::bf16, 2>({6, 129});
  expect_one_launch([&] { y = rms_swiglu(x, w, gt); });
  CHECK(loom::last_eval().row_passes == 1);
  const auto xr = rows_of(xh), gr = rows_of(gh);
  const auto wr = rows_of(wh)[0];
  std::vector<std::vector<double>> want;
  for (std::size_t r = 0; r < xr.size(); ++r) {
    auto n = ref_rms_norm(xr[r], wr, 1e-6);
    for (std::size_t c = 0; c < n.size(); ++c) n[c] *= gr[r][c] / (1 + std::exp(-gr[r][c]));
    want.push_back(n);
  }
  check_rows(y, want, 2e-2, 2e-2);
}

namespace {
// A layer whose body uses its arguments 13 times (a and b 5 times, c 3).
constexpr auto reuse_args = loom::layer([](auto a, auto b, auto c) {
  return loom::tanh(a) * loom::sigmoid(b) + loom::relu(a - b) * c - loom::exp(-loom::abs(a)) * c +
         loom::where(a > b, a, b) * c + b;
});
double reuse_args_ref(double a, double b, double c) {
  return std::tanh(a) / (1 + std::exp(-b)) + std::max(a - b, 0.0) * c - std::exp(-std::abs(a)) * c +
         (a > b ? a : b) * c + b;
}

// Checks y against f(i) at every element i (row-major).
template <class F>
void check_elements(const loom::host_tensor<float, 2>& y, F&& f) {
  for (index_t i = 0; i < y.size(); ++i) {
    const double want = f(i);
    CHECK(y.data()[i] == Approx(want).epsilon(1e-5).margin(1e-5));
  }
}

// The device's shared contiguous path run on the host, step by step, as
// contiguous_shared_kernel runs it: the shared tree, the one load per
// parameter, the vector steps and the tail. `same` receives the run-time
// check's answer (the kernel is chosen only when it is true).
template <std::size_t params = 3, int repeated = 3, class E>
loom::host_tensor<float, 2> run_shared_steps(const E& expr, const loom::shape<2>& s, bool& same) {
  namespace d = loom::detail;
  loom::host_tensor<float, 2> y(s);
  for (index_t i = 0; i < y.size(); ++i) y.data()[i] = loom_test::poison_value<float>();
  const auto e = d::as_node(expr);
  d::bind_info bi;
  const auto b = d::binder::bind<0>(e, y.view(), bi);
  using shared = d::shared_params_of<std::remove_const_t<decltype(e)>, std::remove_const_t<decltype(b)>>;
  static_assert(shared::params == params && shared::repeated_count == repeated);
  auto sb = d::param_sharer<typename shared::tags>::share(e, b);
  d::param_loads_t<typename shared::tree, shared::params> loads{};
  same = d::collect_params(sb, loads) >= 0;
  constexpr int w = d::vector_width_of<std::remove_const_t<decltype(e)>, sizeof(float)>;
  static_assert(w == 4);
  const index_t n = y.size(), nv = n / w;
  for (index_t v = 0; v < nv; ++v) d::shared_vector_step<w>(y.data(), sb, loads, v);
  for (index_t t = nv * w; t < n; ++t) y.data()[t] = sb.template at_linear<true>(t);
  return y;
}
}  // namespace

TEST_CASE("a layer's arguments are loaded once per vector step when every use reads the same data", "[nn][layer]"
          LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("layer arguments loaded once"));
  const loom::shape<2> s{5, 37};  // 185 elements: 46 vector steps of 4 floats and a tail of 1
  const auto ah = random_host<float, 2>(s, g), bh = random_host<float, 2>(s, g), ch = random_host<float, 2>(s, g);
  const auto a = in_space(ah), b = in_space(bh), c = in_space(ch);
  const auto ref = [&](index_t i, bool swap) {
    const double x = ah.data()[i], z = bh.data()[i];
    return swap ? reuse_args_ref(z, x, ch.data()[i]) : reuse_args_ref(x, z, ch.data()[i]);
  };
  // The device's contiguous path loads each of a, b and c once per vector
  // step when the uses agree (3 arguments used twice or more); the host's
  // path has no such form (shared_params stays 0).
  const int shared = on_device ? 3 : 0;
  auto y = poisoned<float, 2>(s);

  SECTION("one call") {
    expect_one_launch([&] { y = reuse_args(a, b, c); });
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    CHECK(loom::last_eval().shared_params == shared);
    // 13 uses of 3 arguments: 10 loads again on the host, none when shared.
    CHECK(loom::last_eval().repeated_loads == (on_device ? 0 : 10));
    check_elements(loom::to_host(y), [&](index_t i) { return ref(i, false); });
  }
  SECTION("the same call twice reads the same data: still one load per argument") {
    expect_one_launch([&] { y = reuse_args(a, b, c) * 0.5f + reuse_args(a, b, c); });
    CHECK(loom::last_eval().shared_params == shared);
    CHECK(loom::last_eval().repeated_loads == (on_device ? 0 : 23));
    check_elements(loom::to_host(y), [&](index_t i) { return 1.5 * ref(i, false); });
  }
  SECTION("two calls on different data: one type, two arguments, so every use loads its own") {
    expect_one_launch([&] { y = reuse_args(a, b, c) - reuse_args(b, a, c); });
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    CHECK(loom::last_eval().shared_params == 0);
    CHECK(loom::last_eval().repeated_loads == 23);
    check_elements(loom::to_host(y), [&](index_t i) { return ref(i, false) - ref(i, true); });
  }
  SECTION("an argument broadcast along the rows (a periodic operand)") {
    const loom::shape<2> s2{7, 36};
    const auto a2h = random_host<float, 2>(s2, g), b2h = random_host<float, 2>(s2, g);
    const auto wh = random_host<float, 1>({36}, g);
    const auto a2 = in_space(a2h), b2 = in_space(b2h);
    const auto w = in_space(wh);
    auto y2 = poisoned<float, 2>(s2);
    expect_one_launch([&] { y2 = reuse_args(a2, b2, w); });
    CHECK(loom::last_eval().shared_params == shared);
    CHECK(loom::last_eval().repeated_loads == (on_device ? 0 : 10));
    check_elements(loom::to_host(y2), [&](index_t i) {
      return reuse_args_ref(a2h.data()[i], b2h.data()[i], wh.data()[i % 36]);
    });
    bool same = false;
    const auto hy = run_shared_steps(reuse_args(a2h, b2h, wh), s2, same);
    CHECK(same);
    check_elements(hy, [&](index_t i) { return reuse_args_ref(a2h.data()[i], b2h.data()[i], wh.data()[i % 36]); });
  }
  SECTION("a tensor named twice in a plain expression is loaded per use, and says so") {
    expect_one_launch([&] { y = a * loom::sigmoid(a) + b; });
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    CHECK(loom::last_eval().shared_params == 0);
    CHECK(loom::last_eval().repeated_loads == 1);
    check_elements(loom::to_host(y), [&](index_t i) {
      const double x = ah.data()[i];
      return x / (1 + std::exp(-x)) + bh.data()[i];
    });
    expect_one_launch([&] { y = a * loom::sigmoid(b) + c; });
    CHECK(loom::last_eval().repeated_loads == 0);
    // The same memory through another layout is another operand.
    const loom::shape<2> sq{6, 6};
    const auto qh = random_host<float, 2>(sq, g);
    const auto q = in_space(qh);
    auto yq = poisoned<float, 2>(sq);
    expect_one_launch([&] { yq = q * q.t() + q.t(); });
    CHECK(loom::last_eval().path == loom::eval_path::general);
    CHECK(loom::last_eval().repeated_loads == 1);
    check_elements(loom::to_host(yq), [&](index_t i) {
      const index_t r = i / 6, col = i % 6;
      return static_cast<double>(qh.data()[i]) * qh.data()[col * 6 + r] + qh.data()[col * 6 + r];
    });
  }
  SECTION("the shared kernel's steps, run on the host") {
    bool same = false;
    const auto hy = run_shared_steps(reuse_args(ah, bh, ch), s, same);
    CHECK(same);
    check_elements(hy, [&](index_t i) { return ref(i, false); });
    run_shared_steps(reuse_args(ah, bh, ch) - reuse_args(bh, ah, ch), s, same);
    CHECK_FALSE(same);
    run_shared_steps(reuse_args(ah, bh, ch) + reuse_args(ah, bh, ch), s, same);
    CHECK(same);
  }
}

TEST_CASE("a plain expression loads each repeated tensor or subexpression once per vector step when they agree",
          "[expr][shared]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("plain repeats loaded once"));
  const loom::shape<2> s{7, 36};  // rows of 36 floats: the rank-1 operands are periodic, a multiple of 4
  const auto xh = random_host<float, 2>(s, g), yh = random_host<float, 2>(s, g);
  const auto wh = random_host<float, 1>({36}, g), bh = random_host<float, 1>({36}, g);
  const auto x = in_space(xh), y = in_space(yh);
  const auto w = in_space(wh), b = in_space(bh);
  // The tanh form of gelu written out: its argument five times.
  const auto gelu_tanh = [](const auto& t) {
    return 0.5f * t * (1.f + loom::tanh(0.7978845608f * (t + 0.044715f * t * t * t)));
  };
  const auto gelu_ref = [](double t) { return 0.5 * t * (1 + std::tanh(0.7978845608 * (t + 0.044715 * t * t * t))); };
  const auto affine_ref = [&](const loom::host_tensor<float, 2>& a, index_t i) {
    return static_cast<double>(a.data()[i]) * wh.data()[i % 36] + bh.data()[i % 36];
  };
  auto out = poisoned<float, 2>(s);

  SECTION("a named subexpression used five times is computed once") {
    expect_one_launch([&] { out = gelu_tanh(x * w + b); });
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    // The device loads x, w and b once and computes x * w + b once per
    // vector step; the host's loops load all 15 uses.
    CHECK(loom::last_eval().shared_params == (on_device ? 1 : 0));
    CHECK(loom::last_eval().repeated_loads == (on_device ? 0 : 12));
    check_elements(loom::to_host(out), [&](index_t i) { return gelu_ref(affine_ref(xh, i)); });
  }
  SECTION("one tensor used eight times is loaded once") {
    expect_one_launch([&] {
      out = x * loom::sigmoid(x) * (1.f + loom::tanh(x)) + x * x * x - loom::exp(-loom::abs(x)) * x;
    });
    CHECK(loom::last_eval().shared_params == (on_device ? 1 : 0));
    CHECK(loom::last_eval().repeated_loads == (on_device ? 0 : 7));
    check_elements(loom::to_host(out), [&](index_t i) {
      const double v = xh.data()[i];
      return v / (1 + std::exp(-v)) * (1 + std::tanh(v)) + v * v * v - std::exp(-std::abs(v)) * v;
    });
  }
  SECTION("two tensors of one type used nine times: each loaded once") {
    expect_one_launch([&] {
      out = loom::tanh(x) * loom::sigmoid(y) + loom::relu(x - y) * 0.5f - loom::exp(-loom::abs(x)) + loom::where(x > y, x, y);
    });
    CHECK(loom::last_eval().shared_params == (on_device ? 2 : 0));
    CHECK(loom::last_eval().repeated_loads == (on_device ? 0 : 7));
    check_elements(loom::to_host(out), [&](index_t i) {
      const double u = xh.data()[i], v = yh.data()[i];
      return std::tanh(u) / (1 + std::exp(-v)) + std::max(u - v, 0.0) * 0.5 - std::exp(-std::abs(u)) + (u > v ? u : v);
    });
  }
  SECTION("four tensors of one type: more than the slots of a leaf type, every use loads its own") {
    const auto zh = random_host<float, 2>(s, g), uh = random_host<float, 2>(s, g);
    const auto z = in_space(zh), u = in_space(uh);
    expect_one_launch([&] { out = x * y + z * u + x * y * z * u; });
    CHECK(loom::last_eval().shared_params == 0);
    CHECK(loom::last_eval().repeated_loads == 4);
    check_elements(loom::to_host(out), [&](index_t i) {
      const double a = xh.data()[i], b = yh.data()[i], c = zh.data()[i], d = uh.data()[i];
      return a * b + c * d + a * b * c * d;
    });
  }
  SECTION("two subexpressions of one form on different tensors: one slot each") {
    expect_one_launch([&] { out = gelu_tanh(x * w + b) - gelu_tanh(y * w + b); });
    CHECK(loom::last_eval().path == loom::eval_path::contiguous);
    CHECK(loom::last_eval().shared_params == (on_device ? 2 : 0));
    CHECK(loom::last_eval().repeated_loads == (on_device ? 0 : 26));  // 30 uses of 4 tensors
    check_elements(loom::to_host(out), [&](index_t i) { return gelu_ref(affine_ref(xh, i)) - gelu_ref(affine_ref(yh, i)); });
  }
  SECTION("three subexpressions of one form: more than the slots, every use loads its own") {
    const auto zh = random_host<float, 2>(s, g);
    const auto z = in_space(zh);
    expect_one_launch([&] { out = gelu_tanh(x * w + b) - gelu_tanh(y * w + b) + gelu_tanh(z * w + b); });
    CHECK(loom::last_eval().shared_params == 0);
    CHECK(loom::last_eval().repeated_loads == 40);  // 45 uses of 5 tensors
    check_elements(loom::to_host(out), [&](index_t i) {
      return gelu_ref(affine_ref(xh, i)) - gelu_ref(affine_ref(yh, i)) + gelu_ref(affine_ref(zh, i));
    });
  }
  SECTION("under eight loads a plain expression has no shared kernel") {
    expect_one_launch([&] { out = x * loom::sigmoid(x) + x; });
    CHECK(loom::last_eval().shared_params == 0);
    CHECK(loom::last_eval().repeated_loads == 2);
    check_elements(loom::to_host(out), [&](index_t i) {
      const double v = xh.data()[i];
      return v / (1 + std::exp(-v)) + v;
    });
  }
  SECTION("in place: the output is the repeated tensor") {
    loom::host_tensor<float, 2> zh(s);
    std::copy(xh.data(), xh.data() + xh.size(), zh.data());
    auto z = in_space(zh);
    expect_one_launch([&] { z = gelu_tanh(z * w + b); });
    CHECK(loom::last_eval().shared_params == (on_device ? 1 : 0));
    check_elements(loom::to_host(z), [&](index_t i) { return gelu_ref(affine_ref(xh, i)); });
  }
  SECTION("the shared kernel's steps, run on the host") {
    bool same = false;
    const auto hy = run_shared_steps<1, 1>(gelu_tanh(xh * wh + bh), s, same);
    CHECK(same);
    check_elements(hy, [&](index_t i) { return gelu_ref(affine_ref(xh, i)); });
    // One tensor: the leaf is the parameter.
    const auto hv = run_shared_steps<1, 1>(xh * loom::sigmoid(xh) * (1.f + loom::tanh(xh)) + xh * xh * xh -
                                               loom::exp(-loom::abs(xh)) * xh,
                                           s, same);
    CHECK(same);
    check_elements(hv, [&](index_t i) {
      const double v = xh.data()[i];
      return v / (1 + std::exp(-v)) * (1 + std::tanh(v)) + v * v * v - std::exp(-std::abs(v)) * v;
    });
    const auto h2t = run_shared_steps<1, 1>(gelu_tanh(xh * wh + bh) - gelu_tanh(yh * wh + bh), s, same);
    CHECK(same);
    check_elements(h2t, [&](index_t i) { return gelu_ref(affine_ref(xh, i)) - gelu_ref(affine_ref(yh, i)); });
    run_shared_steps<2, 2>(gelu_tanh(xh * wh + bh) - gelu_tanh(yh * wh + bh) + gelu_tanh(wh * xh + bh), s, same);
    CHECK(same);  // w * x + b is another form (another type): a parameter of its own
    run_shared_steps<1, 1>(gelu_tanh(xh * wh + bh) - gelu_tanh(yh * wh + bh) + gelu_tanh(xh * wh + wh), s, same);
    CHECK_FALSE(same);  // three values of one form
    // Two tensors of one leaf type: two of its three slots, each use
    // reading its tensor's.
    const auto h2 = run_shared_steps<1, 1>(
        loom::tanh(xh) * loom::sigmoid(yh) + loom::relu(xh - yh) * 0.5f - loom::exp(-loom::abs(xh)) +
            loom::where(xh > yh, xh, yh),
        s, same);
    CHECK(same);
    check_elements(h2, [&](index_t i) {
      const double u = xh.data()[i], v = yh.data()[i];
      return std::tanh(u) / (1 + std::exp(-v)) + std::max(u - v, 0.0) * 0.5 - std::exp(-std::abs(u)) + (u > v ? u : v);
    });
    // Subtrees with scalars inside (x * 2 + b, x * 3 + b: one type, other
    // values) are not parameters; the tensors under them are.
    const auto hs = run_shared_steps<2, 2>((xh * 2.f + bh) * (xh * 3.f + bh) + xh * xh * bh + xh, s, same);
    CHECK(same);
    check_elements(hs, [&](index_t i) {
      const double v = xh.data()[i], c = bh.data()[i % 36];
      return (v * 2 + c) * (v * 3 + c) + v * v * c + v;
    });
  }
}

namespace {
// Runs expression expr (host operands) through the device's shared
// contiguous form on the host, with the plain expression's parameters
// taken whatever the tree's size (plain_sharing, without the 8-load
// threshold), and compares each element with loom's host executor.
// Returns collect_params's answer: -1 when the operands do not fit the
// slots (nothing compared), else the values used twice or more.
template <class E>
int shared_steps_match_host(const E& expr, const loom::shape<2>& s) {
  namespace d = loom::detail;
  loom::host_tensor<float, 2> want(s), got(s);
  for (index_t i = 0; i < got.size(); ++i) got.data()[i] = loom_test::poison_value<float>();
  want = expr;
  const auto e = d::as_node(expr);
  d::bind_info bi;
  const auto b = d::binder::bind<0>(e, got.view(), bi);
  using groups = typename d::plain_sharing<std::remove_const_t<decltype(e)>, std::remove_const_t<decltype(b)>>::type;
  static_assert(groups::size > 0, "the tree repeats a leaf type or a subtree");
  auto sb = d::param_sharer<groups>::share(e, b);
  d::param_loads_t<decltype(sb), groups::size> loads{};
  const int shared = d::collect_params(sb, loads);
  if (shared < 0) return shared;
  constexpr int w = d::vector_width_of<std::remove_const_t<decltype(e)>, sizeof(float)>;
  const index_t n = got.size(), nv = n / w;
  for (index_t v = 0; v < nv; ++v) d::shared_vector_step<w>(got.data(), sb, loads, v);
  for (index_t t = nv * w; t < n; ++t) got.data()[t] = sb.template at_linear<true>(t);
  for (index_t i = 0; i < n; ++i) CHECK(got.data()[i] == Approx(want.data()[i]).epsilon(1e-6).margin(1e-6));
  return shared;
}

// Three tree shapes over four operands, as a user writes them: repeated
// tensors, and a named subexpression used four times.
struct deep_tree {
  template <class A, class B, class C, class D>
  auto operator()(const A& a, const B& b, const C& c, const D& d) const {
    return ((a + b) * (c - d) + a * d) / (1.f + loom::abs(b * c));
  }
};
struct activation_tree {
  template <class A, class B, class C, class D>
  auto operator()(const A& a, const B& b, const C& c, const D& d) const {
    return loom::tanh(a) * loom::sigmoid(b) + loom::relu(a - b) * c - loom::exp(-loom::abs(a)) * c +
           loom::where(a > b, a, b) * d;
  }
};
struct subexpression_tree {
  template <class A, class B, class C, class D>
  auto operator()(const A& a, const B& b, const C& c, const D& d) const {
    const auto t = a * b + c;
    return t * t - t / (1.f + loom::abs(t)) + d;
  }
};
}  // namespace

TEMPLATE_TEST_CASE("the shared kernel's steps agree with the host executor for every pattern of repeated operands",
                   "[expr][shared]" LOOM_TEST_TAG, float, loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("shared steps, operand patterns"));
  const loom::shape<2> s{5, 41};  // 205 elements: vector steps and a tail, for 4 and for 8 elements per step
  const auto x = random_host<T, 2>(s, g), y = random_host<T, 2>(s, g), z = random_host<T, 2>(s, g),
             u = random_host<T, 2>(s, g);
  // Each tree with its four operands drawn from 1, 2, 3 or 4 distinct
  // tensors of one type. The leaves of one type fill up to 3 slots. A
  // repeated subtree of maps over leaves is one parameter with 2 slots:
  // deep_tree's a * d and b * c have one type and fill one or two;
  // subexpression_tree's copies of t are one value.
  SECTION("one tensor") {
    CHECK(shared_steps_match_host(deep_tree{}(x, x, x, x), s) == 2);  // x, and x * x
    CHECK(shared_steps_match_host(activation_tree{}(x, x, x, x), s) == 1);
    CHECK(shared_steps_match_host(subexpression_tree{}(x, x, x, x), s) == 1);  // t (d is used once)
  }
  SECTION("two tensors") {
    CHECK(shared_steps_match_host(deep_tree{}(x, x, y, y), s) == 3);  // x, y, and x * y
    CHECK(shared_steps_match_host(deep_tree{}(x, y, x, y), s) == 2);  // x and y; x * y and y * x once each
    CHECK(shared_steps_match_host(activation_tree{}(y, x, x, y), s) == 2);
    CHECK(shared_steps_match_host(subexpression_tree{}(x, y, x, y), s) == 1);
  }
  SECTION("three tensors") {
    CHECK(shared_steps_match_host(deep_tree{}(x, y, z, x), s) == 1);  // x twice; x * x, y * z, y, z once
    CHECK(shared_steps_match_host(activation_tree{}(z, y, x, x), s) == 3);
    CHECK(shared_steps_match_host(subexpression_tree{}(x, y, z, x), s) == 1);
  }
  SECTION("four tensors: more than a leaf type's slots") {
    CHECK(shared_steps_match_host(deep_tree{}(x, y, z, u), s) == -1);
    CHECK(shared_steps_match_host(activation_tree{}(x, y, z, u), s) == -1);
    CHECK(shared_steps_match_host(subexpression_tree{}(x, y, z, u), s) == 1);
  }
}

namespace {
// Bitwise equality of two tensors of one shape.
template <class T, std::size_t R>
bool same_bits(const loom::tensor<T, R, space_t>& a, const loom::tensor<T, R, space_t>& b) {
  const auto ha = loom::to_host(a), hb = loom::to_host(b);
  return ha.extents() == hb.extents() &&
         std::memcmp(ha.data(), hb.data(), static_cast<std::size_t>(ha.size()) * sizeof(T)) == 0;
}
}  // namespace

TEMPLATE_TEST_CASE("weight and bias gradients of the norms are column sums in double", "[nn][backward]" LOOM_TEST_TAG,
                   float, double) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("norm weight grads"));
  struct size_case {
    index_t n, cols;
  };
  // Several blocks of rows (with a short last block), warp-per-row and
  // block-per-row rows (2049 columns), and (device only: the host has no
  // shared memory path to leave) rows too long for shared memory.
  const size_case cases[] = {{37, 1},   {37, 7},    {37, 33},  {37, 300}, {9, 2049},
                             {1000, 1}, {1000, 33}, {4099, 7}, {2, 40000}};
  for (const auto& sc : cases) {
    const index_t n = sc.n, cols = sc.cols;
    if (!on_device && cols > 8192) continue;
    INFO("n " << n << ", cols " << cols);
    auto xh = random_host<T, 2>({n, cols}, g);
    auto dyh = random_host<T, 2>({n, cols}, g);
    auto wh = random_host<T, 1>({cols}, g, 0.5, 2);
    auto x = in_space(xh);
    auto dy = in_space(dyh);
    auto w = in_space(wh);
    const auto xr = rows_of(xh), dr = rows_of(dyh);
    std::vector<double> dw(static_cast<std::size_t>(cols), 0.0), db(static_cast<std::size_t>(cols), 0.0),
        dw_rms(static_cast<std::size_t>(cols), 0.0);
    for (std::size_t r = 0; r < xr.size(); ++r) {
      double mean = 0, var = 0, ms = 0;
      for (double v : xr[r]) mean += v, ms += v * v;
      mean /= static_cast<double>(cols);
      ms /= static_cast<double>(cols);
      for (double v : xr[r]) var += (v - mean) * (v - mean);
      var /= static_cast<double>(cols);
      for (std::size_t k = 0; k < xr[r].size(); ++k) {
        dw[k] += dr[r][k] * (xr[r][k] - mean) / std::sqrt(var + 1e-5);
        db[k] += dr[r][k];
        dw_rms[k] += dr[r][k] * xr[r][k] / std::sqrt(ms + 1e-6);
      }
    }
    // How the rows were split: fixed blocks of consecutive rows, each
    // writing one partial row; several blocks for the larger n.
    auto check_plan = [&](const loom::column_sums_info& info, int passes) {
      CHECK(info.kernels == 2);
      CHECK(info.rows.row_passes == passes);
      // x and dy are read by every pass: the device caches both rows when
      // they fit (not the 40000-column rows); the host reads them in place.
      CHECK(info.rows.cached_rows == (on_device && cols <= 2049 ? 2 : 0));
      REQUIRE(info.blocks >= 1);
      CHECK(info.blocks * info.rows_per_block >= n);
      CHECK((info.blocks - 1) * info.rows_per_block < n);
      if (n >= 1000) CHECK(info.blocks > 1);
      if (on_device) CHECK(info.rows.threads_per_row == (cols > 2048 ? 256 : 32));
      if (!on_device)
        CHECK(info.partials == loom::column_partials::host);
      else
        CHECK(info.partials == (cols > 8192 ? loom::column_partials::global_memory : loom::column_partials::shared_memory));
    };
    const double rel = std::is_same_v<T, float> ? 2e-4 : 1e-10;
    const auto before = loom::launches();
    auto ln = loom::layer_norm_backward(x, w, dy, 1e-5);
    const auto after = loom::launches();
    CHECK((on_device ? after.device - before.device : after.host - before.host) == 2);
    check_plan(loom::last_column_sums(), 4);  // mean and sum(dy * w), correction, variance, sum(dy * w * xhat)
    const loom::column_sums_info ln_plan = loom::last_column_sums();
    check_rows(ln.dweight, {dw}, rel, rel);
    check_rows(ln.dbias, {db}, rel, rel);
    // dx agrees with the one-kernel input gradient.
    auto dx1 = poisoned<T, 2>({n, cols});
    dx1 = loom::layer_norm_backward_input(x, w, dy, 1e-5);
    check_rows(ln.dx, rows_of(loom::to_host(dx1)), rel, rel);
    // Deterministic: the same bits again.
    auto ln2 = loom::layer_norm_backward(x, w, dy, 1e-5);
    CHECK(same_bits(ln.dx, ln2.dx));
    CHECK(same_bits(ln.dweight, ln2.dweight));
    CHECK(same_bits(ln.dbias, ln2.dbias));
    const auto before_rms = loom::launches();
    auto rms = loom::rms_norm_backward(x, w, dy, 1e-6);
    const auto after_rms = loom::launches();
    CHECK((on_device ? after_rms.device - before_rms.device : after_rms.host - before_rms.host) == 2);
    check_plan(loom::last_column_sums(), 1);  // mean(x * x) and sum(dy * w * x) in one pass
    check_rows(rms.dweight, {dw_rms}, rel, rel);
    dx1 = loom::rms_norm_backward_input(x, w, dy, 1e-6);
    check_rows(rms.dx, rows_of(loom::to_host(dx1)), rel, rel);
    auto rms2 = loom::rms_norm_backward(x, w, dy, 1e-6);
    CHECK(same_bits(rms.dx, rms2.dx));
    CHECK(same_bits(rms.dweight, rms2.dweight));
    // The row cache changes only where the passes read: the same bits without it.
    {
      auto& budget = loom::detail::rows::row_cache_budget();
      const std::size_t saved = budget;
      budget = 0;
      auto ln0 = loom::layer_norm_backward(x, w, dy, 1e-5);
      const int cached_off = loom::last_column_sums().rows.cached_rows;
      // The same split into partial rows: the cache's shared memory must not
      // change how many blocks the device's occupancy gives.
      CHECK(loom::last_column_sums().blocks == ln_plan.blocks);
      CHECK(loom::last_column_sums().rows_per_block == ln_plan.rows_per_block);
      CHECK(loom::last_column_sums().rows.vector_width == ln_plan.rows.vector_width);
      auto rms0 = loom::rms_norm_backward(x, w, dy, 1e-6);
      budget = saved;
      CHECK(cached_off == 0);
      CHECK(same_bits(ln.dx, ln0.dx));
      CHECK(same_bits(ln.dweight, ln0.dweight));
      CHECK(same_bits(ln.dbias, ln0.dbias));
      CHECK(same_bits(rms.dx, rms0.dx));
      CHECK(same_bits(rms.dweight, rms0.dweight));
    }
  }
  // No rows: zero gradients for the weights, one kernel (the second pass).
  {
    auto x = in_space(random_host<T, 2>({0, 5}, g));
    auto w = in_space(random_host<T, 1>({5}, g));
    auto ln = loom::layer_norm_backward(x, w, x, 1e-5);
    CHECK(loom::last_column_sums().kernels == 1);
    check_rows(ln.dweight, {std::vector<double>(5, 0.0)}, 0, 0);
    check_rows(ln.dbias, {std::vector<double>(5, 0.0)}, 0, 0);
  }
  auto x = in_space(random_host<T, 2>({3, 4}, g));
  auto dy = in_space(random_host<T, 2>({3, 5}, g));
  auto w = in_space(random_host<T, 1>({4}, g));
  REQUIRE_THROWS_WITH(loom::rms_norm_backward(x, w, dy), Contains("[3, 4]") && Contains("[3, 5]"));
}

TEST_CASE("the norms' column sums split the rows the same way with the row cache off and on", "[nn][backward]"
          LOOM_TEST_TAG) {
  // 8192 x 2048 floats: on the device 3 warps per block, each with its
  // [2, 2048] float accumulators (48 KiB in all: the kernel's shared memory
  // limit must be raised, first here with the cache off), and, on an H200,
  // fewer blocks per SM once the cache's rows are added: the split into
  // partial rows must not follow the cache.
  // (The host's split never depends on the cache: fewer rows there, to keep
  // the sanitized host run short.)
  std::mt19937_64 g(loom_test::seed_for("column sums cache split"));
  const index_t n = on_device ? 8192 : 1031, cols = 2048;
  auto x = in_space(random_host<float, 2>({n, cols}, g));
  auto dy = in_space(random_host<float, 2>({n, cols}, g));
  auto w = in_space(random_host<float, 1>({cols}, g, 0.5, 2));
  auto& budget = loom::detail::rows::row_cache_budget();
  const std::size_t saved = budget;
  budget = 0;
  const auto off = loom::layer_norm_backward(x, w, dy, 1e-5);
  const loom::column_sums_info plan_off = loom::last_column_sums();
  budget = saved;
  const auto on = loom::layer_norm_backward(x, w, dy, 1e-5);
  const loom::column_sums_info plan_on = loom::last_column_sums();
  CHECK(plan_off.rows.cached_rows == 0);
  CHECK(plan_on.blocks == plan_off.blocks);
  CHECK(plan_on.rows_per_block == plan_off.rows_per_block);
  CHECK(plan_on.rows.vector_width == plan_off.rows.vector_width);
  CHECK(same_bits(on.dx, off.dx));
  CHECK(same_bits(on.dweight, off.dweight));
  CHECK(same_bits(on.dbias, off.dbias));
  // And against a double reference of dbias (the column sums of dy: up to
  // 8192 terms of at most 3 in float, so an absolute bound of 1e-2).
  const auto dyh = loom::to_host(dy);
  std::vector<double> db(static_cast<std::size_t>(cols), 0.0);
  for (index_t r = 0; r < n; ++r)
    for (index_t c = 0; c < cols; ++c) db[static_cast<std::size_t>(c)] += dyh(r, c);
  check_rows(on.dbias, {db}, 1e-4, 1e-2);
}

TEMPLATE_TEST_CASE("add_rms_norm writes the residual sum and the normalized rows in one kernel",
                   "[nn][norm]" LOOM_TEST_TAG, float, loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("add rms norm"));
  for (index_t cols : {1, 33, 1024, 4100}) {
    INFO("cols " << cols);
    auto xh = random_host<T, 2>({6, cols}, g);
    auto rh = random_host<T, 2>({6, cols}, g);
    auto wh = random_host<T, 1>({cols}, g, 0.5, 2);
    auto x = in_space(xh);
    auto r = in_space(rh);
    auto w = in_space(wh);
    auto y = poisoned<T, 2>({6, cols});
    auto h = poisoned<T, 2>({6, cols});
    expect_one_launch([&] { loom::add_rms_norm(y, h, x, r, w, 1e-6); });
    CHECK(loom::last_eval().row_passes == 1);
    const auto xr = rows_of(xh), rr = rows_of(rh);
    const auto wr = rows_of(wh)[0];
    std::vector<std::vector<double>> sums, want;
    for (std::size_t k = 0; k < xr.size(); ++k) {
      std::vector<double> s;
      for (std::size_t c = 0; c < xr[k].size(); ++c) s.push_back(xr[k][c] + rr[k][c]);
      sums.push_back(s);
      want.push_back(ref_rms_norm(s, wr, 1e-6));
    }
    check_rows(h, sums, tol<T>(), tol<T>());
    check_rows(y, want, tol<T>() * 2, tol<T>() * 4);
  }
  auto a = in_space(random_host<float, 2>({3, 8}, g));
  auto b = in_space(random_host<float, 2>({3, 8}, g));
  auto w = in_space(random_host<float, 1>({8}, g));
  REQUIRE_THROWS_WITH(loom::add_rms_norm(a.slice(whole, range(0, 6)), a.slice(whole, range(2, 8)), a, b, w),
                      Contains("overlap"));
  auto y = poisoned<float, 2>({3, 7});
  REQUIRE_THROWS_WITH(loom::add_rms_norm(y, b, a, b, w), Contains("[3, 8]") && Contains("[3, 7]"));
}

TEST_CASE("long rows stay correct up to 2^20 columns", "[nn][rows]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("long rows"));
  for (index_t cols : {index_t{65537}, (index_t{1} << 20) + 3}) {
    INFO("cols " << cols);
    auto xh = random_host<float, 2>({2, cols}, g, -10, 10);
    auto x = in_space(xh);
    auto y = poisoned<float, 2>({2, cols});
    expect_one_launch([&] { y = loom::softmax(x); });
    if (on_device) CHECK(loom::last_eval().threads_per_row == 256);
    check_rows(y, map_rows(rows_of(xh), ref_softmax), 1e-4, 1e-9);
    auto s = poisoned<float, 2>({2, 1});
    s = loom::row_sum(x);
    check_rows(s, map_rows(rows_of(xh), [](const std::vector<double>& r) {
      double a = 0;
      for (double v : r) a += v;
      return std::vector<double>{a};
    }), 1e-5, 1e-2);
  }
}
#endif
