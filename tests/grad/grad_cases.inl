// SPDX-License-Identifier: Apache-2.0
// loom::grad on both executors: every derivative rule against central finite
// differences of the forward in double, the derived backward of the layers
// against loom's built-in backward passes, kernel counts, and errors. The
// including file defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include <loom/grad/grad.hpp>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using space_t = LOOM_TEST_SPACE;

// LOOM_GRAD_PART (0 to 1) compiles one part of the cases (all without it),
// so the parts of a test program compile side by side; the helpers
// that only the other parts use are then unused here.
#if defined(LOOM_GRAD_PART)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
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
loom::host_tensor<T, R> on_host(const loom::tensor<T, R, space_t>& t) {
  if constexpr (on_device)
    return loom::to_host(t);
  else
    return t;
}
template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g, double lo, double hi) {
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
// The bytes of a contiguous tensor, for bitwise comparisons.
template <class T, std::size_t R>
std::vector<unsigned char> bytes_of(const loom::tensor<T, R, space_t>& t) {
  const auto h = on_host(t);
  std::vector<unsigned char> b(static_cast<std::size_t>(h.size()) * sizeof(T));
  std::memcpy(b.data(), h.data(), b.size());
  return b;
}
template <class T, std::size_t R>
loom::host_tensor<double, R> to_double(const loom::host_tensor<T, R>& t) {
  loom::host_tensor<double, R> d(t.extents());
  for (index_t i = 0; i < t.size(); ++i) d.data()[i] = loom_test::as_double(t.data()[t.view().offset_of(i)]);
  return d;
}

// sum(dy * layer(args...)) in double on the host executor.
template <class L, class D, class... A>
double loss(const L& lay, const D& dy, const A&... args) {
  const auto y = loom::materialize(lay(args...));
  double s = 0;
  for (index_t i = 0; i < y.size(); ++i) s += dy.data()[i] * y.data()[i];
  return s;
}

// Central finite differences of the loss with respect to argument K (a host
// tensor of double), element by element.
template <std::size_t K, class L, class D, class... A>
std::vector<double> finite_differences(const L& lay, const D& dy, A... args) {
  auto all = std::make_tuple(args...);
  auto& t = std::get<K>(all);
  std::vector<double> g(static_cast<std::size_t>(t.size()));
  for (index_t i = 0; i < t.size(); ++i) {
    const double x0 = t.data()[i], h = 1e-6 * std::max(1.0, std::fabs(x0));
    t.data()[i] = x0 + h;
    const double up = std::apply([&](const auto&... a) { return loss(lay, dy, a...); }, all);
    t.data()[i] = x0 - h;
    const double down = std::apply([&](const auto&... a) { return loss(lay, dy, a...); }, all);
    t.data()[i] = x0;
    g[static_cast<std::size_t>(i)] = (up - down) / (2 * h);
  }
  return g;
}

template <class T, std::size_t R>
void check_close(const loom::host_tensor<T, R>& got, const std::vector<double>& want, double tol) {
  REQUIRE(static_cast<std::size_t>(got.size()) == want.size());
  for (index_t i = 0; i < got.size(); ++i) {
    const double g = loom_test::as_double(got.data()[i]), w = want[static_cast<std::size_t>(i)];
    INFO("element " << i << ": got " << g << ", want " << w);
    REQUIRE(std::fabs(g - w) <= tol * (1 + std::fabs(w)));
  }
}
template <class T, class U, std::size_t R>
void check_close(const loom::host_tensor<T, R>& got, const loom::host_tensor<U, R>& want, double tol) {
  REQUIRE(got.extents() == want.extents());
  std::vector<double> w(static_cast<std::size_t>(want.size()));
  for (index_t i = 0; i < want.size(); ++i) w[static_cast<std::size_t>(i)] = loom_test::as_double(want.data()[i]);
  check_close(got, w, tol);
}

// grad<0> of a one-input layer at x (host double), on space_t, against
// finite differences.
template <class L>
void check_unary(const L& lay, const loom::host_tensor<double, 2>& x, std::mt19937_64& g) {
  const auto dy = random_host<double, 2>(x.extents(), g, -1, 1);
  const auto want = finite_differences<0>(lay, dy, x);
  auto dx = poisoned<double, 2>(x.extents());
  dx = loom::grad<0>(lay)(in_space(x), in_space(dy));
  CHECK(loom::last_grad().kernels == 1);
  check_close(on_host(dx), want, 1e-6);
}
}  // namespace

#if !defined(LOOM_GRAD_PART) || LOOM_GRAD_PART == 0
TEST_CASE("grad: the derivative rules of the math functions match finite differences " LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad math"));
  const auto pos = random_host<double, 2>(loom::shape<2>{3, 7}, g, 0.3, 2.5);
  const auto any = random_host<double, 2>(loom::shape<2>{3, 7}, g, -2.5, 2.5);
#if LOOM_GRAD_ONE_LAYER_PER_TEST
  // Every rule in one layer: each layer is kernels to compile, and the rules'
  // device code is what this executor adds (the host test has one per line).
  (void)any;
  check_unary(loom::layer([](auto x) {
                return exp(x) + log(x) + log1p(x) + log2(x) + exp2(x) + sqrt(x) * rsqrt(x + 1.0) + sin(x) * cos(x) +
                       tanh(x) + erf(x) * x - x / (x * x + 1.0) + pow(x, 2.5) + pow(1.5, x) + pow(x, x);
              }),
              pos, g);
#else
  check_unary(loom::layer([](auto x) { return exp(x) + log(x) + log1p(x) + log2(x) + exp2(x); }), pos, g);
  check_unary(loom::layer([](auto x) { return sqrt(x) * rsqrt(x + 1.0) + sin(x) * cos(x); }), pos, g);
  check_unary(loom::layer([](auto x) { return tanh(x) + erf(x) * x - x / (x * x + 1.0); }), any, g);
  check_unary(loom::layer([](auto x) { return pow(x, 2.5) + pow(1.5, x) + pow(x, x); }), pos, g);
#endif
}

