// SPDX-License-Identifier: Apache-2.0
#pragma once

// Computed values in the row cache. A row kernel makes one pass over each
// row per level of its reductions (levels.hpp) and one for the output; a
// subtree that two passes evaluate (e = exp(x - row_max(x)) under
// row_sum(e) and again in e / row_sum(e)) is computed by the first, stored in
// the row cache, and read back by the later ones instead of being computed
// again.
//
// Which subtrees can be kept is decided from the tree's type: a map of two
// or more operations that change along the row, whose type (slot numbers
// aside) occurs in two or more passes of the tree and that no such subtree
// holds, is wrapped in a bound_kept node, in trees of at most
// max_kept_tree_leaves leaf occurrences.
// At launch, plan_row_values decides per occurrence, in the order the passes
// run: the first live occurrence stores, a later one in another pass that
// computes the same value of the same data (same_as, same row length) reads.
// The values are kept in the subtree's compute type, so a read gives the bits
// the computation would give.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/simd/dispatch.hpp"
#include "loom/exec/rows/levels.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/row_value.hpp"
#include "loom/expr/shared_rows.hpp"
#include "loom/expr/traverse.hpp"

namespace loom::detail::rows {
//! What an occurrence of a kept subtree does in its pass.
enum class kept_mode : std::uint8_t {
  compute,  // computes the value (the value is not kept)
  store,    // computes the value and stores it in the row cache
  read      // reads the value a earlier pass stored
};

// The run-time state of a kept subtree, set by plan_row_values (mode, off)
// and per row by rebase_row (row).
struct kept_state {
  unsigned char* row = nullptr;  // this row's values in the cache of its group of threads
  std::uint32_t off = 0;         // byte offset of the values in the cache of a group
  kept_mode mode = kept_mode::compute;
};

// A subtree of a row kernel's tree whose value one pass may keep for later
// passes. R is the rank of the output (its last index is the column).
template <std::size_t R, class B>
struct bound_kept : kept_state {
  using compute = typename B::compute;
  template <int vector_width>
  struct regs {
    typename B::template regs<vector_width> in;
    index_t c0;
  };
  static constexpr std::size_t slots = slots_of<B>;
  B in;

  template <class Ctx>
  LOOM_HD LOOM_HOST_INLINE compute at(const index_t* idx, const Ctx& ctx) const {
    compute* const values = reinterpret_cast<compute*>(row);
    if (mode == kept_mode::read) return values[idx[R - 1]];
    const compute v = in.at(idx, ctx);
    if (mode == kept_mode::store) values[idx[R - 1]] = v;
    return v;
  }
  template <int vector_width>
  LOOM_HD LOOM_HOST_INLINE void row_load(const index_t* lead, index_t c0, regs<vector_width>& r) const {
    r.c0 = c0;
    if (mode != kept_mode::read) in.template row_load<vector_width>(lead, c0, r.in);
  }
  template <int vector_width, class Ctx>
  LOOM_HD LOOM_HOST_INLINE compute elem(const regs<vector_width>& r, int j, const Ctx& ctx) const {
    compute* const values = reinterpret_cast<compute*>(row);
    if (mode == kept_mode::read) return values[r.c0 + j];
    const compute v = in.template elem<vector_width>(r.in, j, ctx);
    if (mode == kept_mode::store) values[r.c0 + j] = v;
    return v;
  }
  //! The same subtree over the same data.
  template <class B2>
  bool same_as(const bound_kept<R, B2>& o) const {
    return in.same_as(o.in);
  }
};
}  // namespace loom::detail::rows

namespace loom::detail {
template <std::size_t R, class B>
struct children_of<rows::bound_kept<R, B>> {
  using types = type_list<B>;
  template <std::size_t, class M>
  LOOM_HD static auto& get(M& n) {
    return n.in;
  }
  template <class C>
  using rebind = rows::bound_kept<R, C>;
  template <class C>
  static rows::bound_kept<R, C> rebuild(const rows::bound_kept<R, B>& n, const C& c) {
    return {static_cast<const rows::kept_state&>(n), c};
  }
};
}  // namespace loom::detail

