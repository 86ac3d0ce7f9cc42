// SPDX-License-Identifier: Apache-2.0
// Gradients of matrix products checked against plain double loops on both
// executors. The including file defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <loom/linalg/matmul_backward.hpp>

#include "loom_test.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using space_t = LOOM_TEST_SPACE;

namespace {
constexpr bool on_device = std::is_same_v<space_t, loom::device>;
using act_t = loom::matmul_activation;

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
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::random_value<T>(g, -1, 1);
  return h;
}

template <class T, std::size_t R>
loom::tensor<T, R, space_t> poisoned(const loom::shape<R>& s) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::poison_value<T>();
  return in_space(h);
}

double gelu_tanh_grad_ref(double x) {
  const double c = std::sqrt(2 / 3.14159265358979323846), u = c * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

// Offset of the element of host view v at full coordinates c (rank R) with
// the last two replaced by row, col; v's batch axes broadcast.
template <class V, std::size_t R>
index_t offset_at(const V& v, const std::array<index_t, R>& c, index_t row, index_t col) {
  constexpr std::size_t RV = V::rank;
  index_t off = 0;
  for (std::size_t d = 0; d != RV; ++d) {
    index_t ix = d == RV - 2 ? row : d == RV - 1 ? col : c[R - RV + d];
    if (v.extent(d) == 1) ix = 0;
    off += ix * v.stride(d);
  }
  return off;
}

// The double reference: every gradient summed over the full product with a
// plain loop; `scale` holds sum |term| for the tolerance.
struct reference {
  std::vector<double> da, db, dbias, da_scale, db_scale, dbias_scale;
};

template <class A, class B, class DY, class Z>
reference reference_gradients(const A& a, const B& b, const DY& dy, const Z* z, act_t act) {
  constexpr std::size_t R = DY::rank;
  const index_t m = a.extent(A::rank - 2), k = a.extent(A::rank - 1), n = b.extent(B::rank - 1);
  reference r;
  r.da.assign(a.size(), 0), r.da_scale.assign(a.size(), 0);
  r.db.assign(b.size(), 0), r.db_scale.assign(b.size(), 0);
  r.dbias.assign(n, 0), r.dbias_scale.assign(n, 0);
  // Dense row-major indices of a and b (the references are laid out densely).
  const auto dense = [](const auto& v) {
    loom::shape<std::remove_cvref_t<decltype(v)>::rank> s{};
    index_t st = 1;
    for (std::size_t d = s.size(); d-- > 0;) s[d] = st, st *= v.extent(d);
    return s;
  };
  const auto sa = dense(a);
  const auto sb = dense(b);
  index_t batches = 1;
  for (std::size_t d = 0; d + 2 < R; ++d) batches *= dy.extent(d);
  std::array<index_t, R> c{};
  for (index_t bi = 0; bi < batches; ++bi) {
    index_t rem = bi;
    for (std::size_t d = R - 2; d-- > 0;) c[d] = rem % dy.extent(d), rem /= dy.extent(d);
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double g = loom_test::as_double(dy.data()[offset_at(dy, c, i, j)]);
        if (z) {
          const double zv = loom_test::as_double(z->data()[offset_at(*z, c, i, j)]);
          g *= act == act_t::relu ? (zv > 0 ? 1.0 : 0.0) : gelu_tanh_grad_ref(zv);
        }
        r.dbias[j] += g, r.dbias_scale[j] += std::fabs(g);
        for (index_t p = 0; p < k; ++p) {
          const double av = loom_test::as_double(a.data()[offset_at(a, c, i, p)]);
          const double bv = loom_test::as_double(b.data()[offset_at(b, c, p, j)]);
          // The same coordinates in the dense layouts of a and b.
          const index_t ia = offset_at(loom::view<const double, A::rank, loom::host>(nullptr, a.extents(), sa), c, i, p);
          const index_t ib = offset_at(loom::view<const double, B::rank, loom::host>(nullptr, b.extents(), sb), c, p, j);
          r.da[ia] += g * bv, r.da_scale[ia] += std::fabs(g * bv);
          r.db[ib] += av * g, r.db_scale[ib] += std::fabs(av * g);
        }
      }
  }
  return r;
}