TEST_CASE("grad: the derivative rules of the activations match finite differences " LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad activations"));
  auto x = random_host<double, 2>(loom::shape<2>{5, 9}, g, -3, 3);
  for (index_t i = 0; i < x.size(); ++i)  // away from the kinks at 0
    if (std::fabs(x.data()[i]) < 0.05) x.data()[i] += 0.1;
#if LOOM_GRAD_ONE_LAYER_PER_TEST
  check_unary(loom::layer([](auto v) {
                return relu(v) + leaky_relu(v, 0.2) + abs(v) * 0.5 + gelu(v) + gelu(v, loom::approximate::tanh) * 2.0 +
                       sigmoid(v) + silu(v) + softplus(v, 2.0, 3.0) + mish(v) + where(v > 0.5, v * v, sin(v)) +
                       clamp(v, -1.0, 1.5) - floor(v) + minimum(v, 0.25) + maximum(v * 2.0, v) + -v;
              }),
              x, g);
#else
  check_unary(loom::layer([](auto v) { return relu(v) + leaky_relu(v, 0.2) + abs(v) * 0.5; }), x, g);
  check_unary(loom::layer([](auto v) { return gelu(v) + gelu(v, loom::approximate::tanh) * 2.0; }), x, g);
  check_unary(loom::layer([](auto v) { return sigmoid(v) + silu(v) + softplus(v, 2.0, 3.0) + mish(v); }), x, g);
  check_unary(loom::layer([](auto v) { return where(v > 0.5, v * v, sin(v)) + clamp(v, -1.0, 1.5) - floor(v); }), x,
              g);
  check_unary(loom::layer([](auto v) { return minimum(v, 0.25) + maximum(v * 2.0, v) + -v; }), x, g);
#endif
}

TEST_CASE("grad: binary ops, broadcast weights and scalar parameters match finite differences " LOOM_TEST_TAG,
          "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad binary"));
  const index_t n = 6, c = 11;
  const auto x = random_host<double, 2>(loom::shape<2>{n, c}, g, 0.5, 2);
  const auto w = random_host<double, 1>(loom::shape<1>{c}, g, 0.5, 2);
  const auto r = random_host<double, 2>(loom::shape<2>{n, 1}, g, 0.5, 2);
  const auto s = random_host<double, 0>(loom::shape<0>{}, g, 0.5, 2);
  const auto dy = random_host<double, 2>(x.extents(), g, -1, 1);
  constexpr auto lay = loom::layer([](auto x, auto w, auto r, auto s) {
    return (x * w - r) / (w + s) + x % (w + 3.0) + cast<double>(x * s);
  });
  auto dx = poisoned<double, 2>(x.extents());
  auto dw = poisoned<double, 1>(w.extents());
  auto dr = poisoned<double, 2>(r.extents());
  auto ds = poisoned<double, 0>(s.extents());
  const auto info = loom::grad(lay)(in_space(x), in_space(w), in_space(r), in_space(s), in_space(dy)).into(dx, dw, dr, ds);
  // dx, dr (its row sums) and dw's column sums share a row kernel, then the
  // kernel adding the column sums; the whole sum of ds takes three (its
  // column sums, their row sums and their sum).
  CHECK(info.column_sum_groups == 2);
  CHECK(info.kernels == 2 + 3);
  check_close(on_host(dx), finite_differences<0>(lay, dy, x, w, r, s), 1e-5);
  check_close(on_host(dw), finite_differences<1>(lay, dy, x, w, r, s), 1e-5);
  check_close(on_host(dr), finite_differences<2>(lay, dy, x, w, r, s), 1e-5);
  check_close(on_host(ds), finite_differences<3>(lay, dy, x, w, r, s), 1e-5);
}

TEST_CASE("grad: an input of lower rank broadcast along leading axes ([T, C] under [B, T, C]) sums over them "
          LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad axis sums"));
  const index_t b = 3, t = 5, c = 7;
  const auto x = random_host<double, 3>(loom::shape<3>{b, t, c}, g, -2, 2);
  const auto pos = random_host<double, 2>(loom::shape<2>{t, c}, g, -1, 1);
  const auto dy = random_host<double, 3>(x.extents(), g, -1, 1);
  SECTION("a position embedding under a row layer (the adjoint has row reductions)") {
    constexpr auto lay = loom::layer([](auto x, auto p) {
      auto h = x + p;
      return h * loom::rsqrt(loom::row_mean(h * h) + 1e-5) + p * p;
    });
    const auto want_dx = finite_differences<0>(lay, dy, x, pos);
    const auto want_dp = finite_differences<1>(lay, dy, x, pos);
    auto dp = poisoned<double, 2>(pos.extents());
    dp = loom::grad<1>(lay)(in_space(x), in_space(pos), in_space(dy));
    // The adjoint in full (1), its sums over the batch (1, or 2 where the
    // device splits them), the conversion into dp (1).
    CHECK(loom::last_grad().kernels >= 3);
    if (!on_device) CHECK(loom::last_grad().kernels == 3);
    check_close(on_host(dp), want_dp, 1e-5);
    // With dx: dx in the shared row kernel, dp in its own kernels.
    auto dx = poisoned<double, 3>(x.extents());
    dp = poisoned<double, 2>(pos.extents());
    const auto info = loom::grad(lay)(in_space(x), in_space(pos), in_space(dy)).into(dx, dp);
    if (!on_device) CHECK(info.kernels == 1 + 3);
    check_close(on_host(dx), want_dx, 1e-5);
    check_close(on_host(dp), want_dp, 1e-5);
  }
  SECTION("an elementwise layer, and an input [T, 1] broadcast along the rows too") {
    constexpr auto lay = loom::layer([](auto x, auto p, auto s) { return loom::sin(x * p) + x * s * s; });
    const auto s = random_host<double, 2>(loom::shape<2>{t, 1}, g, -1, 1);
    auto dp = poisoned<double, 2>(pos.extents());
    auto ds = poisoned<double, 2>(s.extents());
    const auto info = loom::grad<1, 2>(lay)(in_space(x), in_space(pos), in_space(s), in_space(dy)).into(dp, ds);
    if (!on_device) CHECK(info.kernels == 3 + 3);
    check_close(on_host(dp), finite_differences<1>(lay, dy, x, pos, s), 1e-5);
    check_close(on_host(ds), finite_differences<2>(lay, dy, x, pos, s), 1e-5);
  }
  SECTION("the same bits run to run") {
    constexpr auto lay = loom::layer([](auto x, auto p) { return loom::tanh(x + p); });
    auto d1 = poisoned<double, 2>(pos.extents());
    auto d2 = poisoned<double, 2>(pos.extents());
    d1 = loom::grad<1>(lay)(in_space(x), in_space(pos), in_space(dy));
    d2 = loom::grad<1>(lay)(in_space(x), in_space(pos), in_space(dy));
    CHECK(bytes_of(d1) == bytes_of(d2));
    check_close(on_host(d1), finite_differences<1>(lay, dy, x, pos), 1e-5);
  }
}

