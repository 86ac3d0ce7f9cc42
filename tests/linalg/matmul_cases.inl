// SPDX-License-Identifier: Apache-2.0
// Matrix products checked on both executors against plain double loops. The
// including file defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <loom/exec/rows.hpp>
#include <loom/linalg/matmul.hpp>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
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

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g, double lo = -1, double hi = 1) {
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

// Error allowed relative to sum_k |a_ik b_kj| (accumulation) plus the rounding of the stored result.
template <class T>
double tol() {
  if constexpr (std::is_same_v<T, loom::half>)
    return 2e-3;
  else if constexpr (std::is_same_v<T, loom::bf16>)
    return 1.6e-2;
  else if constexpr (std::is_same_v<T, float>)
    return 2e-5;
  else
    return 1e-12;
}

template <std::size_t R>
std::array<index_t, R> unravel(index_t i, const loom::shape<R>& s) {
  std::array<index_t, R> c{};
  for (std::size_t d = R; d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

// Element of a host view at output coordinates c (rank R), broadcasting its
// own trailing axes; `row`/`col` replace the last two coordinates.
template <class V, std::size_t R>
double at_broadcast(const V& v, const std::array<index_t, R>& c, index_t row, index_t col) {
  constexpr std::size_t RV = V::rank;
  index_t off = 0;
  for (std::size_t d = 0; d != RV; ++d) {
    index_t ix = d == RV - 2 ? row : d == RV - 1 ? col : c[R - RV + d];
    if (v.extent(d) == 1) ix = 0;
    off += ix * v.stride(d);
  }
  return loom_test::as_double(v.data()[off]);
}

// The reference product in double, and sum_k |a b| (for the error bound), at each output position.
struct reference {
  std::vector<double> value, scale;
};
template <class A, class B, std::size_t R>
reference ref_matmul(const A& a, const B& b, const loom::shape<R>& out) {
  reference r;
  const index_t n = loom::shape_size(out);
  const index_t k = a.extent(A::rank - 1);
  r.value.resize(static_cast<std::size_t>(n));
  r.scale.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    const auto c = unravel(i, out);
    double s = 0, m = 0;
    for (index_t kk = 0; kk < k; ++kk) {
      const double p = at_broadcast(a, c, c[R - 2], kk) * at_broadcast(b, c, kk, c[R - 1]);
      s += p;
      m += std::fabs(p);
    }
    r.value[static_cast<std::size_t>(i)] = s;
    r.scale[static_cast<std::size_t>(i)] = m;
  }
  return r;
}

// Compares y with f(ref value, position) within the dtype's tolerance.
template <class T, class O, std::size_t R, class F>
void check(const loom::tensor<O, R, space_t>& y, const reference& r, F f, double extra_abs = 0) {
  const auto h = loom::to_host(y);
  const double t = std::max(tol<T>(), tol<O>());
  for (index_t i = 0; i < h.size(); ++i) {
    const double want = f(r.value[static_cast<std::size_t>(i)], i);
    const double got = loom_test::as_double(h.data()[i]);
    const double bound = t * (r.scale[static_cast<std::size_t>(i)] + std::fabs(want)) + 1e-6 + extra_abs;
    if (!(std::fabs(got - want) <= bound)) {
      INFO("element " << i << " of shape " << loom::shape_string(h.extents()) << ": got " << got << ", want " << want);
      REQUIRE(std::fabs(got - want) <= bound);
    }
  }
}

std::uint64_t launches_now() {
  const auto l = loom::launches();
  return on_device ? l.device : l.host;
}

const double pi = 3.14159265358979323846;
double gelu_tanh_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x))); }
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
}  // namespace

