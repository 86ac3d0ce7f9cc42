// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "matmul_cases.inl"

TEST_CASE("matmul nodes are expressions, trivially copyable, and split assignments", "[linalg]") {
  loom::host_tensor<float, 2> a({2, 3}), b({3, 4});
  const auto m = loom::matmul(a, b);
  STATIC_REQUIRE(std::is_trivially_copyable_v<decltype(m)>);
  STATIC_REQUIRE(loom::expression<decltype(m)>);
  STATIC_REQUIRE(loom::contains_matmul<decltype(loom::tanh(m) * 2)>);
  STATIC_REQUIRE(!loom::contains_matmul<decltype(loom::tanh(a) * 2)>);
  CHECK(m.extents() == loom::shape<2>{2, 4});
  loom::host_tensor<float, 2> y({2, 4});
  CHECK(loom::explain(y, loom::tanh(a.slice(loom::whole, loom::range(0, 1))) * 2).path == loom::matmul_path::none);
  CHECK(loom::to_string(loom::explain(y, loom::relu(m))) == "fused: relu(A@B), 1 launch on the host");
}

namespace {
// The backends this build has: the BLAS (when linked) and loom's own kernel.
std::vector<loom::host_gemm_backend> backends() {
  std::vector<loom::host_gemm_backend> b;
  if (LOOM_HAS_BLAS) b.push_back(loom::host_gemm_backend::blas);
  b.push_back(loom::host_gemm_backend::loom);
  return b;
}
// Restores the backend a test started with.
struct backend_scope {
  loom::host_gemm_backend saved = loom::current_host_gemm_backend();
  ~backend_scope() { loom::set_host_gemm_backend(saved); }
};
}  // namespace

TEST_CASE("host gemm backend follows LOOM_HOST_GEMM and names itself", "[linalg]") {
  const char* env = std::getenv("LOOM_HOST_GEMM");
  const bool forced_loom = env && std::string(env) == "loom";
  backend_scope keep;
  CHECK(loom::current_host_gemm_backend() ==
        (LOOM_HAS_BLAS && !forced_loom ? loom::host_gemm_backend::blas : loom::host_gemm_backend::loom));
  CHECK_THAT(loom::env_report(), Contains("host matmul: "));
  loom::set_host_gemm_backend(loom::host_gemm_backend::loom);
  CHECK(loom::current_host_gemm_backend() == loom::host_gemm_backend::loom);
  CHECK_THAT(loom::host_gemm_backend_name(), Contains("loom's packed kernel"));
  if (LOOM_HAS_BLAS) {
    loom::set_host_gemm_backend(loom::host_gemm_backend::blas);
    CHECK_THAT(loom::host_gemm_backend_name(), !Contains("loom's packed kernel"));
  } else {
    CHECK_THROWS_AS(loom::set_host_gemm_backend(loom::host_gemm_backend::blas), loom::value_error);
  }
}

TEMPLATE_TEST_CASE("host gemm backends match a double reference across block edges and layouts", "[linalg]", float,
                   double, loom::half, loom::bf16) {
  using T = TestType;
  backend_scope keep;
  std::mt19937_64 g(loom_test::seed_for("host gemm backends"));
  // Past the output blocks (512 rows, 1024 columns), the kernel's packed
  // depth (256) and row chunk (96), and its register tile.
  const std::array<index_t, 3> shapes[] = {{515, 260, 33}, {7, 19, 1030}, {97, 1, 5}, {1, 300, 1}};
  for (const auto be : backends()) {
    loom::set_host_gemm_backend(be);
    INFO(loom::host_gemm_backend_name());
    for (const auto& s : shapes) {
      const index_t m = s[0], k = s[1], n = s[2];
      INFO("m " << m << " k " << k << " n " << n);
      const auto ha = random_host<T, 2>({m, k}, g);
      const auto hb = random_host<T, 2>({k, n}, g);
      const auto r = ref_matmul(ha.view(), hb.view(), loom::shape<2>{m, n});
      // The operands transposed in memory, and strided on both axes (packed for a BLAS).
      const auto hat = loom::contiguous(ha.view().t());
      auto wide = random_host<T, 2>({2 * n, 2 * k}, g);
      auto bs = wide.view().slice(loom::range(0, 2 * n, 2), loom::range(0, 2 * k, 2)).t();
      loom::copy(hb.view(), bs);
      auto y = poisoned<T, 2>({m, n});
      y = loom::matmul(ha, hb);
      check<T>(y, r, [](double v, index_t) { return v; });
      y = poisoned<T, 2>({m, n});
      y = loom::matmul(hat.view().t(), bs);
      check<T>(y, r, [](double v, index_t) { return v; });
    }
  }
}

TEST_CASE("host gemm backends broadcast batches and fuse every epilogue", "[linalg]") {
  backend_scope keep;
  std::mt19937_64 g(loom_test::seed_for("host gemm backends batch"));
  const index_t m = 67, k = 41, n = 131;
  const auto ha = random_host<float, 4>({3, 1, m, k}, g);
  const auto hb = random_host<float, 4>({1, 2, k, n}, g);
  const auto hbias = random_host<float, 1>({n}, g);
  const auto hc = random_host<float, 4>({3, 2, m, n}, g);
  const auto r = ref_matmul(ha.view(), hb.view(), loom::shape<4>{3, 2, m, n});
  for (const auto be : backends()) {
    loom::set_host_gemm_backend(be);
    INFO(loom::host_gemm_backend_name());
    auto y = poisoned<float, 4>({3, 2, m, n});
    y = loom::gelu(loom::matmul(ha, hb) * 0.5f + hc * 2.0f + hbias, loom::approximate::tanh);
    CHECK(loom::last_matmul().path == loom::matmul_path::fused);
    check<float>(y, r, [&](double v, index_t i) {
      return gelu_tanh_ref(0.5 * v + 2.0 * hc.data()[i] + hbias.data()[i % n]);
    }, 1e-5);
    y = loom::relu(loom::matmul(ha, hb) - hc);
    check<float>(y, r, [&](double v, index_t i) { return std::max(0.0, v - hc.data()[i]); });
  }
}