TEST_CASE("grad: the shared kernel takes column and whole sums, with or without the row output " LOOM_TEST_TAG,
          "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad sums"));
  const index_t n = 7, c = 13;
  constexpr auto lay = loom::layer([](auto r, auto x, auto w, auto b) { return (x * w + b) * r + x * sin(x); });
  const auto x = random_host<double, 2>(loom::shape<2>{n, c}, g, -2, 2);
  const auto dy = random_host<double, 2>(x.extents(), g, -1, 1);
  const auto w = random_host<double, 1>(loom::shape<1>{c}, g, 0.5, 2);
  // r and x: the inputs of the output's rank (row outputs of the shared
  // kernel: r's written element by element, or as row sums when it is one
  // value per row); b: a column sum, or a whole sum when it is one value [1].
  const auto run = [&](const loom::host_tensor<double, 2>& r, const loom::host_tensor<double, 1>& b, int kernels) {
    CAPTURE(r.extent(1), b.extent(0));
    auto dr = poisoned<double, 2>(r.extents());
    auto dx = poisoned<double, 2>(x.extents());
    auto dw = poisoned<double, 1>(w.extents());
    auto db = poisoned<double, 1>(b.extents());
    const auto info =
        loom::grad(lay)(in_space(r), in_space(x), in_space(w), in_space(b), in_space(dy)).into(dr, dx, dw, db);
    CHECK(info.column_sum_groups == 1);
    CHECK(info.kernels == kernels);
    check_close(on_host(dr), finite_differences<0>(lay, dy, r, x, w, b), 1e-5);
    check_close(on_host(dx), finite_differences<1>(lay, dy, r, x, w, b), 1e-5);
    check_close(on_host(dw), finite_differences<2>(lay, dy, r, x, w, b), 1e-5);
    check_close(on_host(db), finite_differences<3>(lay, dy, r, x, w, b), 1e-5);
  };
  const auto full = random_host<double, 2>(x.extents(), g, -2, 2);
  const auto per_row = random_host<double, 2>(loom::shape<2>{n, 1}, g, -2, 2);
  const auto bias = random_host<double, 1>(loom::shape<1>{c}, g, -1, 1);
  const auto one = random_host<double, 1>(loom::shape<1>{1}, g, -1, 1);
  // dr and dx with dw and db (2: the pair of column sums in one kernel).
  run(full, bias, 2);
  // dr and dx with dw's column sums (1 + 1) and db's whole sum (2).
  run(full, one, 4);
  // dr's row sums in the same kernel.
  run(per_row, one, 4);
  run(per_row, bias, 2);

  // A wrong output shape throws before any kernel runs, also one of a
  // gradient that runs after the shared kernel (dx).
  auto dr = poisoned<double, 2>(x.extents());
  auto dx = poisoned<double, 2>(loom::shape<2>{n, c + 1});
  auto dw = poisoned<double, 1>(w.extents());
  auto db = poisoned<double, 1>(bias.extents());
  REQUIRE_THROWS_AS(loom::grad(lay)(in_space(full), in_space(x), in_space(w), in_space(bias), in_space(dy))
                        .into(dr, dx, dw, db),
                    loom::shape_error);
  const auto drh = on_host(dr);
  for (index_t i = 0; i < drh.size(); ++i) REQUIRE(std::isnan(drh.data()[i]));
  for (const auto& t : {on_host(dw), on_host(db)})
    for (index_t i = 0; i < t.size(); ++i) REQUIRE(std::isnan(t.data()[i]));
}

TEST_CASE("grad: row reductions and repeated uses match finite differences " LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad rows"));
  const auto x = random_host<double, 2>(loom::shape<2>{5, 13}, g, -2, 2);  // distinct values: one max per row
  check_unary(loom::layer([](auto v) { return v * row_sum(v * v) + row_mean(sin(v)) * v; }), x, g);
  check_unary(loom::layer([](auto v) { return exp(v - row_max(v)) * 2.0 + row_min(v) * v; }), x, g);
  check_unary(loom::layer([](auto v) {
                auto e = exp(v - row_max(v));
                return log(row_sum(e)) - v * row_mean(e / row_sum(e));
              }),
              x, g);
  // A reduction inside another's argument whose adjoint is constant along
  // the row: the inner reduction must sum it over every column.
  check_unary(loom::layer([](auto v) {
                auto m = row_mean(v);
                return (m + row_sum(v - m * 1.5)) * v;
              }),
              x, g);
}

TEST_CASE("grad: no gradient flows through stop_gradient " LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad stop_gradient"));
  const auto x = random_host<double, 2>(loom::shape<2>{4, 11}, g, -2, 2);
  const auto dy = random_host<double, 2>(x.extents(), g, -1, 1);
  // d/dx of x * c with c = x held constant: dy * x (not 2 dy x).
  auto dx = poisoned<double, 2>(x.extents());
  dx = loom::grad<0>(loom::layer([](auto v) { return v * loom::stop_gradient(v); }))(in_space(x), in_space(dy));
  const auto h = on_host(dx);
  for (index_t i = 0; i < x.size(); ++i) CHECK(h.data()[i] == dy.data()[i] * x.data()[i]);
  // loom::softmax shifts by stop_gradient(row_max): the same gradient as
  // the plain formula, whose row_max rule cancels.
  const auto want = finite_differences<0>(loom::layer([](auto v) { return loom::softmax(v); }), dy, x);
  dx = poisoned<double, 2>(x.extents());
  dx = loom::grad<0>(loom::layer([](auto v) { return loom::softmax(v); }))(in_space(x), in_space(dy));
  check_close(on_host(dx), want, 1e-6);
}

