// SPDX-License-Identifier: Apache-2.0
// expect: loom: this node kind cannot be bound into a kernel
#include <loom/exec/assign.hpp>

// A node kind that states its children but has no bind_node cannot enter a kernel.
struct my_node : loom::detail::node_tag {
  using value_type = float;
  using space = loom::host;
  static constexpr std::size_t rank = 1;
  loom::shape<1> extents() const { return {4}; }
};
template <>
struct loom::detail::children_of<my_node> : loom::detail::no_children<my_node> {};

void f(loom::host_tensor<float, 1>& y, const my_node& n) { y = n; }
