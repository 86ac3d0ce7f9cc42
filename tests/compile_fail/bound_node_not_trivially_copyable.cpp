// SPDX-License-Identifier: Apache-2.0
// expect: loom: the bound form of this node kind must be trivially copyable
#include <loom/exec/assign.hpp>

#include <string>

// A bound form that holds a std::string cannot be copied into a kernel.
struct my_bound {
  using compute = float;
  static constexpr std::size_t slots = 0;
  std::string name;
};
template <>
struct loom::detail::children_of<my_bound> : loom::detail::no_children<my_bound> {};

struct my_node : loom::detail::node_tag {
  using value_type = float;
  using space = loom::host;
  static constexpr std::size_t rank = 1;
  loom::shape<1> extents() const { return {4}; }
  template <std::size_t Base, class Out>
  my_bound bind_node(const Out&, loom::detail::bind_info&) const {
    return {};
  }
};
template <>
struct loom::detail::children_of<my_node> : loom::detail::no_children<my_node> {};

void f(loom::host_tensor<float, 1>& y, const my_node& n) { y = n; }
