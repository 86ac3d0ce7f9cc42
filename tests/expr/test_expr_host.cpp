// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "expr_cases.inl"

TEST_CASE("fast_divmod divides exactly", "[expr][detail]") {
  std::mt19937_64 g(loom_test::seed_for("divmod"));
  for (int k = 0; k < 200000; ++k) {
    std::uint64_t d = (g() >> (1 + g() % 63)) | 1;
    if (k % 3 == 0) d = g() % 1000 + 1;
    if (k % 7 == 0) d = std::uint64_t{1} << (g() % 63);
    const loom::detail::fast_divmod f(d);
    for (std::uint64_t n : {std::uint64_t{0}, d - 1, d, d + 1, (std::uint64_t{1} << 63) - 1, g() >> 1, g() >> 30}) {
      if (n >> 63) continue;
      std::uint64_t q, r;
      f.divmod(n, q, r);
      if (q != n / d || r != n % d) {
        INFO("n = " << n << ", d = " << d);
        REQUIRE(q == n / d);
        REQUIRE(r == n % d);
      }
    }
  }
}

TEST_CASE("expression nodes are trivially copyable", "[expr]") {
  loom::host_tensor<float, 2> x({2, 3});
  auto e = loom::gelu(x * 2 + loom::where(x > 0, x, 1.0f));
  STATIC_REQUIRE(std::is_trivially_copyable_v<decltype(e)>);
  STATIC_REQUIRE(loom::expression<decltype(e)>);
  STATIC_REQUIRE(loom::expression<loom::host_tensor<float, 2>>);
  STATIC_REQUIRE(!loom::expression<float>);
  STATIC_REQUIRE(decltype(e)::rank == 2);
}

TEST_CASE("bind_for_read evaluates an expression without an output", "[expr][detail]") {
  loom::host_tensor<float, 2> x({3, 4});
  for (loom::index_t i = 0; i < 12; ++i) x.data()[i] = static_cast<float>(i);
  loom::host_tensor<float, 1> b({4}, {1, 2, 3, 4});
  loom::detail::bind_info info;
  const auto bound = loom::detail::bind_for_read(x * b + 1, loom::shape<2>{3, 4}, info);
  CHECK_FALSE(info.contiguous);  // b is broadcast
  const loom::index_t idx[2] = {2, 3};
  CHECK(bound.at(idx) == 11.0f * 4 + 1);
}
