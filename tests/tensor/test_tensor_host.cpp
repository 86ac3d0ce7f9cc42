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

TEST_CASE("tensors of more than 2^31 elements index with 64 bits", "[tensor]") {
  const loom::index_t n = (loom::index_t{1} << 31) + 7;
  loom::host_tensor<std::int8_t, 1> t({n});
  CHECK(t.size() == n);
  loom::fill(t, std::int8_t{3});
  // The strided second half: element offsets beyond 2^31 through the general path.
  auto tail = t.slice(range(n - 10, none, 3));
  CHECK(tail.extent(0) == 4);
  tail = tail * 2 + 1;
  CHECK(loom::last_eval().path == loom::eval_path::general);
  CHECK(t(n - 10) == 7);
  CHECK(t(n - 9) == 3);
  CHECK(t(n - 1) == 7);
  CHECK(t(0) == 3);
  auto r = t.slice(range(0, n - 7)).reshape(loom::shape<2>{(n - 7) / 1024, -1});
  CHECK(r.extent(1) == 1024);
}
