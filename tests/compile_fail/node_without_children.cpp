// SPDX-License-Identifier: Apache-2.0
// expect: loom: this expression node kind does not state its children
#include <loom/expr/expression.hpp>

// A node kind that does not specialize children_of cannot be walked.
struct my_node : loom::detail::node_tag {
  using value_type = float;
  using space = loom::host;
  static constexpr std::size_t rank = 1;
};

void f(const my_node& n) {
  loom::detail::for_each_leaf(n, [](const auto&) {});
}
