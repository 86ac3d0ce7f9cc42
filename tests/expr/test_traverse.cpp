// SPDX-License-Identifier: Apache-2.0
// The one traversal: every node kind states its children (children_of), and
// the folds, visits and the transform built on it see every node of a tree.
#include <catch2/catch.hpp>

#include <string>
#include <type_traits>
#include <vector>

#include <loom/exec/rows.hpp>
#include <loom/linalg/matmul.hpp>
#include <loom/ops/arithmetic.hpp>
#include <loom/ops/math.hpp>
#include <loom/rng/random.hpp>

namespace ld = loom::detail;
using loom::index_t;

namespace {
template <class E>
using node_of = ld::node_t<E>;

template <class N>
struct is_broadcast : std::false_type {};
template <class E, std::size_t R>
struct is_broadcast<loom::broadcast_node<E, R>> : std::true_type {};
template <class N>
struct is_map : std::false_type {};
template <class F, class... C>
struct is_map<loom::map_node<F, C...>> : std::true_type {};
template <class N>
struct is_random : std::false_type {};
template <class D>
struct is_random<loom::random_node<D>> : std::true_type {};

// Counts the nodes of each kind that a visit reaches.
struct kinds {
  int leaves = 0, scalars = 0, maps = 0, broadcasts = 0, rows = 0, columns = 0, matmuls = 0;
  std::vector<const void*> leaf_data;
};
template <class N>
kinds count_kinds(const N& n) {
  kinds k;
  ld::visit(n, [&](const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if constexpr (ld::is_leaf_node<M>) {
      ++k.leaves;
      k.leaf_data.push_back(m.v.data());
    } else if constexpr (ld::is_scalar_node<M>) {
      ++k.scalars;
    } else if constexpr (ld::is_row_reduction<M>::value) {
      ++k.rows;
    } else if constexpr (ld::is_matmul<M>::value) {
      ++k.matmuls;
    } else if constexpr (is_broadcast<M>::value) {
      ++k.broadcasts;
    } else if constexpr (is_map<M>::value) {
      ++k.maps;
    } else {
      static_assert(ld::child_count_v<M> == 0);
      ++k.columns;
    }
  });
  return k;
}
}  // namespace

TEST_CASE("children_of states each node kind's children", "[expr]") {
  loom::host_tensor<float, 2> x({3, 5});
  loom::host_tensor<loom::bf16, 1> w({5});
  using leaf = node_of<decltype(x)>;
  using scalar = node_of<float>;
  static_assert(ld::child_count_v<leaf> == 0 && ld::child_count_v<scalar> == 0);
  using sum_t = decltype(x + w);
  static_assert(ld::child_count_v<sum_t> == 2);
  static_assert(std::is_same_v<ld::child_types_t<sum_t>, ld::type_list<leaf, node_of<decltype(w)>>>);
  using bc = decltype(loom::broadcast_to(w, loom::shape<2>{3, 5}));
  static_assert(ld::child_count_v<bc> == 1);
  using row = decltype(loom::row_sum(x));
  static_assert(std::is_same_v<ld::child_types_t<row>, ld::type_list<leaf>>);
  using col = decltype(loom::column_index(x));
  static_assert(ld::child_count_v<col> == 0);
  using mm = decltype(loom::matmul(x, x.t()));
  static_assert(ld::child_count_v<mm> == 0);
  // The binder's kernel-side nodes state theirs too.
  static_assert(
      ld::child_count_v<ld::bound_map<loom::fn::add, float, ld::bound_leaf<float, 2>, ld::bound_scalar<float>>> == 2);
  static_assert(ld::child_count_v<ld::bound_row_reduce<loom::fn::row_sum_op, float, 0, ld::bound_leaf<float, 2>>> == 1);
  static_assert(ld::child_count_v<ld::bound_column_index<2>> == 0);
  const auto e = x + w;
  CHECK(ld::child<0>(e).v.data() == x.data());
  CHECK(ld::child<1>(e).v.data() == w.data());
}

TEST_CASE("folds over the tree count every node kind, row reductions and matmul included", "[expr]") {
  loom::host_tensor<float, 2> x({3, 5});
  loom::host_tensor<loom::half, 2> h({3, 5});
  loom::host_tensor<double, 1> d({5});
  const auto e = loom::exp(x - loom::row_max(h)) / loom::row_sum(loom::exp(x - loom::row_max(d * 2.0)));
  using E = std::remove_cvref_t<decltype(e)>;
  static_assert(ld::node_slots<E>::value == 3);
  static_assert(ld::min_leaf_bits<E>::value == 8 * sizeof(loom::half));
  static_assert(ld::min_leaf_bits<node_of<float>>::value == 128);
  static_assert(ld::vector_width_of<E> == 8 && ld::vector_width_of<E, 1> == 16);
  static_assert(ld::matmul_count<E>::value == 0);
  const auto withmm = loom::row_sum(loom::matmul(x, x.t())) + loom::broadcast_to(d, loom::shape<2>{3, 5});
  static_assert(ld::matmul_count<std::remove_cvref_t<decltype(withmm)>>::value == 1);
  static_assert(!ld::matmul_broadcast<std::remove_cvref_t<decltype(withmm)>>);
  const auto under = loom::broadcast_to(loom::matmul(x, x.t()), loom::shape<3>{2, 3, 3});
  static_assert(ld::matmul_broadcast<std::remove_cvref_t<decltype(under)>>);
}