template <class T>
double tol() {
  if constexpr (std::is_same_v<T, loom::bf16>)
    return 2e-2;  // dz and the gradients are rounded to bf16
  else if constexpr (std::is_same_v<T, float>)
    return 3e-5;
  else
    return 1e-12;
}

// Compares a gradient (any space and layout) with its reference.
template <class T, class G>
void check_gradient(const char* name, const G& got, const std::vector<double>& want,
                    const std::vector<double>& scale) {
  INFO(name);
  const auto h = loom::contiguous(loom::to_host(got));
  REQUIRE(static_cast<std::size_t>(h.size()) == want.size());
  for (index_t i = 0; i < h.size(); ++i) {
    const double v = loom_test::as_double(h.data()[i]);
    if (!(std::fabs(v - want[i]) <= tol<T>() * (1 + scale[i]))) {
      INFO("element " << i << ": got " << v << ", want " << want[i]);
      REQUIRE(false);
    }
  }
}

// Runs matmul_backward (value form, and the into form on poisoned outputs)
// for host operands a, b, dy (z for an activation) and checks every gradient.
template <class T, std::size_t RA, std::size_t RB, std::size_t R>
loom::matmul_backward_info check_case(const loom::host_tensor<T, RA>& ha, const loom::host_tensor<T, RB>& hb,
                                      const loom::host_tensor<T, R>& hdy, const loom::host_tensor<T, R>* hz,
                                      act_t act) {
  const auto hzv = hz ? hz->view() : hdy.view();
  const auto ref = reference_gradients(ha.view(), hb.view(), hdy.view(), hz ? &hzv : nullptr, act);
  const auto a = in_space(ha);
  const auto b = in_space(hb);
  const auto dy = in_space(hdy);
  const loom::matmul_backward_options o{.activation = act, .bias = true};
  auto g = hz ? loom::matmul_backward(a, b, dy, in_space(*hz), o) : loom::matmul_backward(a, b, dy, o);
  check_gradient<T>("da", g.da, ref.da, ref.da_scale);
  check_gradient<T>("db", g.db, ref.db, ref.db_scale);
  check_gradient<T>("dbias", g.dbias, ref.dbias, ref.dbias_scale);
  CHECK(g.info.activation_kernels == (hz ? 1 : 0));
  auto da = poisoned<T, RA>(ha.extents());
  auto db = poisoned<T, RB>(hb.extents());
  auto dbias = poisoned<T, 1>({hb.extent(RB - 1)});
  const auto info = hz ? loom::matmul_backward_into(da, db, dbias, a, b, dy, in_space(*hz), o)
                       : loom::matmul_backward_into(da, db, dbias, a, b, dy, o);
  check_gradient<T>("da (into)", da, ref.da, ref.da_scale);
  check_gradient<T>("db (into)", db, ref.db, ref.db_scale);
  check_gradient<T>("dbias (into)", dbias, ref.dbias, ref.dbias_scale);
  CHECK(info.launches == info.activation_kernels + info.bias_kernels + info.input_gemms + info.weight_gemms);
  return info;
}
}  // namespace

