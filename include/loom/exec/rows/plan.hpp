// SPDX-License-Identifier: Apache-2.0
#pragma once

// The rows executor's plan: the output layout and sinks, which reductions
// are computed once (identical ones reuse the first), the vector form, and
// the row cache (which input rows are copied on chip once and read there by
// every pass). Shared by the host and the CUDA row kernels.

#include <algorithm>
#include <bit>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/exec/rows/levels.hpp"
#include "loom/exec/rows/values.hpp"
#include "loom/expr/bound.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/expr/traverse.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail::rows {
// Coordinates of row `row` over the output's leading axes.
template <std::size_t R>
struct row_layout {
  index_t rows = 0;
  index_t cols = 0;
  fast_divmod div[R > 1 ? R - 1 : 1];
  LOOM_HD void lead_of(index_t row, index_t* lead) const {
    std::uint64_t rest = static_cast<std::uint64_t>(row);
    for (std::size_t d = R - 1; d-- > 0;) {
      std::uint64_t q, r;
      div[d].divmod(rest, q, r);
      lead[d] = static_cast<index_t>(r);
      rest = q;
    }
  }
};

template <class O, std::size_t R>
struct row_out {
  O* p;
  shape<R> st;
  LOOM_HD index_t offset(const index_t* lead, index_t c) const {
    index_t off = c * st[R - 1];
    for (std::size_t d = R - 1; d-- > 0;) off += lead[d] * st[d];
    return off;
  }
};

// Row outputs ("sinks"): where the output pass stores. A sink evaluates its
// trees for one column (`one`) or vector_width columns (`vec`, 16-byte loads and stores)
// and computes every value before storing any, so an output may alias an
// input under the same index map.
// An output of one column ([N, 1]: a row reduction kept as a column) never
// takes a vector store: a vector step covers 16 bytes of the smallest type,
// at least 2 elements for the output types loom has, more than the row
// holds; so it does not keep its reductions' passes from the vector loads.
template <class O, std::size_t R>
bool row_out_vector_ok(const view<O, R, device>& v) {
  if (v.extent(R - 1) == 1 && sizeof(O) < 16) return true;
  if (v.stride(R - 1) != 1 || reinterpret_cast<std::uintptr_t>(v.data()) % 16 != 0) return false;
  for (std::size_t d = 0; d + 1 < R; ++d)
    if ((v.stride(d) * static_cast<index_t>(sizeof(O))) % 16 != 0) return false;
  return true;
}

// One output, written by the root tree.
template <class O, std::size_t R>
struct row_sink1 {
  static constexpr std::size_t smallest = sizeof(O);
  row_out<O, R> o;
  //! Whether the host may store host_lanes columns at once (vec): last stride 1.
  bool host_vector_ok() const { return o.st[R - 1] == 1; }
  template <class B, class Ctx>
  LOOM_HD LOOM_HOST_INLINE void one(const B& b, const index_t* idx, const index_t* lead, index_t c,
                                    const Ctx& ctx) const {
    o.p[o.offset(lead, c)] = convert<O>(b.at(idx, ctx));
  }
  template <int vector_width, class B, class Ctx>
  LOOM_HD LOOM_HOST_INLINE void vec(const B& b, const index_t* lead, index_t c0, const Ctx& ctx) const {
    typename B::template regs<vector_width> r;
    b.template row_load<vector_width>(lead, c0, r);
    vec_regs<O, vector_width> v;
    LOOM_UNROLL
    for (int j = 0; j < vector_width; ++j) v.v[j] = convert<O>(b.template elem<vector_width>(r, j, ctx));
    vec_store<O, vector_width>(o.p + o.offset(lead, c0), v);
  }
};

// Child I of a multi-output root b for vector_width columns: its values as
// the output type O, from the registers r that b's row_load filled.
template <class O, std::size_t I, int vector_width, class B, class Regs, class Ctx>
LOOM_HD LOOM_HOST_INLINE vec_regs<O, vector_width> child_values(const B& b, const Regs& r, const Ctx& ctx) {
  vec_regs<O, vector_width> v;
  LOOM_UNROLL
  for (int j = 0; j < vector_width; ++j)
    v.v[j] = convert<O>(detail::get<I>(b.ch).template elem<vector_width>(detail::get<I>(r.c), j, ctx));
  return v;
}