TEST_CASE("grad: dropout's gradient drops and scales by the forward's mask, regenerated " LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad dropout"));
  const loom::shape<2> s{9, 37};
  const auto x = random_host<double, 2>(s, g, -2, 2);
  const auto w = random_host<double, 1>(loom::shape<1>{37}, g, -2, 2);
  const auto dy = random_host<double, 2>(s, g, -1, 1);
  // y = dropout(x * w, 0.25, 1234, 7) + x: dx = mask * 4/3 * dy * w + dy.
  constexpr auto layer = loom::layer([](auto v, auto u) { return loom::dropout(v * u, 0.25f, 1234, 7) + v; });
  auto dx = poisoned<double, 2>(s);
  const auto before = loom::launches();
  dx = loom::grad<0>(layer)(in_space(x), in_space(w), in_space(dy));
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
  // The forward's drop bits, as the forward draws them (checked against
  // Random123 in tests/rng).
  loom::host_tensor<bool, 2> drop(s);
  drop = loom::bernoulli(0.25f, 1234, 7);
  const auto h = on_host(dx);
  index_t dropped = 0;
  for (index_t i = 0; i < h.size(); ++i) {
    const double scale = drop.data()[i] ? 0.0 : static_cast<double>(1.0f / 0.75f);
    const double want = dy.data()[i] * scale * w.data()[i % 37] + dy.data()[i];
    CHECK(std::fabs(h.data()[i] - want) <= 1e-14 * (1 + std::fabs(want)));
    dropped += drop.data()[i] ? 1 : 0;
  }
  CHECK(dropped > 0);
  CHECK(dropped < h.size());
}

TEST_CASE("grad: row_max shares the gradient evenly among ties, as amax " LOOM_TEST_TAG, "[grad]") {
  loom::host_tensor<double, 2> x({2, 4});
  const double v[] = {1, 3, 3, 2, 5, 0, 5, 5};
  for (int i = 0; i < 8; ++i) x.data()[i] = v[i];
  loom::host_tensor<double, 2> dy({2, 1});
  dy(0, 0) = 1;
  dy(1, 0) = 3;
  auto dx = poisoned<double, 2>(x.extents());
  dx = loom::grad<0>(loom::layer([](auto z) { return row_max(z); }))(in_space(x), in_space(dy));
  const auto h = on_host(dx);
  const double want[] = {0, 0.5, 0.5, 0, 1, 0, 1, 1};
  for (int i = 0; i < 8; ++i) CHECK(h.data()[i] == want[i]);
}

namespace {
// Softmax's backward along the last axis in double: y * (dy - sum(dy * y)).
template <class T, std::size_t R>
std::vector<double> softmax_backward_double(const loom::host_tensor<T, R>& x, const loom::host_tensor<T, R>& dy) {
  const index_t c = x.extents()[R - 1], rows = x.size() / c;
  std::vector<double> dx(static_cast<std::size_t>(x.size()));
  for (index_t i = 0; i < rows; ++i) {
    double m = -INFINITY, s = 0, dot = 0;
    for (index_t j = 0; j < c; ++j) m = std::max(m, loom_test::as_double(x.data()[i * c + j]));
    for (index_t j = 0; j < c; ++j) s += std::exp(loom_test::as_double(x.data()[i * c + j]) - m);
    for (index_t j = 0; j < c; ++j)
      dot += loom_test::as_double(dy.data()[i * c + j]) * std::exp(loom_test::as_double(x.data()[i * c + j]) - m) / s;
    for (index_t j = 0; j < c; ++j)
      dx[static_cast<std::size_t>(i * c + j)] = std::exp(loom_test::as_double(x.data()[i * c + j]) - m) / s *
                                                (loom_test::as_double(dy.data()[i * c + j]) - dot);
  }
  return dx;
}
}  // namespace