TEMPLATE_TEST_CASE("matmul matches a double reference for square and odd shapes", "[linalg]" LOOM_TEST_TAG, float,
                   double, loom::half, loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("matmul shapes"));
  const std::array<index_t, 3> shapes[] = {{1, 1, 1}, {7, 7, 7}, {33, 33, 33}, {7, 33, 1}, {1, 257, 7},
                                           {33, 7, 257}, {257, 33, 7}, {257, 257, 33}};
  for (const auto& s : shapes) {
    const index_t m = s[0], k = s[1], n = s[2];
    INFO("m " << m << " k " << k << " n " << n);
    const auto ha = random_host<T, 2>({m, k}, g);
    const auto hb = random_host<T, 2>({k, n}, g);
    const auto a = in_space(ha);
    const auto b = in_space(hb);
    auto y = poisoned<T, 2>({m, n});
    const auto before = launches_now();
    y = loom::matmul(a, b);
    CHECK(launches_now() - before == 1);
    CHECK(loom::last_matmul().path == loom::matmul_path::fused);
    check<T>(y, ref_matmul(ha.view(), hb.view(), y.extents()), [](double v, index_t) { return v; });
  }
}

TEST_CASE("matmul of 1000 x 64 by 64 x 1000 floats", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul 1000"));
  const auto ha = random_host<float, 2>({1000, 64}, g);
  const auto hb = random_host<float, 2>({64, 1000}, g);
  auto y = poisoned<float, 2>({1000, 1000});
  y = loom::matmul(in_space(ha), in_space(hb));
  check<float>(y, ref_matmul(ha.view(), hb.view(), y.extents()), [](double v, index_t) { return v; });
}

TEMPLATE_TEST_CASE("matmul takes transposed views on either side without copies", "[linalg]" LOOM_TEST_TAG, float,
                   loom::half) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("matmul transposed"));
  const index_t m = 33, k = 7, n = 257;
  const auto hat = random_host<T, 2>({k, m}, g);  // a = at.t()
  const auto hbt = random_host<T, 2>({n, k}, g);  // b = bt.t()
  const auto ha = loom::contiguous(hat.view().t());
  const auto hb = loom::contiguous(hbt.view().t());
  auto at = in_space(hat);
  auto bt = in_space(hbt);
  auto a = in_space(ha);
  auto b = in_space(hb);
  const auto r = ref_matmul(ha.view(), hb.view(), loom::shape<2>{m, n});
  auto y = poisoned<T, 2>({m, n});
  SECTION("a transposed") { y = loom::matmul(at.t(), b); }
  SECTION("b transposed") { y = loom::matmul(a, bt.t()); }
  SECTION("both transposed") { y = loom::matmul(at.t(), bt.t()); }
  SECTION("a column slice (row stride larger than the extent)") {
    auto wide = poisoned<T, 2>({m, k + 5});
    loom::copy(a, wide.slice(loom::whole, loom::range(2, 2 + k)));
    y = loom::matmul(wide.slice(loom::whole, loom::range(2, 2 + k)), b);
  }
  SECTION("a transposed output") {
    auto yt = poisoned<T, 2>({n, m});
    yt.t() = loom::matmul(a, b);
    y = yt.t();
  }
  check<T>(y, r, [](double v, index_t) { return v; });
}

TEST_CASE("matmul broadcasts batch axes", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul batch"));
  const index_t m = 7, k = 33, n = 5;
  SECTION("a batch of matrices times one matrix") {
    const auto ha = random_host<float, 3>({4, m, k}, g);
    const auto hb = random_host<float, 2>({k, n}, g);
    auto y = poisoned<float, 3>({4, m, n});
    y = loom::matmul(in_space(ha), in_space(hb));
    check<float>(y, ref_matmul(ha.view(), hb.view(), y.extents()), [](double v, index_t) { return v; });
  }
  SECTION("extent-1 batch axis against a batch") {
    const auto ha = random_host<double, 3>({1, m, k}, g);
    const auto hb = random_host<double, 3>({3, k, n}, g);
    auto y = poisoned<double, 3>({3, m, n});
    y = loom::matmul(in_space(ha), in_space(hb));
    check<double>(y, ref_matmul(ha.view(), hb.view(), y.extents()), [](double v, index_t) { return v; });
  }
  SECTION("two batch axes, one broadcast") {
    const auto ha = random_host<float, 4>({2, 3, m, k}, g);
    const auto hb = random_host<float, 3>({3, k, n}, g);
    auto y = poisoned<float, 4>({2, 3, m, n});
    if constexpr (on_device) {
      // [2, 3] against [1, 3]: b's batch offsets are not one stride; cuBLASLt cannot take it.
      CHECK_THROWS_WITH(y = loom::matmul(in_space(ha), in_space(hb)), Contains("loom::contiguous"));
      y = loom::matmul(in_space(ha), loom::contiguous(in_space(hb).broadcast_to(loom::shape<4>{2, 3, k, n})));
    } else {
      y = loom::matmul(in_space(ha), in_space(hb));
    }
    check<float>(y, ref_matmul(ha.view(), hb.view(), y.extents()), [](double v, index_t) { return v; });
  }
}