// Two outputs of one shape: the root is a bound_map whose two children
// write them.
template <class O1, class O2, std::size_t R>
struct row_sink2 {
  static constexpr std::size_t smallest = sizeof(O1) < sizeof(O2) ? sizeof(O1) : sizeof(O2);
  row_out<O1, R> o1;
  row_out<O2, R> o2;
  bool host_vector_ok() const { return o1.st[R - 1] == 1 && o2.st[R - 1] == 1; }
  template <class B, class Ctx>
  LOOM_HD void one(const B& b, const index_t* idx, const index_t* lead, index_t c, const Ctx& ctx) const {
    const O1 v1 = convert<O1>(detail::get<0>(b.ch).at(idx, ctx));
    const O2 v2 = convert<O2>(detail::get<1>(b.ch).at(idx, ctx));
    o1.p[o1.offset(lead, c)] = v1;
    o2.p[o2.offset(lead, c)] = v2;
  }
  template <int vector_width, class B, class Ctx>
  LOOM_HD void vec(const B& b, const index_t* lead, index_t c0, const Ctx& ctx) const {
    typename B::template regs<vector_width> r;
    b.template row_load<vector_width>(lead, c0, r);
    const auto v1 = child_values<O1, 0, vector_width>(b, r, ctx);
    const auto v2 = child_values<O2, 1, vector_width>(b, r, ctx);
    vec_store<O1, vector_width>(o1.p + o1.offset(lead, c0), v1);
    vec_store<O2, vector_width>(o2.p + o2.offset(lead, c0), v2);
  }
};

// An output and per-row statistics: the root is a bound_map whose first
// child writes the output and each further child, constant along the row,
// one statistic ([..., 1]), stored once per row at column 0.
template <class O1, std::size_t R, class... OS>
struct row_sink_stats {
  static constexpr std::size_t smallest = sizeof(O1);
  row_out<O1, R> o1;
  tuple<row_out<OS, R>...> os;
  bool host_vector_ok() const { return o1.st[R - 1] == 1; }
  template <class B, class Ctx>
  LOOM_HD void one(const B& b, const index_t* idx, const index_t* lead, index_t c, const Ctx& ctx) const {
    const O1 v1 = convert<O1>(detail::get<0>(b.ch).at(idx, ctx));
    if (c == 0) store_stats(b, idx, lead, ctx, std::index_sequence_for<OS...>{});
    o1.p[o1.offset(lead, c)] = v1;
  }
  template <int vector_width, class B, class Ctx>
  LOOM_HD void vec(const B& b, const index_t* lead, index_t c0, const Ctx& ctx) const {
    typename B::template regs<vector_width> r;
    b.template row_load<vector_width>(lead, c0, r);
    const auto v1 = child_values<O1, 0, vector_width>(b, r, ctx);
    if (c0 == 0) store_stats_vec<vector_width>(b, r, lead, ctx, std::index_sequence_for<OS...>{});
    vec_store<O1, vector_width>(o1.p + o1.offset(lead, c0), v1);
  }

 private:
  // Each statistic is computed before any is stored (an output may be an
  // input under the same index map).
  template <class B, class Ctx, std::size_t... K>
  LOOM_HD void store_stats(const B& b, const index_t* idx, const index_t* lead, const Ctx& ctx,
                           std::index_sequence<K...>) const {
    const tuple<OS...> v(convert<OS>(detail::get<K + 1>(b.ch).at(idx, ctx))...);
    ((detail::get<K>(os).p[detail::get<K>(os).offset(lead, 0)] = detail::get<K>(v)), ...);
  }
  template <int vector_width, class B, class Regs, class Ctx, std::size_t... K>
  LOOM_HD void store_stats_vec(const B& b, const Regs& r, const index_t* lead, const Ctx& ctx,
                               std::index_sequence<K...>) const {
    const tuple<OS...> v(
        convert<OS>(detail::get<K + 1>(b.ch).template elem<vector_width>(detail::get<K + 1>(r.c), 0, ctx))...);
    ((detail::get<K>(os).p[detail::get<K>(os).offset(lead, 0)] = detail::get<K>(v)), ...);
  }
};