TEST_CASE("grad: values saved by the forward stand for its row passes in the backward " LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad saved"));
  // Softmax over [B, T, C] with the rows' max and sum saved ([B, T, 1]).
  const index_t b = 3, t = 5, c = 37;
  const auto xh = random_host<float, 3>(loom::shape<3>{b, t, c}, g, -4, 4);
  const auto dyh = random_host<float, 3>(xh.extents(), g, -1, 1);
  const auto x = in_space(xh), dy = in_space(dyh);
  constexpr auto sm = loom::layer([](auto z) {
    auto e = exp(z - stop_gradient(loom::saved<0>(row_max(z))));
    return e / loom::saved<1>(row_sum(e));
  });
  auto m = poisoned<float, 3>(loom::shape<3>{b, t, 1});
  auto s = poisoned<float, 3>(loom::shape<3>{b, t, 1});
  // The forward writes its output and both statistics in one kernel, each
  // row reduction computed once.
  auto y = poisoned<float, 3>(x.extents());
  const auto fwd = loom::assign_with_row_stats(y, sm(x), m, loom::saved_value<0>(sm)(x), s,
                                               loom::saved_value<1>(sm)(x));
  CHECK(fwd.row_passes == 2);
  {
    const auto mh = on_host(m), sh = on_host(s), yh = on_host(y);
    for (index_t i = 0; i < b * t; ++i) {
      double mx = -INFINITY, sum = 0;
      for (index_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(xh.data()[i * c + j]));
      for (index_t j = 0; j < c; ++j) sum += std::exp(xh.data()[i * c + j] - mx);
      CHECK(mh.data()[i] == mx);
      CHECK(std::fabs(sh.data()[i] - sum) <= 1e-5 * sum);
      for (index_t j = 0; j < c; ++j)
        REQUIRE(std::fabs(yh.data()[i * c + j] - std::exp(xh.data()[i * c + j] - mx) / sum) <= 1e-6);
    }
  }
  auto wide = poisoned<float, 3>(loom::shape<3>{b, t, 2});
  REQUIRE_THROWS_AS(loom::assign_with_row_stats(y, sm(x), m, loom::saved_value<0>(sm)(x), wide,
                                                loom::saved_value<1>(sm)(x)),
                    loom::shape_error);
  REQUIRE_THROWS_WITH(loom::assign_with_row_stats(y, sm(x), m, loom::saved_value<0>(sm)(x), m,
                                                  loom::saved_value<1>(sm)(x)),
                      Contains("two outputs of assign_with_row_stats overlap"));
  const auto want = softmax_backward_double(xh, dyh);
  auto dx = poisoned<float, 3>(x.extents());
  dx = loom::grad<0>(sm)(x, dy);
  CHECK(loom::last_grad().rows.row_passes == 3);  // max, sum, the sum of the adjoint
  check_close(on_host(dx), want, 2e-5);
  dx = poisoned<float, 3>(x.extents());
  dx = loom::grad<0>(sm).with_saved(m, s)(x, dy);
  CHECK(loom::last_grad().kernels == 1);
  CHECK(loom::last_grad().rows.row_passes == 1);  // the sum of the adjoint only
  check_close(on_host(dx), want, 2e-5);
  // loom::skip: the max is computed, the sum read.
  dx = poisoned<float, 3>(x.extents());
  dx = loom::grad<0>(sm).with_saved(loom::skip, s)(x, dy);
  CHECK(loom::last_grad().rows.row_passes == 2);
  check_close(on_host(dx), want, 2e-5);
  // The saved tensor is what the backward reads: a NaN max gives NaN.
  auto nan_m = poisoned<float, 3>(m.extents());
  dx = loom::grad<0>(sm).with_saved(nan_m, s)(x, dy);
  const auto nan_dx = on_host(dx);
  for (index_t i = 0; i < nan_dx.size(); ++i) REQUIRE(std::isnan(nan_dx.data()[i]));
  auto wrong = poisoned<float, 3>(loom::shape<3>{b, t, 2});
  REQUIRE_THROWS_WITH(loom::grad<0>(sm).with_saved(wrong, s)(x, dy),
                      Contains("saved tensor has shape [3, 5, 2]") && Contains("[3, 5, 1]"));

  // The exponentials saved too, full-size as the forward computed them (the
  // memory softmax_backward's saved output takes): the backward reads e, s
  // and dy, one row pass, and neither x nor an exponential.
  constexpr auto sm_e = loom::layer([](auto z) {
    auto e = loom::saved<0>(exp(z - stop_gradient(row_max(z))));
    return e / loom::saved<1>(row_sum(e));
  });
  auto e_full = poisoned<float, 3>(x.extents());
  e_full = loom::saved_value<0>(sm_e)(x);
  s = loom::saved_value<1>(sm_e)(x);
  dx = poisoned<float, 3>(x.extents());
  dx = loom::grad<0>(sm_e).with_saved(e_full, s)(x, dy);
  CHECK(loom::last_grad().kernels == 1);
  CHECK(loom::last_grad().rows.row_passes == 1);
  check_close(on_host(dx), want, 2e-5);
  const auto nan_x = poisoned<float, 3>(x.extents());  // NaN everywhere: x is not read
  dx = poisoned<float, 3>(x.extents());
  dx = loom::grad<0>(sm_e).with_saved(e_full, s)(nan_x, dy);
  check_close(on_host(dx), want, 2e-5);
  // Without the saved exponentials, the same layer reads x (NaN in, NaN out).
  dx = loom::grad<0>(sm_e).with_saved(loom::skip, s)(nan_x, dy);
  CHECK(std::isnan(on_host(dx).data()[0]));

  // bf16 rows with the statistics saved in float (the row reductions' type).
  const index_t n = 7, w = 45;
  const auto xb = random_host<loom::bf16, 2>(loom::shape<2>{n, w}, g, -4, 4);
  const auto dyb = random_host<loom::bf16, 2>(xb.extents(), g, -1, 1);
  auto mb = poisoned<float, 2>(loom::shape<2>{n, 1});
  auto sb = poisoned<float, 2>(loom::shape<2>{n, 1});
  mb = loom::saved_value<0>(sm)(in_space(xb));
  sb = loom::saved_value<1>(sm)(in_space(xb));
  auto dxb = poisoned<loom::bf16, 2>(xb.extents());
  dxb = loom::grad<0>(sm).with_saved(mb, sb)(in_space(xb), in_space(dyb));
  check_close(on_host(dxb), softmax_backward_double(xb, dyb), 2e-2);

  // layer_norm with the mean and the variance saved, and rms_norm with the
  // mean square: the dx and weight gradients still take 2 kernels.
  const index_t rows = 9, cols = 129;
  const auto xn = in_space(random_host<float, 2>(loom::shape<2>{rows, cols}, g, -2, 2));
  const auto wn = in_space(random_host<float, 1>(loom::shape<1>{cols}, g, 0.5, 1.5));
  const auto bn = in_space(random_host<float, 1>(loom::shape<1>{cols}, g, -1, 1));
  const auto dyn = in_space(random_host<float, 2>(loom::shape<2>{rows, cols}, g, -1, 1));
  constexpr auto ln = loom::layer([](auto v, auto wt, auto bs) {
    auto centred = v - loom::saved<0>(row_mean(v));
    return centred * rsqrt(loom::saved<1>(row_mean(centred * centred)) + 1e-5) * wt + bs;
  });
  auto mean = poisoned<float, 2>(loom::shape<2>{rows, 1});
  auto var = poisoned<float, 2>(loom::shape<2>{rows, 1});
  mean = loom::saved_value<0>(ln)(xn, wn, bn);
  var = loom::saved_value<1>(ln)(xn, wn, bn);
  auto dx2 = poisoned<float, 2>(xn.extents());
  auto dw = poisoned<float, 1>(wn.extents());
  auto db = poisoned<float, 1>(wn.extents());
  const int ln_passes = loom::grad(ln)(xn, wn, bn, dyn).into(dx2, dw, db).rows.row_passes;
  dx2 = poisoned<float, 2>(xn.extents());
  dw = poisoned<float, 1>(wn.extents());
  db = poisoned<float, 1>(wn.extents());
  const auto info = loom::grad(ln).with_saved(mean, var)(xn, wn, bn, dyn).into(dx2, dw, db);
  CHECK(info.kernels == 2);
  // One pass per level of row reductions (those of one level read no result
  // of another, exec/rows/levels.hpp). On the host the sums of adjoints are
  // split where a term or factor is one value per row (adjoint_row_sum):
  // rstd, which waits for the variance, multiplies sums of dy * w and of
  // dy * w * c instead of being summed with them, so every sum is on the
  // level of the mean or the variance: 2 passes; with both saved, 1. On the
  // device the sums stay whole: 4 levels; with both saved, three sums (two
  // of the four become one: the copies of v - mean read one saved mean) in 2.
  CHECK(ln_passes == (on_device ? 4 : 2));
  CHECK(info.rows.row_passes == (on_device ? 2 : 1));
  const auto ref = loom::layer_norm_backward(xn, wn, dyn, 1e-5);
  check_close(on_host(dx2), on_host(ref.dx), 1e-3);
  check_close(on_host(dw), on_host(ref.dweight), 1e-3);
  check_close(on_host(db), on_host(ref.dbias), 1e-4);

  constexpr auto rms = loom::layer(
      [](auto v, auto wt) { return v * rsqrt(loom::saved<0>(row_mean(v * v)) + 1e-6) * wt; });
  auto ms = poisoned<float, 2>(loom::shape<2>{rows, 1});
  auto yn = poisoned<float, 2>(xn.extents());
  CHECK(loom::assign_with_row_stat(yn, rms(xn, wn), ms, loom::saved_value<0>(rms)(xn, wn)).row_passes == 1);
  check_close(on_host(yn), on_host(loom::materialize(loom::rms_norm(xn, wn, 1e-6))), 1e-6);
  dx2 = poisoned<float, 2>(xn.extents());
  dw = poisoned<float, 1>(wn.extents());
  const auto rinfo = loom::grad<0, 1>(rms).with_saved(ms)(xn, wn, dyn).into(dx2, dw);
  CHECK(rinfo.kernels == 2);
  CHECK(rinfo.rows.row_passes == 1);
  const auto rref = loom::rms_norm_backward(xn, wn, dyn, 1e-6);
  check_close(on_host(dx2), on_host(rref.dx), 1e-4);
  check_close(on_host(dw), on_host(rref.dweight), 1e-4);

  // A gradient left without row reductions (an elementwise assignment):
  // x scaled by its row's max, the max a constant.
  constexpr auto scaled = loom::layer([](auto v) { return v * stop_gradient(loom::saved<0>(row_max(v))); });
  const auto xs = random_host<double, 2>(loom::shape<2>{4, 11}, g, -2, 2);
  const auto dys = random_host<double, 2>(xs.extents(), g, -1, 1);
  loom::host_tensor<double, 2> mh({4, 1});
  std::vector<double> want_s(static_cast<std::size_t>(xs.size()));
  for (index_t i = 0; i < 4; ++i) {
    mh(i, 0) = -INFINITY;
    for (index_t j = 0; j < 11; ++j) mh(i, 0) = std::max(mh(i, 0), xs(i, j));
    for (index_t j = 0; j < 11; ++j) want_s[static_cast<std::size_t>(i * 11 + j)] = dys(i, j) * mh(i, 0);
  }
  auto dxs = poisoned<double, 2>(xs.extents());
  dxs = loom::grad<0>(scaled).with_saved(in_space(mh))(in_space(xs), in_space(dys));
  CHECK(loom::last_grad().rows.path != loom::eval_path::rows);
  check_close(on_host(dxs), want_s, 1e-15);
}
#endif