TEMPLATE_TEST_CASE("matmul_backward matches a double reference for matrices with bias and activations",
                   "[linalg]" LOOM_TEST_TAG, float, double, loom::bf16) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("matmul_backward matrices"));
  const std::array<index_t, 3> shapes[] = {{37, 19, 23}, {1, 7, 1}, {65, 1, 33}};
  for (const auto& s : shapes) {
    const index_t m = s[0], k = s[1], n = s[2];
    INFO("m " << m << " k " << k << " n " << n);
    const auto a = random_host<T, 2>({m, k}, g);
    const auto b = random_host<T, 2>({k, n}, g);
    const auto dy = random_host<T, 2>({m, n}, g);
    const auto z = random_host<T, 2>({m, n}, g);
    const auto plain = check_case(a, b, dy, static_cast<const loom::host_tensor<T, 2>*>(nullptr), act_t::none);
    CHECK(plain.input_gemms == 1);
    CHECK(plain.weight_gemms == 1);
    CHECK(plain.bias_kernels == 2);  // the sum, then its copy into dbias
    const auto relu = check_case(a, b, dy, &z, act_t::relu);
    CHECK(relu.activation_kernels == 1);
    CHECK(relu.launches == 5);
    check_case(a, b, dy, &z, act_t::gelu_tanh);
  }
}

TEST_CASE("matmul_backward sums a weight shared by a batch in one GEMM over the merged rows",
          "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul_backward shared weight"));
  const auto a = random_host<float, 3>({4, 13, 11}, g);
  const auto b = random_host<float, 2>({11, 6}, g);
  const auto dy = random_host<float, 3>({4, 13, 6}, g);
  const auto z = random_host<float, 3>({4, 13, 6}, g);
  const auto info = check_case(a, b, dy, &z, act_t::gelu_tanh);
  CHECK(info.weight_batch_merged);
  CHECK(info.weight_gemms == 1);
  CHECK(info.input_gemms == 1);
}

TEST_CASE("matmul_backward sums broadcast batch axes in a fixed order", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul_backward broadcast"));
  // a shared by the batch of b: da summed over 3 matrices.
  const auto a = random_host<double, 2>({9, 5}, g);
  const auto b = random_host<double, 3>({3, 5, 7}, g);
  const auto dy = random_host<double, 3>({3, 9, 7}, g);
  const auto info = check_case(a, b, dy, static_cast<const loom::host_tensor<double, 3>*>(nullptr), act_t::none);
  CHECK(info.input_gemms == 3);
  CHECK(info.weight_gemms == 1);
  // Both operands broadcast along different batch axes: [2, 1] x [3] -> [2, 3].
  const auto a4 = random_host<float, 4>({2, 1, 5, 7}, g);
  const auto b3 = random_host<float, 3>({3, 7, 4}, g);
  const auto dy4 = random_host<float, 4>({2, 3, 5, 4}, g);
  const auto z4 = random_host<float, 4>({2, 3, 5, 4}, g);
  const auto info4 = check_case(a4, b3, dy4, &z4, act_t::relu);
  CHECK(info4.input_gemms == 6);
  CHECK(info4.weight_gemms == 6);
  CHECK(!info4.weight_batch_merged);
  // Deterministic: the same bits twice.
  const auto x = in_space(a4), d = in_space(dy4);
  const auto w = in_space(b3);
  const auto g1 = loom::to_host(loom::matmul_backward(x, w, d).db);
  const auto g2 = loom::to_host(loom::matmul_backward(x, w, d).db);
  for (index_t i = 0; i < g1.size(); ++i) REQUIRE(g1.data()[i] == g2.data()[i]);
}

