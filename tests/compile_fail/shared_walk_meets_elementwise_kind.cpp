// SPDX-License-Identifier: Apache-2.0
// expect: loom: the shared kernel's walk
#include <loom/exec/shared_params.hpp>

#include <type_traits>

// A node kind that computes each element from its children's at the same
// coordinates (elementwise_inner) is entered by the shared kernel's walk,
// which then needs a rule for it: without one the build stops instead of
// keeping the node whole.
struct my_map_node {};
struct my_bound_map {};
template <>
struct loom::detail::elementwise_inner<my_map_node> : std::true_type {};

auto f(const my_map_node& n, const my_bound_map& b) {
  return loom::detail::param_sharer<loom::detail::type_list<>>::share(n, b);
}
