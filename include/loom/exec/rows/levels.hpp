// SPDX-License-Identifier: Apache-2.0
#pragma once

// The passes of a row kernel's reductions. A row kernel computes its
// reductions level by level: a reduction's level is 0 when its argument
// reads no row result, else one more than the highest level among the
// results it reads (the reductions it holds, and the slots that shared
// copies read: bound_slot_ref). The reductions of one level that differ in
// type take one pass over the row together: `row_mean(x * x)` and
// `row_sum(dy * w * x)` (the RMS norm's backward) share one, and
// `row_sum(exp(x - row_max(x)))` takes the pass after row_max's. A reduction
// of the same type as an earlier one (first_same_slot: the copies of
// `row_mean(x)` in a layer norm written out) copies that one's result when a
// run-time check finds the same data (reuse_mask), and takes a pass of its
// own when not: so a pass holds each type once, and no more registers than
// its distinct reductions need. Each reduction sums its own values in its
// own order, whatever else its pass computes: the results are those of one
// pass per reduction, bit for bit.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/shared_rows.hpp"
#include "loom/expr/traverse.hpp"

namespace loom::detail::rows {
// The types of bound tree B's row reductions by slot, with their slot
// numbers set to 0: two reductions whose erased types agree compute the same
// function of their inputs.
template <class B, class Seq = std::make_index_sequence<slots_of<B>>>
struct erased_slot_types;
template <class B, std::size_t... S>
struct erased_slot_types<B, std::index_sequence<S...>> {
  using type = type_list<erase_slots_t<slot_type_t<B, S>>...>;
};

// The first slot up to S whose reduction has the same type as slot S (S if
// none before it): a candidate to reuse instead of recomputing. Identical
// row reductions (the two row_max(x) of a plainly written softmax) have
// identical types; a run-time check confirms they also read the same data.
template <class B, std::size_t S>
constexpr std::size_t first_same_slot() {
  using erased = typename erased_slot_types<B>::type;
  return index_in<erase_slots_t<slot_type_t<B, S>>>(erased{});
}

// The slot whose value node N reads from the row context: a row
// reduction's own (its value, in the passes after its own), a shared copy's
// (bound_slot_ref); the largest size_t for other nodes.
template <class N>
struct slot_read : slot_number<N> {};
template <class A, std::size_t Slot>
struct slot_read<bound_slot_ref<A, Slot>> : std::integral_constant<std::size_t, Slot> {};

template <class... C>
constexpr int highest_read_level(const int* levels, type_list<C...>);
// The highest level among the row results that node N reads in its pass (-1: none).
template <class N>
constexpr int highest_read_level(const int* levels) {
  int most = -1;
  if constexpr (slot_read<N>::value != ~std::size_t{0}) most = levels[slot_read<N>::value];
  if constexpr (!is_bound_row_reduce<N>::value) {
    const int below = highest_read_level(levels, child_types_t<N>{});
    most = below > most ? below : most;
  }
  return most;
}
template <class... C>
constexpr int highest_read_level([[maybe_unused]] const int* levels, type_list<C...>) {
  int most = -1;
  ((most = std::max(most, highest_read_level<C>(levels))), ...);
  return most;
}

// The level of each slot of bound tree B, whether it is a copy candidate
// (first_same_slot before it), and the number of levels. Slots are numbered
// in post-order and a shared copy reads an earlier slot, so every slot a
// reduction reads has a lower number.
template <class B>
struct slot_levels {
  static constexpr std::size_t n = slots_of<B>;
  static constexpr std::array<int, (n > 0 ? n : 1)> value = [] {
    std::array<int, (n > 0 ? n : 1)> levels{};
    [&]<std::size_t... S>(std::index_sequence<S...>) {
      ((levels[S] = 1 + highest_read_level<decltype(slot_type_t<B, S>::arg)>(levels.data())), ...);
    }(std::make_index_sequence<n>{});
    return levels;
  }();
  static constexpr std::array<bool, (n > 0 ? n : 1)> copy = []<std::size_t... S>(std::index_sequence<S...>) {
    return std::array<bool, (n > 0 ? n : 1)>{(first_same_slot<B, S>() != S)...};
  }(std::make_index_sequence<n>{});
  static constexpr int count = [] {
    int most = 0;
    for (std::size_t s = 0; s != n; ++s) most = std::max(most, value[s] + 1);
    return most;
  }();
};

// The slots of level L of bound tree B, ascending, as an index_sequence:
// the first of each type (Copies false: they share the level's pass), or
// the copy candidates (Copies true: each reused or in a pass of its own).
template <class B, int L, bool Copies>
struct level_slots {
  using lv = slot_levels<B>;
  static constexpr bool in(std::size_t s) { return lv::value[s] == L && lv::copy[s] == Copies; }
  static constexpr std::size_t count = [] {
    std::size_t k = 0;
    for (std::size_t s = 0; s != lv::n; ++s) k += in(s) ? 1 : 0;
    return k;
  }();
  static constexpr std::array<std::size_t, (count > 0 ? count : 1)> slots = [] {
    std::array<std::size_t, (count > 0 ? count : 1)> a{};
    std::size_t k = 0;
    for (std::size_t s = 0; s != lv::n; ++s)
      if (in(s)) a[k++] = s;
    return a;
  }();
  template <std::size_t... I>
  static std::index_sequence<slots[I]...> of(std::index_sequence<I...>);
  using type = decltype(of(std::make_index_sequence<count>{}));
};
template <class B, int L>
using level_firsts_t = typename level_slots<B, L, false>::type;
template <class B, int L>
using level_copies_t = typename level_slots<B, L, true>::type;

// The pass of slot s (when it runs): its level's shared pass for the first
// of a type, a pass of its own (numbered after the levels) for a copy
// candidate the run-time check did not find the same.
template <class B>
constexpr int pass_of_slot(std::size_t s) {
  return slot_levels<B>::copy[s] ? slot_levels<B>::count + static_cast<int>(s) : slot_levels<B>::value[s];
}

// The passes over a row before its output pass, given the reused slots
// (reuse_mask; only copy candidates are ever reused): one per level, and
// one per copy candidate not reused.
template <class B>
int passes_before_output(std::uint64_t reuse) {
  int copies = 0;
  for (std::size_t s = 0; s != slots_of<B>; ++s) copies += slot_levels<B>::copy[s] ? 1 : 0;
  return slot_levels<B>::count + copies - std::popcount(reuse);
}

}  // namespace loom::detail::rows