TEMPLATE_TEST_CASE("matmul fuses bias, relu, gelu(tanh), alpha and beta into one launch", "[linalg]" LOOM_TEST_TAG,
                   float, double, loom::half, loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("matmul epilogues"));
  const index_t m = 33, k = 7, n = 257;
  const auto ha = random_host<T, 2>({m, k}, g);
  const auto hb = random_host<T, 2>({k, n}, g);
  const auto hbias = random_host<T, 1>({n}, g);
  const auto hc = random_host<T, 2>({m, n}, g);
  const auto a = in_space(ha);
  const auto b = in_space(hb);
  const auto bias = in_space(hbias);
  const auto c = in_space(hc);
  const auto r = ref_matmul(ha.view(), hb.view(), loom::shape<2>{m, n});
  auto bias_at = [&](index_t i) { return loom_test::as_double(hbias.data()[i % n]); };
  auto c_at = [&](index_t i) { return loom_test::as_double(hc.data()[i]); };
  auto y = poisoned<T, 2>({m, n});
  std::function<double(double, index_t)> want;
  loom::matmul_info plan;
  bool bias_or_act = true;  // what a double product leaves to the elementwise kernel
  auto before = launches_now();
  SECTION("bias") {
    plan = loom::explain(y, loom::matmul(a, b) + bias);
    y = loom::matmul(a, b) + bias;
    want = [&](double v, index_t i) { return v + bias_at(i); };
    CHECK(loom::last_matmul().bias == !std::is_same_v<T, double>);
  }
  SECTION("bias on the left") {
    y = bias + loom::matmul(a, b);
    plan = loom::last_matmul();
    want = [&](double v, index_t i) { return v + bias_at(i); };
  }
  SECTION("relu") {
    y = loom::relu(loom::matmul(a, b));
    plan = loom::last_matmul();
    want = [&](double v, index_t) { return v < 0 ? 0.0 : v; };
  }
  SECTION("relu with bias") {
    y = loom::relu(loom::matmul(a, b) + bias);
    plan = loom::last_matmul();
    CHECK((plan.activation == loom::matmul_activation::relu || std::is_same_v<T, double>));
    want = [&](double v, index_t i) { return std::max(0.0, v + bias_at(i)); };
  }
  SECTION("gelu (tanh) with bias") {
    y = loom::gelu(loom::matmul(a, b) + bias, loom::approximate::tanh);
    plan = loom::last_matmul();
    CHECK((plan.activation == loom::matmul_activation::gelu_tanh || std::is_same_v<T, double>));
    want = [&](double v, index_t i) { return gelu_tanh_ref(v + bias_at(i)); };
  }
  SECTION("gelu (tanh) without bias") {
    y = loom::gelu(loom::matmul(a, b), loom::approximate::tanh);
    plan = loom::last_matmul();
    want = [&](double v, index_t) { return gelu_tanh_ref(v); };
  }
  SECTION("alpha * matmul + beta * c") {
    bias_or_act = false;
    y = 0.5f * loom::matmul(a, b) + c * 2.0f;
    plan = loom::last_matmul();
    CHECK(plan.accumulate);
    CHECK(plan.alpha == 0.5);
    CHECK(plan.beta == 2.0);
    want = [&](double v, index_t i) { return 0.5 * v + 2 * c_at(i); };
  }
  SECTION("matmul - c, with bias and relu") {
    y = loom::relu(loom::matmul(a, b) * 2 - c + bias);
    plan = loom::last_matmul();
    CHECK((plan.beta == -1.0 || std::is_same_v<T, double>));
    want = [&](double v, index_t i) { return std::max(0.0, 2 * v - c_at(i) + bias_at(i)); };
  }
  SECTION("y += matmul: C is the output itself") {
    bias_or_act = false;
    loom::copy(c, y);
    before = launches_now();
    y += loom::matmul(a, b);
    plan = loom::last_matmul();
    want = [&](double v, index_t i) { return v + c_at(i); };
  }
  // A double product fuses alpha and beta only; bias and activations take the elementwise kernel.
  const bool two = std::is_same_v<T, double> && bias_or_act;
  CHECK(launches_now() - before == (two ? 2u : 1u));
  CHECK(plan.path == (two ? loom::matmul_path::gemm_then_elementwise : loom::matmul_path::fused));
  CHECK(plan.launches == (two ? 2 : 1));
  CHECK(plan.on_device == on_device);
  check<T>(y, r, want, 1e-3);
}

