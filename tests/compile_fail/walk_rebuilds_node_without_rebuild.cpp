// SPDX-License-Identifier: Apache-2.0
// expect: loom: a walk that rebuilds trees entered a node kind whose children_of states no rebuild
#include <loom/expr/traverse.hpp>

#include <type_traits>

// A node kind with a child but no children_of<N>::rebuild cannot pass
// through a walk that rebuilds the tree around it.
struct leaf {};
struct wrapper {
  leaf e;
};
template <>
struct loom::detail::children_of<leaf> : loom::detail::no_children<leaf> {};
template <>
struct loom::detail::children_of<wrapper> : loom::detail::one_child_e<leaf> {};

struct keep_all {
  template <class N, class C>
  static constexpr C inner(C c) {
    return c;
  }
  template <class N, class M, class C>
  static M finish(const N&, const M& m, C) {
    return m;
  }
};

auto f(const wrapper& w) { return loom::detail::rewrite_down<keep_all>(w, std::true_type{}); }