#if !defined(LOOM_GRAD_PART) || LOOM_GRAD_PART == 1
TEST_CASE("grad: derived backward of softmax, log_softmax and cross-entropy rows match the built-in ones " LOOM_TEST_TAG,
          "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad softmax"));
  const index_t n = 7, c = 37;
  const auto xh = random_host<float, 2>(loom::shape<2>{n, c}, g, -4, 4);
  const auto dyh = random_host<float, 2>(xh.extents(), g, -1, 1);
  const auto x = in_space(xh);
  const auto dy = in_space(dyh);
  constexpr auto my_softmax = loom::layer([](auto z) {
    auto e = exp(z - row_max(z));
    return e / row_sum(e);
  });
  auto dx = poisoned<float, 2>(x.extents());
  dx = loom::grad<0>(my_softmax)(x, dy);
  CHECK(loom::last_grad().kernels == 1);
  const auto y = loom::materialize(loom::softmax(x));
  check_close(on_host(dx), on_host(loom::materialize(loom::softmax_backward(y, dy))), 2e-5);

  constexpr auto my_log_softmax = loom::layer([](auto z) { return z - row_max(z) - log(row_sum(exp(z - row_max(z)))); });
  dx = loom::grad<0>(my_log_softmax)(x, dy);
  const auto ly = loom::materialize(loom::log_softmax(x));
  check_close(on_host(dx), on_host(loom::materialize(loom::log_softmax_backward(ly, dy))), 2e-5);

  // Cross-entropy rows: the layer of loom::cross_entropy_rows, with integer
  // targets as a second input that has no gradient.
  loom::host_tensor<std::int64_t, 2> th({n, 1});
  for (index_t i = 0; i < n; ++i) th(i, 0) = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(c));
  const auto t = in_space(th);
  loom::host_tensor<float, 2> ones({n, 1});
  loom::fill(ones, 1.0f);
  dx = loom::grad<0>(loom::layer([](auto z, auto tt) { return loom::cross_entropy_rows(z, tt); }))(x, t, in_space(ones));
  const loom::cross_entropy_options sum_reduction{-100, 0.0, loom::loss_reduction::sum};
  check_close(on_host(dx), on_host(loom::cross_entropy_backward(x, loom::view<const std::int64_t, 1, space_t>(
                                                                         t.data(), loom::shape<1>{n}),
                                                                1.0, sum_reduction)),
              2e-5);
}

TEST_CASE("grad: derived backward of layer_norm and rms_norm match the built-in ones, two kernels " LOOM_TEST_TAG,
          "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad norms"));
  const index_t n = 9, c = 129;
  const auto x = in_space(random_host<float, 2>(loom::shape<2>{n, c}, g, -2, 2));
  const auto w = in_space(random_host<float, 1>(loom::shape<1>{c}, g, 0.5, 1.5));
  const auto b = in_space(random_host<float, 1>(loom::shape<1>{c}, g, -1, 1));
  const auto dy = in_space(random_host<float, 2>(loom::shape<2>{n, c}, g, -1, 1));
  auto dx = poisoned<float, 2>(x.extents());
  auto dw = poisoned<float, 1>(w.extents());
  auto db = poisoned<float, 1>(w.extents());

  // loom::layer_norm itself: its mean is refined by a second reduction over
  // the differences from the first, reductions inside reductions.
  constexpr auto ln = loom::layer([](auto v, auto wt, auto bs) { return loom::layer_norm(v, wt, bs, 1e-5); });
  const auto info = loom::grad(ln)(x, w, b, dy).into(dx, dw, db);
  CHECK(info.kernels == 2);
  CHECK(info.column_sum_groups == 1);
  // The mean, its correction and the variance: 3 levels, and on the host the
  // sums of adjoints split onto them; on the device, whole, 6 (the built-in
  // backward: 4).
  CHECK(info.rows.row_passes == (on_device ? 6 : 3));
  const auto ref = loom::layer_norm_backward(x, w, dy, 1e-5);
  check_close(on_host(dx), on_host(ref.dx), 1e-3);
  check_close(on_host(dw), on_host(ref.dweight), 1e-3);
  check_close(on_host(db), on_host(ref.dbias), 1e-4);

  constexpr auto rms = loom::layer([](auto v, auto wt) { return loom::rms_norm(v, wt, 1e-6); });
  const auto rinfo = loom::grad<0, 1>(rms)(x, w, dy).into(dx, dw);
  CHECK(rinfo.kernels == 2);
  CHECK(rinfo.rows.row_passes == (on_device ? 2 : 1));  // host: the mean square and the sum of dy * w * x, one level
  const auto rref = loom::rms_norm_backward(x, w, dy, 1e-6);
  check_close(on_host(dx), on_host(rref.dx), 1e-4);
  check_close(on_host(dw), on_host(rref.dweight), 1e-4);

  // Only the weight: its column sums without the row output.
  dw = poisoned<float, 1>(w.extents());
  CHECK(loom::grad<0, 1>(rms)(x, w, dy).into(loom::skip, dw).kernels == 2);
  check_close(on_host(dw), on_host(rref.dweight), 1e-4);
  dw = poisoned<float, 1>(w.extents());
  dw = loom::grad<1>(rms)(x, w, dy);
  CHECK(loom::last_grad().kernels == 2);
  check_close(on_host(dw), on_host(rref.dweight), 1e-4);
}