TEST_CASE("visit reaches every node in pre-order, under row reductions too", "[expr]") {
  loom::host_tensor<float, 2> x({3, 5});
  loom::host_tensor<float, 2> y({3, 5});
  loom::host_tensor<float, 1> w({5});
  const auto e = loom::exp(x - loom::row_max(y * 2.0f)) * loom::broadcast_to(w, loom::shape<2>{3, 5}) +
                 loom::cast<float>(loom::column_index(x));
  const kinds k = count_kinds(e);
  CHECK(k.leaves == 3);
  CHECK(k.scalars == 1);
  CHECK(k.rows == 1);
  CHECK(k.broadcasts == 1);
  CHECK(k.columns == 1);
  // + * exp - (*) cast: the six maps of the tree.
  CHECK(k.maps == 6);
  // Pre-order, left to right: x, then y under the reduction, then w.
  REQUIRE(k.leaf_data.size() == 3);
  CHECK(k.leaf_data[0] == x.data());
  CHECK(k.leaf_data[1] == y.data());
  CHECK(k.leaf_data[2] == w.data());
  std::vector<const void*> seen;
  ld::for_each_leaf(e, [&](const auto& leaf) { seen.push_back(leaf.v.data()); });
  CHECK(seen == k.leaf_data);
}

TEST_CASE("visit_down hands each node its parent's context", "[expr]") {
  loom::host_tensor<float, 2> x({3, 5});
  const auto e = x + loom::row_sum(x * loom::row_max(x));
  std::vector<int> depth_of_leaves;
  ld::visit_down(e, 0, [&](const auto& m, int depth) {
    if constexpr (ld::is_leaf_node<std::remove_cvref_t<decltype(m)>>) depth_of_leaves.push_back(depth);
    return depth + (ld::is_row_reduction<std::remove_cvref_t<decltype(m)>>::value ? 1 : 0);
  });
  CHECK(depth_of_leaves == std::vector<int>{0, 1, 2});
}

TEST_CASE("transform rebuilds a tree with nodes replaced", "[expr]") {
  loom::host_tensor<float, 2> x({3, 5});
  loom::host_tensor<float, 2> z({3, 5});
  const auto e = loom::row_sum(x * 2.0f) + x;
  // Every leaf that reads x reads z instead.
  const auto t = ld::transform(e, [&](const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if constexpr (ld::is_leaf_node<M>)
      return M(z.view());
    else
      return m;
  });
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(t)>, std::remove_cvref_t<decltype(e)>>);
  std::vector<const void*> seen;
  ld::for_each_leaf(t, [&](const auto& leaf) { seen.push_back(leaf.v.data()); });
  CHECK(seen == std::vector<const void*>{z.data(), z.data()});
  // The found node is the tree's own (a reference, not a copy).
  const auto withmm = loom::matmul(x, z.t()) * 2.0f;
  CHECK(&ld::find_matmul(withmm) == &ld::child<0>(withmm));
}

TEST_CASE("the random leaf states no children and every walk sees it, under row reductions too", "[expr]") {
  loom::host_tensor<float, 2> x({3, 5});
  static_assert(ld::child_count_v<std::remove_cvref_t<decltype(loom::rand(1))>> == 0);
  static_assert(ld::child_count_v<ld::bound_random<loom::fn::uniform_bits<float>, 2>> == 0);
  const auto e = x * loom::rand(1) + loom::row_sum(x * loom::randn(2));
  using E = std::remove_cvref_t<decltype(e)>;
  static_assert(ld::tree_sum_v<E, is_random> == 2);
  static_assert(ld::node_slots<E>::value == 1);
  int randoms = 0;
  ld::visit(e, [&](const auto& m) {
    if constexpr (is_random<std::remove_cvref_t<decltype(m)>>::value) ++randoms;
  });
  CHECK(randoms == 2);
  // A random leaf reads no memory: the leaves that do are the two reads of x.
  std::vector<const void*> seen;
  ld::for_each_leaf(e, [&](const auto& leaf) { seen.push_back(leaf.v.data()); });
  CHECK(seen == std::vector<const void*>{x.data(), x.data()});
}