// Bit S set: slot S is computed by copying slot first_same_slot<S>.
template <class B, std::size_t... S>
std::uint64_t reuse_mask(const B& b, std::index_sequence<S...>) {
  static_assert(sizeof...(S) <= 64, "loom: more than 64 row reductions in one assignment");
  std::uint64_t mask = 0;
  [[maybe_unused]] auto one = [&](auto s_const) {
    constexpr std::size_t s = decltype(s_const)::value;
    constexpr std::size_t t = first_same_slot<B, s>();
    if constexpr (t != s) {
      if (slot_node<s>(b).same_as(slot_node<t>(b))) mask |= std::uint64_t{1} << s;
    }
  };
  (one(std::integral_constant<std::size_t, S>{}), ...);
  return mask;
}

// The longest reduced row among the slots of a bound tree.
template <class B, std::size_t... S>
index_t longest_row(const B& b, index_t at_least, std::index_sequence<S...>) {
  ((at_least = std::max(at_least, slot_node<S>(b).cols)), ...);
  return at_least;
}

// ---------------------------------------------------------------------------
// Row cache. A row kernel makes one pass over each row per level of its
// reductions (levels.hpp) and one for the output. Every distinct input row that two or more of those passes
// read is copied once into on-chip memory (shared memory on the device, a
// per-thread buffer on the host) and the passes read it there, so device
// memory is read once per element. The host copies rows only for trees that
// read an operand through coordinates; dense rows it reads in place. The tree is not compiled twice: its
// leaves are rebased onto the cached row (a pointer into the cache, leading
// strides 0, last stride 1), so the same code reads either memory. After
// the input rows, the cache holds the computed values that a pass keeps for
// later passes (values.hpp).

// Number of leaf occurrences in a bound tree.
template <class B>
inline constexpr std::size_t leaf_count = tree_sum_v<B, is_bound_leaf>;

// Visits every leaf of a bound tree in one fixed (pre-order) order as
// f(leaf, k, len, pass): k numbers the occurrences, len is the length of the
// rows the leaf is read along (`cols` at the top, a reduction's own inside
// it) and pass the slot of the innermost enclosing reduction (-1: the output
// pass; not_read: under a kept subtree whose pass reads the kept value).
inline constexpr int not_read = -2;
struct row_read {
  index_t len;
  int pass;
  bool live;
};
template <class F>
struct row_leaf_step {
  F& f;
  int& k;
  template <class N>
  LOOM_HD row_read operator()(N& n, const row_read& at) const {
    using M = std::remove_cv_t<N>;
    if constexpr (is_bound_leaf<M>::value) f(n, k++, at.len, at.live ? at.pass : not_read);
    if constexpr (is_bound_row_reduce<M>::value)
      return row_read{n.cols, static_cast<int>(M::slot), true};
    else if constexpr (is_bound_kept<M>::value)
      return row_read{at.len, at.pass, at.live && n.mode != kept_mode::read};
    else
      return at;
  }
};
template <class B, class F>
LOOM_HD void visit_row_leaves(B& b, index_t cols, F&& f) {
  int k = 0;
  visit_down_if<is_bound_leaf>(b, row_read{cols, -1, true}, row_leaf_step<std::remove_reference_t<F>>{f, k});
}