TEST_CASE("grad: RMSNorm + SwiGLU and a causal softmax with temperature, bf16 and strided inputs " LOOM_TEST_TAG,
          "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad swiglu"));
  const index_t n = 5, c = 19;
  // gate and up are read through transposed views of [C, N] tensors.
  const auto xh = random_host<double, 2>(loom::shape<2>{n, c}, g, -2, 2);
  const auto gateh = random_host<double, 2>(loom::shape<2>{c, n}, g, -2, 2);
  const auto wh = random_host<double, 1>(loom::shape<1>{c}, g, 0.5, 1.5);
  const auto dyh = random_host<double, 2>(loom::shape<2>{n, c}, g, -1, 1);
  constexpr auto block = loom::layer([](auto x, auto gate, auto w) { return silu(gate) * loom::rms_norm(x, w, 1e-6); });
  const auto gate_t = gateh.view().t();
  loom::host_tensor<double, 2> gate_dense = loom::materialize(gate_t);
  const auto want_x = finite_differences<0>(block, dyh, xh, gate_dense, wh);
  const auto want_g = finite_differences<1>(block, dyh, xh, gate_dense, wh);
  const auto want_w = finite_differences<2>(block, dyh, xh, gate_dense, wh);

  const auto gate = in_space(gateh);
  auto dx = poisoned<double, 2>(xh.extents());
  auto dgate = poisoned<double, 2>(loom::shape<2>{c, n});
  auto dw = poisoned<double, 1>(wh.extents());
  auto dgate_t = dgate.view().t();
  const auto info = loom::grad(block)(in_space(xh), gate.view().t(), in_space(wh), in_space(dyh)).into(dx, dgate_t, dw);
  CHECK(info.kernels == 2);  // dx and dgate with dw's column sums, then their sum
  check_close(on_host(dx), want_x, 1e-6);
  check_close(on_host(loom::materialize(dgate.view().t())), want_g, 1e-6);
  check_close(on_host(dw), want_w, 1e-6);

  // bf16 inputs: against the double gradient at the rounded inputs.
  loom::host_tensor<loom::bf16, 2> xb({n, c}), gb({n, c}), dyb({n, c});
  loom::host_tensor<loom::bf16, 1> wb({c});
  xb = loom::cast<loom::bf16>(xh);
  gb = loom::cast<loom::bf16>(gate_t);
  wb = loom::cast<loom::bf16>(wh);
  dyb = loom::cast<loom::bf16>(dyh);
  const auto xr = to_double(xb), gr = to_double(gb), dyr = to_double(dyb);
  const auto wr = to_double(wb);
  auto dxb = poisoned<loom::bf16, 2>(xh.extents());
  dxb = loom::grad<0>(block)(in_space(xb), in_space(gb), in_space(wb), in_space(dyb));
  check_close(on_host(dxb), finite_differences<0>(block, dyr, xr, gr, wr), 3e-2);

  // Causal softmax of scores / T (T a learnable scalar) masked by
  // column <= row id (an int64 input without gradient): dx per row, dT a
  // whole sum.
  constexpr auto causal = loom::layer([](auto s, auto temp, auto rows) {
    auto z = where(column_index(s) <= rows, s / temp, -1e30);
    auto e = exp(z - row_max(z));
    return e / row_sum(e);
  });
  const auto th = random_host<double, 0>(loom::shape<0>{}, g, 0.5, 1.5);
  loom::host_tensor<std::int64_t, 2> rows({n, 1});
  for (index_t i = 0; i < n; ++i) rows(i, 0) = i;
  auto ds = poisoned<double, 2>(xh.extents());
  auto dt = poisoned<double, 0>(th.extents());
  loom::grad<0, 1>(causal)(in_space(xh), in_space(th), in_space(rows), in_space(dyh)).into(ds, dt);
  check_close(on_host(ds), finite_differences<0>(causal, dyh, xh, th, rows), 1e-6);
  check_close(on_host(dt), finite_differences<1>(causal, dyh, xh, th, rows), 1e-6);
}

