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