// Whether the vector form (vector_width columns per step) can serve a bound tree over
// rows of `cols` columns: every leaf read along rows of vector_width columns or more
// must allow row_load (bound_leaf::row_vector_ok). A leaf read only along
// shorter rows is never loaded as a vector (a pass's vector steps cover
// cols / vector_width * vector_width columns): such as the per-row operands of an [N, 1] output's
// own pass, whose alignment does not matter. Other nodes that read memory
// along rows themselves (unpack) say so with their own row_vector_ok.
template <class N>
struct checks_row_vectors : std::bool_constant<!is_bound_leaf<N>::value && requires(const N& n) { n.row_vector_ok(); }> {};
template <int vector_width, class B>
bool rows_vector_ok(const B& b, index_t cols) {
  bool ok = true;
  visit_row_leaves(b, cols, [&](const auto& leaf, int, index_t len, int) {
    if (len >= vector_width && !leaf.row_vector_ok()) ok = false;
  });
  visit_if<checks_row_vectors>(b, [&](const auto& n) { ok = ok && n.row_vector_ok(); });
  return ok;
}

// Which leaf occurrences read a cached row, where it lies in the cache of
// one group of threads, and the distinct rows to copy in (as bytes).
template <std::size_t Leaves, std::size_t R>
struct row_cache_plan {
  static constexpr std::size_t n = Leaves > 0 ? Leaves : 1;
  bool on = false;
  int rows = 0;                                   // distinct rows cached
  std::uint32_t group_bytes = 0;                  // cache bytes per group of threads (one output row)
  std::uint32_t off[n] = {};                      // per leaf occurrence: byte offset of its cached row
  std::uint8_t cached[n] = {};                    // per leaf occurrence: reads the cache
  const unsigned char* src[n] = {};               // per distinct row: base pointer of the leaf
  index_t lead_bytes[n][R > 1 ? R - 1 : 1] = {};  // per distinct row: leading strides in bytes
  index_t bytes[n] = {};                          // per distinct row: bytes of one row
  std::uint32_t to[n] = {};                       // per distinct row: byte offset in the cache
  std::size_t need = 0;                           // bytes the rows that qualify take (planning only)
  int values = 0;                                 // computed values kept after the rows (values.hpp)
  int values_recomputed = 0;                      // values that could be kept but are computed again
};

template <class T>
struct type_key {
  static constexpr char id = 0;
};

// The cache budget per thread block (per row on the host), in bytes, from
// the value of LOOM_ROW_CACHE_BYTES: unset or empty gives 96 KiB (two blocks
// per SM on sm_90), 0 turns the cache off, anything but a number throws.
inline std::size_t parse_row_cache_bytes(const char* e) {
  if (e == nullptr || *e == '\0') return std::size_t{96} << 10;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(e, &end, 10);
  if (end == e || *end != '\0' || *e == '-')
    throw value_error(std::string("loom: LOOM_ROW_CACHE_BYTES must be a number of bytes, got '") + e + "'");
  return static_cast<std::size_t>(v);
}

// The cache budget in use: read from the environment once; tests may set it.
inline std::size_t& row_cache_budget() {
  static std::size_t bytes = parse_row_cache_bytes(std::getenv("LOOM_ROW_CACHE_BYTES"));
  return bytes;
}