TEST_CASE("grad: the shared kernel's row outputs: row sums, values once per row, overlaps " LOOM_TEST_TAG,
          "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad row outputs"));
  const index_t n = 9, c = 37;
  // x and gate of the output's shape, r one value per row (its row sums),
  // w a column sum: one row kernel writes dx, dgate and dr, then one adds
  // dw's partial sums.
  constexpr auto lay =
      loom::layer([](auto x, auto gate, auto r, auto w) { return silu(gate) * (x * rsqrt(row_mean(x * x) + 0.5) * w + r); });
  const auto x = random_host<double, 2>(loom::shape<2>{n, c}, g, -2, 2);
  const auto gate = random_host<double, 2>(x.extents(), g, -2, 2);
  const auto r = random_host<double, 2>(loom::shape<2>{n, 1}, g, -2, 2);
  const auto w = random_host<double, 1>(loom::shape<1>{c}, g, 0.5, 2);
  const auto dy = random_host<double, 2>(x.extents(), g, -1, 1);
  auto dx = poisoned<double, 2>(x.extents());
  auto dgate = poisoned<double, 2>(x.extents());
  auto dr = poisoned<double, 2>(r.extents());
  auto dw = poisoned<double, 1>(w.extents());
  const auto info =
      loom::grad(lay)(in_space(x), in_space(gate), in_space(r), in_space(w), in_space(dy)).into(dx, dgate, dr, dw);
  CHECK(info.kernels == 2);
  CHECK(info.column_sum_groups == 1);
  check_close(on_host(dx), finite_differences<0>(lay, dy, x, gate, r, w), 1e-5);
  check_close(on_host(dgate), finite_differences<1>(lay, dy, x, gate, r, w), 1e-5);
  check_close(on_host(dr), finite_differences<2>(lay, dy, x, gate, r, w), 1e-5);
  check_close(on_host(dw), finite_differences<3>(lay, dy, x, gate, r, w), 1e-5);

  // In place: dx into dy's memory and dr into r's (the same index maps):
  // every value of a column is computed before any is stored, and a row's
  // sum after the row's reads. The results are those of the run above.
  {
    auto dy2 = in_space(dy);
    auto r2 = in_space(r);
    auto dgate2 = poisoned<double, 2>(x.extents());
    auto dw2 = poisoned<double, 1>(w.extents());
    loom::grad(lay)(in_space(x), in_space(gate), r2, in_space(w), dy2).into(dy2, dgate2, r2, dw2);
    CHECK(bytes_of(dy2) == bytes_of(dx));
    CHECK(bytes_of(r2) == bytes_of(dr));
    CHECK(bytes_of(dgate2) == bytes_of(dgate));
    CHECK(bytes_of(dw2) == bytes_of(dw));
  }

  // Two outputs of the kernel in one tensor: an aliasing_error before any
  // kernel runs.
  auto both = poisoned<double, 2>(x.extents());
  auto dr3 = poisoned<double, 2>(r.extents());
  auto dw3 = poisoned<double, 1>(w.extents());
  REQUIRE_THROWS_WITH(
      loom::grad(lay)(in_space(x), in_space(gate), in_space(r), in_space(w), in_space(dy)).into(both, both, dr3, dw3),
      Contains("two outputs overlap"));
  // An output over an input under another index map (dr over x's first
  // column) is refused as well.
  auto x2 = in_space(x);
  REQUIRE_THROWS_AS(loom::grad(lay)(x2, in_space(gate), in_space(r), in_space(w), in_space(dy))
                        .into(dx, dgate, x2.slice(loom::whole, loom::range(0, 1)), dw3),
                    loom::aliasing_error);
  for (const auto& t : {on_host(dr3)})
    for (index_t i = 0; i < t.size(); ++i) REQUIRE(std::isnan(t.data()[i]));
  for (index_t i = 0; i < dw3.size(); ++i) REQUIRE(std::isnan(on_host(dw3).data()[i]));

  // A layer that ends in a row reduction with a per-row weight: x's adjoint
  // has x's rows, s's is one value per row, stored once per row by the same
  // kernel.
  constexpr auto per_row = loom::layer([](auto v, auto s) { return row_sum(v * v) * s; });
  const auto s = random_host<double, 2>(loom::shape<2>{n, 1}, g, -2, 2);
  const auto dys = random_host<double, 2>(s.extents(), g, -1, 1);
  auto dv = poisoned<double, 2>(x.extents());
  auto ds = poisoned<double, 2>(s.extents());
  const auto pinfo = loom::grad(per_row)(in_space(x), in_space(s), in_space(dys)).into(dv, ds);
  CHECK(pinfo.kernels == 1);
  check_close(on_host(dv), finite_differences<0>(per_row, dys, x, s), 1e-5);
  check_close(on_host(ds), finite_differences<1>(per_row, dys, x, s), 1e-5);

  // Rows without columns: a per-row input's gradient is 0.
  const auto x0 = random_host<double, 2>(loom::shape<2>{n, 0}, g, -2, 2);
  const auto gate0 = random_host<double, 2>(x0.extents(), g, -2, 2);
  const auto w0 = random_host<double, 1>(loom::shape<1>{0}, g, -2, 2);
  const auto dy0 = random_host<double, 2>(x0.extents(), g, -1, 1);
  auto dx0 = poisoned<double, 2>(x0.extents());
  auto dg0 = poisoned<double, 2>(x0.extents());
  auto dr0 = poisoned<double, 2>(r.extents());
  auto dw0 = poisoned<double, 1>(w0.extents());
  loom::grad(lay)(in_space(x0), in_space(gate0), in_space(r), in_space(w0), in_space(dy0)).into(dx0, dg0, dr0, dw0);
  const auto dr0h = on_host(dr0);
  for (index_t i = 0; i < n; ++i) CHECK(dr0h(i, 0) == 0.0);
}

TEST_CASE("grad: errors name the shapes " LOOM_TEST_TAG, "[grad]") {
  std::mt19937_64 g(loom_test::seed_for("grad errors"));
  const auto x = in_space(random_host<float, 2>(loom::shape<2>{4, 6}, g, -1, 1));
  const auto w = in_space(random_host<float, 2>(loom::shape<2>{4, 1}, g, -1, 1));
  constexpr auto lay = loom::layer([](auto v, auto k) { return v * k; });
  auto bad_dy = in_space(random_host<float, 2>(loom::shape<2>{4, 5}, g, -1, 1));
  auto dx = poisoned<float, 2>(x.extents());
  REQUIRE_THROWS_WITH(loom::grad<0>(lay)(x, w, bad_dy), Contains("dy has shape [4, 5]") && Contains("[4, 6]"));
  const auto dy = in_space(random_host<float, 2>(loom::shape<2>{4, 6}, g, -1, 1));
  auto small = poisoned<float, 2>(loom::shape<2>{4, 5});
  REQUIRE_THROWS_WITH(small = loom::grad<0>(lay)(x, w, dy), Contains("assigned to a tensor of shape [4, 5]"));
  // An input broadcast along a middle axis: no one-pass sum.
  const auto x3 = in_space(random_host<float, 3>(loom::shape<3>{2, 3, 4}, g, -1, 1));
  const auto m3 = in_space(random_host<float, 3>(loom::shape<3>{2, 1, 4}, g, -1, 1));
  const auto dy3 = in_space(random_host<float, 3>(loom::shape<3>{2, 3, 4}, g, -1, 1));
  auto dm = poisoned<float, 3>(m3.extents());
  REQUIRE_THROWS_WITH(dm = loom::grad<1>(lay)(x3, m3, dy3), Contains("[2, 1, 4]") && Contains("one pass cannot sum"));
  (void)dx;
}
#endif