TEST_CASE("matmul_backward takes transposed and strided views and accumulates", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul_backward views"));
  const index_t m = 21, k = 17, n = 9;
  const auto a = random_host<float, 2>({m, k}, g);
  const auto b = random_host<float, 2>({k, n}, g);
  const auto dy = random_host<float, 2>({m, n}, g);
  const auto ref = reference_gradients(a.view(), b.view(), dy.view(),
                                       static_cast<const loom::view<const float, 2, loom::host>*>(nullptr), act_t::none);
  // a and dy transposed in memory, b every other column of a wider matrix.
  const auto at = in_space(loom::contiguous(a.view().t()));
  const auto dyt = in_space(loom::contiguous(dy.view().t()));
  loom::host_tensor<float, 2> wide_h({k, 2 * n});
  loom::copy(b.view(), wide_h.view().slice(loom::whole, loom::range(0, 2 * n, 2)));
  const auto wide = in_space(wide_h);
  const auto bs = wide.view().slice(loom::whole, loom::range(0, 2 * n, 2));
  // The gradients into transposed views of their buffers, added to ones.
  loom::host_tensor<float, 2> ones_a({k, m}), ones_b({n, k});
  loom::fill(ones_a, 1.0f), loom::fill(ones_b, 1.0f);
  auto da_t = in_space(ones_a);
  auto db_t = in_space(ones_b);
  const auto info = loom::matmul_backward_into(da_t.view().t(), db_t.view().t(), loom::skip, at.view().t(), bs,
                                               dyt.view().t(), {.accumulate = true});
  CHECK(info.input_gemms == 1);
  CHECK(info.weight_gemms == 1);
  CHECK(info.bias_kernels == 0);
  CHECK(info.launches == 2);  // C = D: the additions ride in the GEMMs' epilogues
  std::vector<double> da1(ref.da), db1(ref.db);
  for (auto& v : da1) v += 1;
  for (auto& v : db1) v += 1;
  check_gradient<float>("da", da_t.view().t(), da1, ref.da_scale);
  check_gradient<float>("db", db_t.view().t(), db1, ref.db_scale);
  // Only dbias, added to a dbias of twos.
  loom::host_tensor<float, 1> twos({n});
  loom::fill(twos, 2.0f);
  auto dbias = in_space(twos);
  loom::matmul_backward_into(loom::skip, loom::skip, dbias, at.view().t(), bs, dyt.view().t(), {.accumulate = true});
  std::vector<double> dbias2(ref.dbias);
  for (auto& v : dbias2) v += 2;
  check_gradient<float>("dbias", dbias, dbias2, ref.dbias_scale);
}

TEST_CASE("matmul_backward names the operand it refuses", "[linalg]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("matmul_backward errors"));
  const auto a = in_space(random_host<float, 2>({4, 3}, g));
  const auto b = in_space(random_host<float, 2>({3, 5}, g));
  const auto dy = in_space(random_host<float, 2>({4, 5}, g));
  const auto bad_dy = in_space(random_host<float, 2>({5, 4}, g));
  const auto bad_b = in_space(random_host<float, 2>({2, 5}, g));
  auto da = poisoned<float, 2>({4, 3});
  auto bad_db = poisoned<float, 2>({5, 3});
  auto bad_bias = poisoned<float, 1>({4});
  CHECK_THROWS_WITH(loom::matmul_backward(a, b, bad_dy), Contains("loom: matmul_backward: dy of shape [5, 4]") &&
                                                             Contains("product of shape [4, 5]"));
  CHECK_THROWS_AS(loom::matmul_backward(a, bad_b, dy), loom::shape_error);
  CHECK_THROWS_WITH(loom::matmul_backward_into(da, bad_db, loom::skip, a, b, dy),
                    Contains("loom: matmul_backward: db of shape [5, 3] for b of shape [3, 5]"));
  CHECK_THROWS_WITH(loom::matmul_backward_into(loom::skip, loom::skip, bad_bias, a, b, dy),
                    Contains("loom: matmul_backward: dbias of shape [4]"));
  CHECK_THROWS_WITH(loom::matmul_backward(a, b, dy, {.activation = act_t::relu}),
                    Contains("needs its input z"));
  CHECK_THROWS_WITH(loom::matmul_backward(a, b, dy, bad_dy, {.activation = act_t::relu}),
                    Contains("loom: matmul_backward: z of shape [5, 4]"));
  CHECK_THROWS_WITH(loom::matmul_backward(a, b, dy, dy, {}), Contains("options.activation is none"));
  // Nothing was written by the refused calls.
  const auto h = loom::to_host(da);
  for (index_t i = 0; i < h.size(); ++i) REQUIRE(std::isnan(h.data()[i]));
}