// Plans the cache of input rows for a bound tree over output rows of rank
// R: a leaf's row is cached when it is contiguous along the row (last stride
// 1), is not the same row for every row of a multi-row output, and is read
// by two or more passes that run (a reduction skipped as a duplicate reads
// nothing; a kept subtree that reads its value reads none of its leaves).
// Leaves of one type over the same pointer, strides and row length share one
// cached row. The plan is off when nothing qualifies or the rows of one
// group take more than `cap` bytes; `need` says what they take.
template <std::size_t R, class B>
row_cache_plan<leaf_count<B>, R> plan_row_inputs(const B& b, index_t cols, index_t rows, std::uint64_t reuse,
                                                 std::size_t cap) {
  constexpr std::size_t Leaves = leaf_count<B>;
  row_cache_plan<Leaves, R> plan;
  struct row_key {
    const void* type;
    const unsigned char* p;
    std::vector<index_t> st;
    index_t len;
    std::size_t elem;
    std::bitset<2 * 64> passes;
    bool out;
  };
  std::vector<row_key> keys;
  int which[Leaves > 0 ? Leaves : 1];
  auto f = [&](const auto& leaf, int kk, index_t len, int pass) {
    using T = std::remove_cvref_t<decltype(*leaf.p)>;
    static_assert(std::tuple_size_v<std::remove_cvref_t<decltype(leaf.st)>> == R);
    which[kk] = -1;
    if (pass == not_read) return;
    bool per_row = rows <= 1;
    for (std::size_t d = 0; d + 1 < R; ++d) per_row = per_row || leaf.st[d] != 0;
    if (leaf.st[R - 1] != 1 || !per_row || len <= 0) return;
    const auto* p = reinterpret_cast<const unsigned char*>(leaf.p);
    const std::vector<index_t> st(leaf.st.begin(), leaf.st.end());
    std::size_t i = 0;
    while (i < keys.size() &&
           !(keys[i].type == &type_key<T>::id && keys[i].p == p && keys[i].st == st && keys[i].len == len))
      ++i;
    if (i == keys.size()) keys.push_back({&type_key<T>::id, p, st, len, sizeof(T), {}, false});
    if (pass < 0)
      keys[i].out = true;
    else if (!((reuse >> pass) & 1))
      keys[i].passes.set(static_cast<std::size_t>(pass_of_slot<B>(static_cast<std::size_t>(pass))));
    which[kk] = static_cast<int>(i);
  };
  visit_row_leaves(b, cols, f);
  std::vector<int> slot(keys.size(), -1);
  std::size_t total = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].passes.count() + (keys[i].out ? 1 : 0) < 2) continue;
    const auto j = static_cast<std::size_t>(plan.rows++);
    slot[i] = static_cast<int>(j);
    plan.src[j] = keys[i].p;
    for (std::size_t d = 0; d + 1 < R; ++d) plan.lead_bytes[j][d] = keys[i].st[d] * static_cast<index_t>(keys[i].elem);
    plan.bytes[j] = keys[i].len * static_cast<index_t>(keys[i].elem);
    plan.to[j] = static_cast<std::uint32_t>(total);
    total += (static_cast<std::size_t>(plan.bytes[j]) + 15) / 16 * 16;
  }
  if (total == 0 || total > cap || total > std::numeric_limits<std::uint32_t>::max()) {
    row_cache_plan<Leaves, R> off;
    off.need = total;
    return off;
  }
  plan.need = total;
  plan.on = true;
  plan.group_bytes = static_cast<std::uint32_t>(total);
  for (std::size_t kk = 0; kk != Leaves; ++kk) {
    if (which[kk] < 0 || slot[static_cast<std::size_t>(which[kk])] < 0) continue;
    plan.cached[kk] = 1;
    plan.off[kk] = plan.to[static_cast<std::size_t>(slot[static_cast<std::size_t>(which[kk])])];
  }
  return plan;
}

// The cache plan of input rows for `groups` groups of threads sharing
// `budget` bytes (computed values left computing).
template <std::size_t R, class B>
row_cache_plan<leaf_count<B>, R> plan_row_cache(const B& b, index_t cols, index_t rows, std::uint64_t reuse,
                                                std::size_t groups, std::size_t budget) {
  return plan_row_inputs<R>(b, cols, rows, reuse, budget / (groups > 0 ? groups : 1));
}