namespace loom::detail::rows {

template <class N>
struct is_bound_kept : std::false_type {};
template <std::size_t R, class B>
struct is_bound_kept<bound_kept<R, B>> : std::true_type {};

// A node that reads something along the row: a node without children that
// is not a scalar (a leaf, the column index, a random leaf).
template <class N>
struct reads_row : std::bool_constant<child_count_v<N> == 0> {};
template <class C>
struct reads_row<bound_scalar<C>> : std::false_type {};
template <class T, std::size_t R>
struct reads_row<bound_row_value_leaf<T, R>> : std::false_type {};
// A later copy of a shared row reduction reads the reduction's result.
template <class A, std::size_t Slot>
struct reads_row<bound_slot_ref<A, Slot>> : std::false_type {};
template <class N>
struct is_bound_slot_ref : std::false_type {};
template <class A, std::size_t Slot>
struct is_bound_slot_ref<bound_slot_ref<A, Slot>> : std::true_type {};

template <class E>
struct erased_as {
  template <class N>
  struct test : std::bool_constant<std::is_same_v<erase_slots_t<N>, E>> {};
};

// Whether node N's value changes along the row in its own pass: it reads
// the row below it, not counting what a row reduction below it reads (a
// reduction's result is one value per row).
template <class N, class L = child_types_t<N>>
struct varies_along_row;
template <class N, class... C>
struct varies_along_row<N, type_list<C...>>
    : std::bool_constant<!is_bound_row_reduce<N>::value &&
                         (reads_row<N>::value || (false || ... || varies_along_row<C>::value))> {};

// The number of maps in N that change along the row, in N's own pass.
template <class N, class L = child_types_t<N>>
struct row_varying_maps;
template <class N, class... C>
struct row_varying_maps<N, type_list<C...>>
    : std::integral_constant<std::size_t, is_bound_row_reduce<N>::value
                                              ? 0
                                              : std::size_t{is_bound_map_node<N>::value && varies_along_row<N>::value} +
                                                    (std::size_t{0} + ... + row_varying_maps<C>::value)> {};

// The passes that evaluate the occurrences of a subtree whose type, slots
// aside, is E: each occurrence is named by the type, slots aside, of its
// innermost enclosing row reduction (Out for the output pass), so that
// identical reductions, which run once, count as one pass.
struct output_pass {};
template <class L>
struct first_non_void {
  using type = void;
};
template <class T, class... Rest>
struct first_non_void<type_list<T, Rest...>> {
  using type = std::conditional_t<std::is_void_v<T>, typename first_non_void<type_list<Rest...>>::type, T>;
};
template <class E, class Pass, class N, class L = child_types_t<N>>
struct passes_of;
template <class E, class Pass, class N, class... C>
struct passes_of<E, Pass, N, type_list<C...>> {
  using inner = std::conditional_t<is_bound_row_reduce<N>::value, erase_slots_t<N>, Pass>;
  // Whether an occurrence lies in a pass other than `First`.
  template <class First>
  static constexpr bool other_than() {
    if constexpr (std::is_same_v<erase_slots_t<N>, E>)
      return !std::is_same_v<Pass, First>;
    else
      return (false || ... || passes_of<E, inner, C>::template other_than<First>());
  }
  // The pass of the first occurrence (void: none).
  using first = typename first_non_void<std::conditional_t<std::is_same_v<erase_slots_t<N>, E>, type_list<Pass>,
                                                           type_list<typename passes_of<E, inner, C>::first...>>>::type;
};

// Whether map N of tree Root may be kept: it computes two or more
// operations that change along the row (one operation on rows read from the
// cache costs about what reading its value back does, and a kept value
// takes cache and registers), and its type, slots aside, occurs in two or
// more passes of Root (identical reductions count once). A subtree that
// occurs in one pass only, such as `c * c` in each copy of layer_norm's
// variance `row_mean(c * c)`, is computed by that pass alone.
template <class Root, class N>
constexpr bool shared_by_passes() {
  if constexpr (row_varying_maps<N>::value < 2) {
    return false;
  } else {
    using E = erase_slots_t<N>;
    using first = typename passes_of<E, output_pass, Root>::first;
    return passes_of<E, output_pass, Root>::template other_than<first>();
  }
}

// Whether Root has a subtree that may be kept (shared_by_passes) and holds a
// subtree of type E (slots aside) without being one.
template <class Root, class E>
struct held_by_shared {
  template <class M>
  struct test : std::bool_constant<!std::is_same_v<erase_slots_t<M>, E> &&
                                   (tree_sum_v<M, erased_as<E>::template test> > 0) && shared_by_passes<Root, M>()> {};
};

// Whether map N of tree Root is wrapped: it may be kept (shared_by_passes)
// and no subtree that may be kept holds it. Only the outermost values are
// kept: a softmax with a bias keeps e = exp(z - row_max(z)), not also z
// inside it; each kept value takes registers in every pass that stores or
// reads it, and two nested ones exceed the vector kernel's registers on
// sm_90 (docs/performance.md).
template <class Root, class N>
constexpr bool value_candidate() {
  if constexpr (!shared_by_passes<Root, N>())
    return false;
  else
    return !tree_any_v<Root, held_by_shared<Root, erase_slots_t<N>>::template test>;
}

// The host's precomputed subtrees (precomputed.hpp): computed before the
// passes, so nothing inside them is kept.
template <std::size_t R, class B>
struct bound_precomputed;
template <class N>
struct is_bound_precomputed : std::false_type {};
template <std::size_t R, class B>
struct is_bound_precomputed<bound_precomputed<R, B>> : std::true_type {};
// A read of a precomputed value costs what reading an input does: the maps
// above it count only their own operations.
template <std::size_t R, class B>
struct row_varying_maps<bound_precomputed<R, B>, type_list<B>> : std::integral_constant<std::size_t, 0> {};

// Rebuilds a bound tree with its candidates wrapped in bound_kept, every
// occurrence alike (also one inside another), so that equal subtrees keep
// equal types and identical reductions are still found; nothing inside a
// precomputed subtree:
// rewrite_down<value_keeper<Root, R>>(b, std::true_type{}) (the context:
// whether the node may be wrapped).
template <class Root, std::size_t R>
struct value_keeper {
  template <class N, class C>
  static constexpr auto inner(C c) {
    if constexpr (is_bound_precomputed<N>::value)
      return std::false_type{};
    else
      return c;
  }
  template <class N, class M, class C>
  static auto finish(const N&, const M& m, C) {
    if constexpr (!C::value)
      return m;
    else if constexpr (value_candidate<Root, N>())
      return bound_kept<R, M>{{}, m};
    else
      return m;
  }
};

// The most leaf occurrences a tree may have and keep values. A kept value
// costs registers in every pass that stores or reads it (its state, and in
// the vector form the values of the pass that stores it next to those it
// computes); with more leaves the vector form already holds vector_width
// values per leaf in registers, and a kept value costs more registers than
// computing it again (softmax with a bias and a temperature: 8 leaves;
// cross_entropy_backward's gradient: 9; layer_norm_backward_input: 38;
// docs/performance.md has the ptxas figures). Such a tree runs as written
// on the device.
inline constexpr std::size_t max_kept_tree_leaves = 4;
// The host has no registers to spill: it keeps values in trees of up to
// this many leaf occurrences (the bound on the compile-time work of
// finding them, which grows with the square of the tree's size).
inline constexpr std::size_t host_max_kept_tree_leaves = 24;

//! A bound row tree with the subtrees that passes may share wrapped in
//! bound_kept (all computing until plan_row_values says otherwise), or `b`
//! itself when it has more than MaxLeaves leaf occurrences. R is the rank
//! of the output.
template <std::size_t R, std::size_t MaxLeaves = max_kept_tree_leaves, class B>
auto keep_values(const B& b) {
  if constexpr (tree_sum_v<B, is_bound_leaf> > MaxLeaves)
    return b;
  else
    return rewrite_down<value_keeper<B, R>>(b, std::true_type{});
}

// Whether computed values may be kept, from LOOM_ROW_CACHE_VALUES: unset,
// empty or 1 keeps them, 0 computes every value in every pass that uses it,
// anything else throws.
inline bool parse_row_cache_values(const char* e) {
  if (e == nullptr || *e == '\0' || std::string(e) == "1") return true;
  if (std::string(e) == "0") return false;
  throw value_error(std::string("loom: LOOM_ROW_CACHE_VALUES must be 0 or 1, got '") + e + "'");
}

// Whether computed values may be kept: read from the environment once; tests
// may set it.
inline bool& row_cache_values() {
  static bool on = parse_row_cache_values(std::getenv("LOOM_ROW_CACHE_VALUES"));
  return on;
}

// The position of a node in a row kernel: the length of the row it is read
// along, the pass that evaluates it (the slot of the innermost enclosing
// reduction, -1 for the output pass) and whether that pass evaluates it (its
// pass runs and no enclosing kept subtree reads its value instead).
struct row_place {
  index_t len;
  int pass;
  bool live;
};
// The place of the children of node n placed at `at`, given the reuse mask.
template <class N>
row_place child_place(const N& n, const row_place& at, std::uint64_t reuse) {
  if constexpr (is_bound_row_reduce<N>::value) {
    constexpr int slot = static_cast<int>(N::slot);
    return row_place{n.cols, slot, ((reuse >> slot) & 1) == 0};
  } else if constexpr (is_bound_kept<N>::value) {
    return row_place{at.len, at.pass, at.live && n.mode != kept_mode::read};
  } else {
    return at;
  }
}

// What plan_row_values found: the distinct values kept (each stored once per
// row and read by a later pass) and the cache bytes they take per row.
struct row_values_plan {
  int kept = 0;
  std::size_t bytes = 0;
};

// One live occurrence of a kept subtree.
struct kept_occurrence {
  kept_state* node;
  const void* type;
  int pass;
  index_t len;
  std::size_t bytes;  // of one row of values
  int source;         // a reader: the index of the occurrence it reads
  bool read_later;    // a storer: some later pass reads it
};

template <class T>
struct kept_type_key {
  static constexpr char id = 0;
};

// Sets every kept subtree of `b` to compute its value.
template <class B>
void compute_all_values(B& b) {
  visit_if<is_bound_kept>(b, [](auto& n) { n.mode = kept_mode::compute; });
}

// Calls f(t), t a copy of bound tree `b`, in the host's loops over a row.
// Where every kept subtree of `b` stores (or every one reads), t's modes
// are set to that constant just before the call, so that in an optimized
// build, f inlined, the compiler drops the per-element test of the mode
// and can vectorize the loop; other trees, and unoptimized builds, take
// one copy of f that tests the mode of each kept subtree per element.
template <class B, class F>
LOOM_HOST_INLINE inline void with_kept_modes(const B& b, F&& f) {
#if defined(__OPTIMIZE__)
  if constexpr (tree_any_v<B, is_bound_kept>) {
    int stores = 0, reads = 0, all = 0;
    visit_if<is_bound_kept>(b, [&](const auto& n) {
      ++all;
      stores += n.mode == kept_mode::store;
      reads += n.mode == kept_mode::read;
    });
    const auto fixed = [&](kept_mode m) LOOM_HOST_INLINE {
      B t = b;
      visit_if<is_bound_kept>(t, [m](auto& n) { n.mode = m; });
      f(t);
    };
    if (stores == all) return fixed(kept_mode::store);
    if (reads == all) return fixed(kept_mode::read);
  }
#endif
  const B t = b;
  f(t);
}

// Decides, in the order the reductions run (levels.hpp: level by level, the
// first of each type in the level's shared pass in slot order, then the
// copy candidates in their own passes, a reused one's subtree evaluated by
// none; then the output pass), which occurrences of kept subtrees store
// their value and which read it, and lays the stored rows out from byte
// `base` of a group's cache (16-byte aligned each). Occurrences under the
// same reduction as the first one compute. Two reductions of one shared
// pass may store and read: the pass takes each column (each vector step)
// through its reductions in slot order, so the storer has written a column
// before the reader reads it, in the same thread (the same row length is
// checked).
// With `every_store` (the host) every occurrence that would compute stores
// its values in a row of its own that nothing reads, so that a pass
// without reads has its kept subtrees all storing (with_kept_modes).
template <class B>
row_values_plan plan_row_values(B& b, index_t cols, std::uint64_t reuse, std::size_t base, bool every_store = false) {
  compute_all_values(b);
  row_values_plan plan;
  if constexpr (tree_any_v<B, is_bound_kept>) {
    std::vector<kept_occurrence> occ;
    auto plan_pass = [&](int pass) {
      visit_down_if<is_bound_kept>(b, row_place{cols, -1, true}, [&](auto& n, const row_place& at) -> row_place {
        using N = std::remove_cvref_t<decltype(n)>;
        if constexpr (is_bound_kept<N>::value) {
          if (at.live && at.pass == pass) {
            using key = erase_slots_t<N>;
            int source = -1;
            for (std::size_t i = 0; i < occ.size() && source < 0; ++i) {
              const kept_occurrence& o = occ[i];
              if (o.type != &kept_type_key<key>::id || o.source >= 0 || o.pass == pass || o.len != at.len) continue;
              // The stored occurrence's node, by its address, to compare the data.
              visit_if<is_bound_kept>(b, [&](auto& m) {
                using M = std::remove_cvref_t<decltype(m)>;
                if constexpr (std::is_same_v<erase_slots_t<M>, key>)
                  if (static_cast<kept_state*>(&m) == o.node && n.same_as(m)) source = static_cast<int>(i);
              });
            }
            const std::size_t bytes = (static_cast<std::size_t>(at.len) * sizeof(typename N::compute) + 15) / 16 * 16;
            occ.push_back({&n, &kept_type_key<key>::id, pass, at.len, bytes, source, false});
            if (source >= 0) {
              occ[static_cast<std::size_t>(source)].read_later = true;
              n.mode = kept_mode::read;
            } else {
              n.mode = kept_mode::store;
            }
          }
        }
        return child_place(n, at, reuse);
      });
    };
    for (int level = 0; level < slot_levels<B>::count; ++level)
      for (bool copies : {false, true})
        for (std::size_t s = 0; s != slots_of<B>; ++s)
          if (slot_levels<B>::value[s] == level && slot_levels<B>::copy[s] == copies && ((reuse >> s) & 1) == 0)
            plan_pass(static_cast<int>(s));
    plan_pass(-1);
    std::size_t at = base;
    for (kept_occurrence& o : occ) {
      if (o.source >= 0) {
        o.node->off = occ[static_cast<std::size_t>(o.source)].node->off;
      } else if (o.read_later || every_store) {
        o.node->off = static_cast<std::uint32_t>(at);
        at += o.bytes;
        plan.kept += o.read_later;
      } else {
        o.node->mode = kept_mode::compute;
      }
    }
    plan.bytes = at - base;
  } else {
    (void)cols;
    (void)reuse;
    (void)base;
  }
  return plan;
}
}  // namespace loom::detail::rows