TEST_CASE("matmul inside other expressions takes the GEMM and one elementwise kernel", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul two kernels"));
  const index_t m = 7, k = 33, n = 257;
  const auto ha = random_host<float, 2>({m, k}, g);
  const auto hb = random_host<float, 2>({k, n}, g);
  const auto hx = random_host<float, 2>({m, n}, g);
  const auto hbias = random_host<float, 1>({n}, g);
  const auto hcol = random_host<float, 2>({m, 1}, g);
  const auto a = in_space(ha);
  const auto b = in_space(hb);
  const auto x = in_space(hx);
  const auto col = in_space(hcol);
  const auto bias = in_space(hbias);
  const auto r = ref_matmul(ha.view(), hb.view(), loom::shape<2>{m, n});
  auto y = poisoned<float, 2>({m, n});
  std::function<double(double, index_t)> want;
  const auto before = launches_now();
  SECTION("tanh(matmul) * x") {
    CHECK(loom::explain(y, loom::tanh(loom::matmul(a, b)) * x).path == loom::matmul_path::gemm_then_elementwise);
    y = loom::tanh(loom::matmul(a, b)) * x;
    want = [&](double v, index_t i) { return std::tanh(v) * hx.data()[i]; };
  }
  SECTION("exact gelu (cuBLASLt's epilogue is the tanh form)") {
    y = loom::gelu(loom::matmul(a, b) + bias);
    want = [&](double v, index_t i) { return gelu_ref(v + hbias.data()[i % n]); };
  }
  SECTION("a column bias") {
    y = loom::matmul(a, b) + col;
    want = [&](double v, index_t i) { return v + hcol.data()[i / n]; };
  }
  SECTION("a row reduction of the product") {
    // The GEMM writes y, then the row kernel reduces each row of it (a row is
    // reduced completely before it is written).
    y = loom::row_sum(loom::matmul(a, b)) * 0.5f;
    std::vector<double> row(static_cast<std::size_t>(m), 0.0);
    for (index_t i = 0; i < m * n; ++i) row[static_cast<std::size_t>(i / n)] += r.value[static_cast<std::size_t>(i)];
    // Each product element carries its own rounding (tol * scale); n of them add up.
    double worst = 0;
    for (std::size_t i = 0; i < r.scale.size(); ++i) worst = std::max(worst, r.scale[i]);
    const double extra = 2.0 * static_cast<double>(n) * tol<float>() * worst;
    want = [&](double, index_t i) { return 0.5 * row[static_cast<std::size_t>(i / n)]; };
    CHECK(launches_now() - before == 2);
    check<float>(y, r, want, extra);
    return;
  }
  CHECK(launches_now() - before == 2);
  CHECK(loom::last_matmul().path == loom::matmul_path::gemm_then_elementwise);
  CHECK(loom::last_matmul().launches == 2);
  check<float>(y, r, want);
}

