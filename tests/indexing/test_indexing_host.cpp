// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "indexing_cases.inl"

TEST_CASE("indexing and creation nodes give the same values through their vector forms", "[indexing][detail]") {
  std::mt19937_64 g(loom_test::seed_for("vector forms"));
  const auto table = random_host<float, 2>({37, 40}, g);
  const auto table16 = random_host<loom::bf16, 2>({37, 40}, g);
  const auto ids = random_ids<std::int64_t, 1>({9}, 37, g);
  const loom::shape<2> s{9, 40};
  loom::detail::bind_info info;
  // Rows of 40 floats (160 bytes) start 16-byte aligned: whole vector loads.
  const auto e = loom::detail::bind_for_read(loom::embedding(ids, table), s, info);
  REQUIRE(e.rows_ok);
  loom_test::check_vector_forms<4>(e, s[0] * s[1], s[1]);
  loom_test::check_vector_forms<8>(e, s[0] * s[1], s[1]);
  const auto e16 = loom::detail::bind_for_read(loom::embedding(ids, table16), s, info);
  loom_test::check_vector_forms<8>(e16, s[0] * s[1], s[1]);
  loom_test::check_vector_forms<4>(e16, s[0] * s[1], s[1]);  // 8 bytes a vector: element by element
  // One column in: no run is aligned.
  const loom::shape<2> s1{9, 39};
  const auto u = loom::detail::bind_for_read(loom::embedding(ids, table.slice(whole, range(1, none))), s1, info);
  loom_test::check_vector_forms<4>(u, s1[0] * s1[1], s1[1]);
  // index_select along rows of a strided source; gather (an index per element).
  const auto sel = loom::detail::bind_for_read(loom::index_select(table.t(), 1, ids), loom::shape<2>{40, 9}, info);
  loom_test::check_vector_forms<4>(sel, 40 * 9, 9);
  const auto gi = random_ids<std::int32_t, 2>({9, 40}, 37, g);
  const auto ga = loom::detail::bind_for_read(loom::gather(table, 0, gi), s, info);
  CHECK_FALSE(ga.rows_ok);
  loom_test::check_vector_forms<4>(ga, s[0] * s[1], s[1]);
  // Creation leaves and a join, broadcast to two dimensions.
  const auto ar = loom::detail::bind_for_read(loom::arange<float>(40) + loom::eye<float>(9, 40, 2), s, info);
  loom_test::check_vector_forms<4>(ar, s[0] * s[1], s[1]);
  const auto j =
      loom::detail::bind_for_read(loom::concat(table.slice(range(0, 4)), table.slice(range(4, 9)), 0), s, info);
  loom_test::check_vector_forms<4>(j, s[0] * s[1], s[1]);
}

TEST_CASE("the host's contiguous loop reads an embedding's rows of 64 elements or more as runs", "[indexing][detail]") {
  std::mt19937_64 g(loom_test::seed_for("host runs"));
  const auto table = random_host<float, 2>({37, 70}, g);
  const auto ids = random_ids<std::int64_t, 1>({9}, 37, g);
  const loom::shape<2> s{9, 70};
  loom::detail::bind_info info;
  const auto e = loom::detail::bind_for_read(loom::embedding(ids, table), s, info);
  STATIC_REQUIRE(loom::detail::segments_tree<std::remove_const_t<decltype(e)>>);
  CHECK(e.host_runs(loom::detail::host_min_period));
  // From row 2, column 5: the rest of id 2's row, 65 elements.
  auto moved = e;
  moved.rebase_linear(2 * 70 + 5);
  index_t len = 0;
  const auto run = moved.host_run(len);
  CHECK(len == 65);
  CHECK(run.p == table.data() + ids(2) * 70 + 5);
  // Rows of 63: run by run. An index per element: never a run.
  const loom::shape<2> s63{9, 63};
  CHECK_FALSE(loom::detail::bind_for_read(loom::embedding(ids, table.slice(whole, range(0, 63))), s63, info)
                  .host_runs(loom::detail::host_min_period));
  const auto gi = random_ids<std::int32_t, 2>({9, 70}, 37, g);
  CHECK_FALSE(loom::detail::bind_for_read(loom::gather(table, 0, gi), s, info).host_runs(loom::detail::host_min_period));
  // Fused with maps: runs; with an expression as the table, or with a
  // random leaf (values four to a Philox block): run by run.
  const auto fused = loom::detail::bind_for_read(loom::embedding(ids, table) * 2.0f + 1.0f, s, info);
  STATIC_REQUIRE(loom::detail::segments_tree<std::remove_const_t<decltype(fused)>>);
  const auto of_expr = loom::detail::bind_for_read(loom::embedding(ids, table * 2.0f), s, info);
  STATIC_REQUIRE_FALSE(loom::detail::segments_tree<std::remove_const_t<decltype(of_expr)>>);
  const auto dropped = loom::detail::bind_for_read(loom::dropout(loom::embedding(ids, table), 0.25f, 7), s, info);
  STATIC_REQUIRE_FALSE(loom::detail::segments_tree<std::remove_const_t<decltype(dropped)>>);
}

TEST_CASE("loom::grad differentiates through an embedding of a table it does not differentiate", "[indexing]") {
  std::mt19937_64 g(loom_test::seed_for("grad through embedding"));
  const auto table = random_host<float, 2>({11, 6}, g);
  const auto x = random_host<float, 2>({4, 6}, g);
  const auto dy = random_host<float, 2>({4, 6}, g);
  const auto ids = random_ids<std::int32_t, 1>({4}, 11, g);
  const auto l = loom::layer(
      [ids = ids.view()](auto a, auto t) { return a * loom::embedding(ids, t) + loom::arange<float>(6); });
  loom::host_tensor<float, 2> dx({4, 6});
  dx = loom::grad<0>(l)(x, table, dy);
  check_all(dx, [&](index_t i) { return double(dy(i / 6, i % 6) * table(ids(i / 6), i % 6)); });
}
