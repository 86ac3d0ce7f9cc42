// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "tensor_cases.inl"

TEST_CASE("host tensors take values and check element access", "[tensor]") {
  loom::host_tensor<int, 2> t({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(t(1, 0) == 4);
  CHECK(t.at(0, 2) == 3);
  REQUIRE_THROWS_AS(t.at(2, 0), loom::index_error);
  REQUIRE_THROWS_WITH((loom::host_tensor<int, 2>({2, 2}, {1, 2, 3})), Contains("3 values given for shape [2, 2]"));
  CHECK_FALSE(t.is_pinned());
  CHECK(t.nbytes() == 6 * sizeof(int));
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
}