// The plan of a row kernel's cache, input rows and computed values, for
// `groups` groups of threads sharing `budget` bytes. `b` (a tree from
// keep_values) gets the modes and offsets of its kept subtrees. In order of
// preference: the input rows and the values; the input rows alone (the
// values computed again: reading memory once counts more than computing
// once); the values alone; nothing. Values are kept only while
// row_cache_values() is on. With `inputs` false the input rows stay in
// place (the host reading dense rows by pointer: a copy would only add a
// read and a write of each row): the values alone, or nothing. `host`:
// plan_row_values' every_store.
template <std::size_t R, class B>
row_cache_plan<leaf_count<B>, R> plan_row_chip(B& b, index_t cols, index_t rows, std::uint64_t reuse,
                                               std::size_t groups, std::size_t budget, bool inputs = true,
                                               bool host = false) {
  const std::size_t cap =
      std::min<std::size_t>(budget / (groups > 0 ? groups : 1), std::numeric_limits<std::uint32_t>::max());
  const row_values_plan values = plan_row_values(b, cols, reuse, 0, host);
  const bool keep = values.kept > 0 && row_cache_values() && values.bytes <= cap;
  if (keep && inputs) {
    auto both = plan_row_inputs<R>(b, cols, rows, reuse, cap - values.bytes);
    if (both.on || both.need == 0) {
      plan_row_values(b, cols, reuse, both.group_bytes, host);  // the same choices, after the input rows
      both.on = true;
      both.group_bytes += static_cast<std::uint32_t>(values.bytes);
      both.values = values.kept;
      return both;
    }
  }
  compute_all_values(b);
  auto in_rows = inputs ? plan_row_inputs<R>(b, cols, rows, reuse, cap) : row_cache_plan<leaf_count<B>, R>{};
  if (!in_rows.on && keep) {
    plan_row_values(b, cols, reuse, 0, host);
    row_cache_plan<leaf_count<B>, R> alone;
    alone.on = true;
    alone.group_bytes = static_cast<std::uint32_t>(values.bytes);
    alone.values = values.kept;
    return alone;
  }
  in_rows.values_recomputed = values.kept;
  return in_rows;
}

// Points the cached leaves of `bc` at their rows in `cache` for the output
// row `lead`, and its kept subtrees at their values. Only a leaf's pointer
// changes (strides stay): it is moved so that the leaf's offset of column 0
// in this row lands on the cached row.
template <class B, std::size_t Leaves, std::size_t R>
LOOM_HD void rebase_leaves(B& bc, const row_cache_plan<Leaves, R>& plan, const index_t* lead, unsigned char* cache) {
  auto f = [&](auto& leaf, int kk, index_t, int) {
    using T = std::remove_cvref_t<decltype(*leaf.p)>;
    if (!plan.cached[kk]) return;
    index_t off = 0;
    for (std::size_t d = 0; d + 1 < R; ++d) off += lead[d] * leaf.st[d];
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(cache + plan.off[kk]);
    leaf.p = reinterpret_cast<const T*>(at - static_cast<std::uintptr_t>(off) * sizeof(T));
  };
  visit_row_leaves(bc, 0, f);
  if constexpr (tree_any_v<B, is_bound_kept>) {
    visit_if<is_bound_kept>(bc, [&](auto& n) { n.row = cache + n.off; });
  }
}

// What every row kernel of a bound tree decides the same way: which
// reductions copy an identical earlier one (reuse, bit S for slot S), how
// many passes run before the output pass, and on the device the threads per
// row: a warp for rows of up to 2048 columns, a block of 256 for longer ones.
struct row_passes_plan {
  std::uint64_t reuse = 0;
  int passes = 0;
  int threads_per_row = 32;
};
template <class B>
row_passes_plan plan_row_passes(const B& b, index_t cols) {
  row_passes_plan p;
  p.reuse = reuse_mask(b, std::make_index_sequence<slots_of<B>>{});
  p.passes = passes_before_output<B>(p.reuse);
  p.threads_per_row = longest_row(b, cols, std::make_index_sequence<slots_of<B>>{}) <= 2048 ? 32 : 256;
  return p;
}

// Elements per vector step of a row kernel: 16 bytes of the smallest type
// among the leaves and the output (element size OutSize), so every vector
// access covers whole 16-byte units of every type.
template <class B, std::size_t OutSize>
constexpr int row_vector_width() {
  return vector_width_of<B, OutSize>;
}

template <std::size_t RO, class O, class S>
row_layout<RO> layout_of(const view<O, RO, S>& out) {
  row_layout<RO> lay;
  lay.cols = out.extent(RO - 1);
  lay.rows = lay.cols ? out.size() / lay.cols : 0;
  for (std::size_t d = 0; d + 1 < RO; ++d) lay.div[d] = fast_divmod(static_cast<std::uint64_t>(out.extent(d)));
  return lay;
}

template <class O, std::size_t RO, class S>
bool sink_vector_ok(const view<O, RO, S>& v) {
  if constexpr (std::is_same_v<S, device>)
    return row_out_vector_ok(v);
  else
    return false;
}

}  // namespace loom::detail::rows