TEST_CASE("matmul of bf16 into a float output and with an empty inner axis", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul mixed"));
  SECTION("bf16 operands, float output, fused bias") {
    const auto ha = random_host<loom::bf16, 2>({33, 65}, g);
    const auto hb = random_host<loom::bf16, 2>({65, 7}, g);
    const auto hbias = random_host<float, 1>({7}, g);
    auto y = poisoned<float, 2>({33, 7});
    y = loom::matmul(in_space(ha), in_space(hb)) + in_space(hbias);
    CHECK(loom::last_matmul().path == loom::matmul_path::fused);
    check<float>(y, ref_matmul(ha.view(), hb.view(), y.extents()),
                 [&](double v, index_t i) { return v + hbias.data()[i % 7]; });
  }
  SECTION("k = 0 gives zeros (plus the rest of the expression)") {
    const auto ha = random_host<float, 2>({5, 0}, g);
    const auto hb = random_host<float, 2>({0, 3}, g);
    const auto hbias = random_host<float, 1>({3}, g);
    auto y = poisoned<float, 2>({5, 3});
    y = loom::matmul(in_space(ha), in_space(hb)) + in_space(hbias);
    CHECK(loom::last_matmul().path == loom::matmul_path::elementwise);
    const auto h = loom::to_host(y);
    for (index_t i = 0; i < h.size(); ++i) CHECK(h.data()[i] == hbias.data()[i % 3]);
  }
  SECTION("empty output") {
    auto y = poisoned<float, 2>({0, 3});
    y = loom::matmul(in_space(random_host<float, 2>({0, 4}, g)), in_space(random_host<float, 2>({4, 3}, g)));
    CHECK(loom::last_matmul().path == loom::matmul_path::empty);
  }
}

TEST_CASE("matmul errors name shapes and say what to do", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul errors"));
  const auto a = in_space(random_host<float, 2>({3, 4}, g));
  const auto b = in_space(random_host<float, 2>({5, 6}, g));
  CHECK_THROWS_AS(loom::matmul(a, b), loom::shape_error);
  CHECK_THROWS_WITH(loom::matmul(a, b), Contains("[3, 4]") && Contains("[5, 6]"));
  const auto b3 = in_space(random_host<float, 3>({2, 4, 6}, g));
  const auto a3 = in_space(random_host<float, 3>({3, 3, 4}, g));
  CHECK_THROWS_WITH(loom::matmul(a3, b3), Contains("[3, 3, 4]") && Contains("[2, 4, 6]"));
  auto y = poisoned<float, 2>({3, 7});
  const auto b47 = in_space(random_host<float, 2>({4, 6}, g));
  CHECK_THROWS_WITH(y = loom::matmul(a, b47), Contains("[3, 6]") && Contains("[3, 7]"));
  auto sq = in_space(random_host<float, 2>({4, 4}, g));
  CHECK_THROWS_AS(sq = loom::matmul(sq, sq), loom::aliasing_error);
  auto y2 = poisoned<float, 2>({3, 4});
  CHECK_THROWS_AS(y2 = loom::tanh(loom::matmul(a, sq)) * y2, loom::aliasing_error);
}

TEST_CASE("matmul refuses an expression that reads its output under a row reduction", "[linalg]" LOOM_TEST_TAG) {
  // The GEMM overwrites the output before the elementwise pass runs, so a
  // read of the old output anywhere in the tree (here under a row
  // reduction) would see the product instead.
  std::mt19937_64 g(loom_test::seed_for("matmul reads output under rows"));
  const index_t m = 5, k = 7, n = 33;
  const auto a = in_space(random_host<float, 2>({m, k}, g));
  const auto b = in_space(random_host<float, 2>({k, n}, g));
  const auto hy = random_host<float, 2>({m, n}, g);
  auto y = in_space(hy);
  auto unchanged = [&] {
    const auto h = loom::to_host(y);
    for (index_t i = 0; i < h.size(); ++i)
      if (!loom_test::same_bits(h.data()[i], hy.data()[i])) return false;
    return true;
  };
  const auto before = launches_now();
  SECTION("the output itself") {
    CHECK_THROWS_WITH(y = loom::matmul(a, b) + loom::row_sum(y), Contains("reads the output") && Contains("[5, 33]"));
  }
  SECTION("a view of the output, nested in a map") {
    auto yv = y.slice(loom::whole, loom::range(0, n));
    CHECK_THROWS_AS(y = loom::relu(loom::matmul(a, b) * 2.0f - loom::row_max(yv * 3.0f)), loom::aliasing_error);
  }
  SECTION("under two nested row reductions") {
    CHECK_THROWS_AS(y = loom::matmul(a, b) / loom::row_sum(loom::exp(y - loom::row_max(y))), loom::aliasing_error);
  }
  CHECK(launches_now() == before);
  CHECK(unchanged());
}
