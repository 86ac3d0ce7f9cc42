// SPDX-License-Identifier: Apache-2.0
// Randomized differential testing of loom's expressions: random layouts of
// operands (broadcast, sliced with positive and negative steps, offsets,
// permuted, dropped axes, stride-0 views, empty and unit extents), placed in
// memory by the test's own index arithmetic, evaluated by loom and by the
// reference interpreter in reference.hpp, and compared element by element.
//
// Settings (environment variables):
//   LOOM_RANDOM_SEED   the base seed (default below); every case's seed derives from it
//   LOOM_RANDOM_CASES  cases per random TEST_CASE (to scale up; defaults are sized for CI)
//   LOOM_RANDOM_CASE   run only this case number (to replay a failure)
// A failure prints the seed, the case number and the whole case.
#pragma once

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom_test.hpp"
#include "reference.hpp"

namespace loom_random {
using loom::index_t;

inline std::uint64_t base_seed() {
  const char* s = std::getenv("LOOM_RANDOM_SEED");
  return s ? std::strtoull(s, nullptr, 0) : 0x5eed2024ull;
}
inline long case_count(long fallback) {
  const char* s = std::getenv("LOOM_RANDOM_CASES");
  return s ? std::strtol(s, nullptr, 0) : fallback;
}
inline long only_case() {
  const char* s = std::getenv("LOOM_RANDOM_CASE");
  return s ? std::strtol(s, nullptr, 0) : -1;
}
//! A well-mixed 64-bit seed from two numbers (splitmix64).
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct rng {
  std::mt19937_64 g;
  explicit rng(std::uint64_t s) : g(s) {}
  double u01() { return std::uniform_real_distribution<double>(0, 1)(g); }
  index_t pick(index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); }
  bool chance(double p) { return u01() < p; }
};

//! Counts over a run, printed at the end so the notes can say what ran.
struct stats {
  long cases = 0, elements = 0, skipped = 0, in_place = 0, contiguous = 0, general = 0, rows = 0, empty = 0;
  long row_cached = 0;  // rows-path cases that held input rows in the row cache
  void print(const char* what) const {
    std::printf("loom random: %s: %ld cases, %ld elements compared, %ld skipped near a rounding jump (%.4f%%), "
                "%ld in place; paths: %ld contiguous, %ld general, %ld rows (%ld with cached rows), %ld empty\n",
                what, cases, elements, skipped, elements + skipped ? 100.0 * skipped / (elements + skipped) : 0.0,
                in_place, contiguous, general, rows, row_cached, empty);
  }
};

inline std::string str(const std::vector<index_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// ---------------------------------------------------------------------------
// Layouts: where the logical elements of an operand sit in a base buffer.

//! How one operand is made: a contiguous base buffer, optionally an integer
//! index on a leading extra axis (dropped), a slice per kept axis, then a
//! permutation; optionally presented through broadcast_to (stride 0).
struct layout {
  std::vector<index_t> logical;  // logical extents, rank r (1 on broadcast axes)
  std::vector<index_t> base;     // base buffer extents (rank r, or r + 1 with `drop`)
  bool drop = false;
  index_t drop_index = 0, drop_arg = 0;
  std::vector<index_t> start, step, count;  // per kept axis
  std::vector<loom::range> args;            // the slice() argument per kept axis
  std::vector<int> perm;                    // logical axis a is kept axis perm[a]
  bool expand = false;                      // presented with broadcast_to(output's trailing extents)
  // Derived by the test's own arithmetic:
  std::vector<index_t> base_strides;  // row-major strides of the base
  index_t offset0 = 0;                // element offset of logical element 0
  std::vector<index_t> lstride;       // logical strides (elements)

  index_t base_size() const {
    index_t n = 1;
    for (auto e : base) n *= e;
    return n;
  }
  index_t logical_size() const {
    index_t n = 1;
    for (auto e : logical) n *= e;
    return n;
  }
  //! Offset in the base of the logical element with coordinates c.
  index_t offset(const index_t* c) const {
    index_t o = offset0;
    for (std::size_t a = 0; a < logical.size(); ++a) o += c[a] * lstride[a];
    return o;
  }
  std::string describe() const {
    std::ostringstream s;
    s << "logical " << str(logical) << " from base " << str(base);
    if (drop) s << " index " << drop_arg << " on axis 0,";
    s << " slices (";
    for (std::size_t k = 0; k < args.size(); ++k) {
      auto b = [](index_t v) { return v == loom::none ? std::string("none") : std::to_string(v); };
      s << (k ? ", " : "") << b(args[k].start) << ":" << b(args[k].stop) << ":" << args[k].step;
    }
    s << ") permuted " << str(std::vector<index_t>(perm.begin(), perm.end()));
    if (expand) s << ", broadcast_to";
    return s.str();
  }
};

//! Random extents for an output of rank R: unit and zero extents, odd sizes,
//! now and then a long axis; at most `cap` elements.
inline std::vector<index_t> random_extents(rng& r, std::size_t rank, index_t cap) {
  std::vector<index_t> s(rank);
  for (auto& e : s) {
    const double u = r.u01();
    e = u < 0.03 ? 0 : u < 0.2 ? 1 : u < 0.85 ? r.pick(2, 9) : r.pick(10, 41);
  }
  if (rank == 1 && r.chance(0.3)) s[0] = r.pick(100, 3000);
  if (rank == 2 && r.chance(0.1)) s[1] = r.pick(100, 700);
  for (;;) {
    index_t n = 1;
    for (auto e : s) n *= e;
    if (n <= cap) break;
    *std::max_element(s.begin(), s.end()) /= 2;
  }
  return s;
}

//! A random layout of an operand with the given logical extents.
inline layout random_layout(rng& r, const std::vector<index_t>& logical, bool allow_expand) {
  layout l;
  l.logical = logical;
  const std::size_t rank = logical.size();
  l.perm.resize(rank);
  for (std::size_t a = 0; a < rank; ++a) l.perm[a] = static_cast<int>(a);
  const bool plain = r.chance(0.4);
  if (!plain && rank > 1 && r.chance(0.5)) std::shuffle(l.perm.begin(), l.perm.end(), r.g);
  l.count.resize(rank);
  for (std::size_t a = 0; a < rank; ++a) l.count[static_cast<std::size_t>(l.perm[a])] = logical[a];
  l.drop = !plain && r.chance(0.2);
  if (l.drop) {
    const index_t d = r.pick(1, 3);
    l.base.push_back(d);
    l.drop_index = r.pick(0, d - 1);
    l.drop_arg = r.chance(0.3) ? l.drop_index - d : l.drop_index;
  }
  static constexpr index_t steps[] = {2, 3, -1, -2};
  for (std::size_t k = 0; k < rank; ++k) {
    const index_t n = l.count[k];
    const index_t step = plain || r.chance(0.6) ? 1 : steps[r.pick(0, 3)];
    const index_t lo = plain || r.chance(0.6) ? 0 : r.pick(1, 2);
    const index_t extra = plain || r.chance(0.6) ? 0 : r.pick(1, 2);
    index_t start, stop, b;
    loom::range arg;
    arg.step = step;
    if (step > 0) {
      start = lo;
      stop = n > 0 ? start + (n - 1) * step + 1 : start;
      b = stop + extra;
      arg.start = start == 0 && r.chance(0.3) ? loom::none : (start < b && r.chance(0.3) ? start - b : start);
      arg.stop = stop == b && r.chance(0.3) ? loom::none : (stop < b && r.chance(0.3) ? stop - b : stop);
    } else {
      start = n > 0 ? lo + (n - 1) * -step : lo;
      b = start + 1 + extra;
      stop = n > 0 ? lo - 1 : lo;  // -1: through index 0, spelled none
      arg.start = start == b - 1 && r.chance(0.3) ? loom::none : (r.chance(0.3) ? start - b : start);
      arg.stop = stop < 0 ? loom::none : (r.chance(0.3) ? stop - b : stop);
    }
    l.start.push_back(start);
    l.step.push_back(step);
    l.base.push_back(b);
    l.args.push_back(arg);
  }
  l.expand = allow_expand && r.chance(0.08);
  // The test's own address arithmetic (not loom's).
  l.base_strides.assign(l.base.size(), 1);
  for (std::size_t d = l.base.size(); d-- > 1;) l.base_strides[d - 1] = l.base_strides[d] * std::max<index_t>(l.base[d], 1);
  const std::size_t first = l.drop ? 1 : 0;
  l.offset0 = l.drop ? l.drop_index * l.base_strides[0] : 0;
  for (std::size_t k = 0; k < rank; ++k) l.offset0 += l.start[k] * l.base_strides[first + k];
  l.lstride.resize(rank);
  for (std::size_t a = 0; a < rank; ++a) {
    const auto k = static_cast<std::size_t>(l.perm[a]);
    l.lstride[a] = l.step[k] * l.base_strides[first + k];
  }
  return l;
}

//! Row-major coordinates of linear index i in extents s.
inline void unravel(index_t i, const std::vector<index_t>& s, index_t* c) {
  for (std::size_t d = s.size(); d-- > 0;) {
    c[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
}

//! True when extents/strides describe dense row-major memory (unit axes
//! ignored; empty is dense): the test's own definition.
inline bool dense(const std::vector<index_t>& ext, const std::vector<index_t>& st) {
  index_t n = 1;
  for (auto e : ext) n *= e;
  if (n == 0) return true;
  index_t expect = 1;
  for (std::size_t d = ext.size(); d-- > 0;) {
    if (ext[d] == 1) continue;
    if (st[d] != expect) return false;
    expect *= ext[d];
  }
  return true;
}

// ---------------------------------------------------------------------------
// Operands in memory.

template <class T>
T random_element(rng& r, bool large) {
  if constexpr (std::is_same_v<T, bool>) {
    return r.chance(0.5);
  } else if constexpr (std::is_integral_v<T>) {
    if (!large) return static_cast<T>(r.pick(std::is_signed_v<T> ? -100 : 0, 100));
    // Large values make integer arithmetic overflow (it wraps, as documented).
    constexpr index_t hi = sizeof(T) >= 8 ? (index_t{1} << 62) : sizeof(T) == 4 ? (index_t{1} << 30)
                                                                                  : std::numeric_limits<T>::max();
    return static_cast<T>(r.pick(std::is_signed_v<T> ? -hi : 0, hi));
  } else {
    return T(static_cast<float>(r.u01() * 8 - 4));
  }
}

template <class V, std::size_t... I>
auto slice_with(const V& v, const layout& l, std::index_sequence<I...>) {
  return v.slice(l.args[I]...);
}
template <class V, std::size_t... I>
auto slice_drop(const V& v, const layout& l, std::index_sequence<I...>) {
  return v.slice(l.drop_arg, l.args[I]...);
}

//! One operand: its base buffer in the test's space and on the host, its
//! logical values, and the loom view made with loom's own slicing.
template <class T, std::size_t R, class Space>
struct operand {
  layout lay;
  std::vector<T> values;                  // logical values, row-major over lay.logical
  loom::host_tensor<T, 1> host{loom::shape<1>{0}};  // base contents before the run
  loom::tensor<T, 1, Space> mem;          // the base in the test's space
  loom::view<T, R, Space> v;              // what the expression reads (or the output)

  //! Builds the base (poison outside the operand), the values and the view.
  //! Returns "" or what went wrong with loom's slicing.
  std::string build(rng& r, const layout& l, const std::vector<index_t>& out_ext, bool random_values) {
    lay = l;
    host = loom::host_tensor<T, 1>(loom::shape<1>{l.base_size()});
    for (index_t i = 0; i < host.size(); ++i) host.data()[i] = loom_test::poison_value<T>();
    const bool large = r.chance(0.1);
    values.resize(static_cast<std::size_t>(l.logical_size()));
    std::array<index_t, 8> c{};
    for (index_t i = 0; i < l.logical_size(); ++i) {
      values[static_cast<std::size_t>(i)] = random_values ? random_element<T>(r, large) : loom_test::poison_value<T>();
      unravel(i, l.logical, c.data());
      host.data()[l.offset(c.data())] = values[static_cast<std::size_t>(i)];
    }
    if constexpr (std::is_same_v<Space, loom::device>)
      mem = loom::to_device(host);
    else
      mem = loom::tensor<T, 1, Space>(host);
    loom::view<T, R, Space> sliced;
    if (l.drop) {
      loom::shape<R + 1> be{};
      for (std::size_t d = 0; d <= R; ++d) be[d] = l.base[d];
      sliced = slice_drop(loom::view<T, R + 1, Space>(mem.data(), be), l, std::make_index_sequence<R>{});
    } else {
      loom::shape<R> be{};
      for (std::size_t d = 0; d < R; ++d) be[d] = l.base[d];
      sliced = slice_with(loom::view<T, R, Space>(mem.data(), be), l, std::make_index_sequence<R>{});
    }
    std::array<int, R> p{};
    std::copy(l.perm.begin(), l.perm.end(), p.begin());
    v = sliced.permute(p);
    for (std::size_t a = 0; a < R; ++a)
      if (v.extent(a) != l.logical[a] || (l.logical_size() > 0 && v.extent(a) > 1 && v.stride(a) != l.lstride[a]))
        return "loom's slice/permute gave extents " + loom::shape_string(v.extents()) + " strides " +
               loom::shape_string(v.strides()) + " for " + l.describe() + "; the test expects strides " +
               str(l.lstride);
    if (l.logical_size() > 0 && v.data() != mem.data() + l.offset0)
      return "loom's slice/permute starts at element " + std::to_string(v.data() - mem.data()) + ", the test expects " +
             std::to_string(l.offset0) + " (" + l.describe() + ")";
    if (l.expand) {
      loom::shape<R> full{};
      for (std::size_t a = 0; a < R; ++a) full[a] = out_ext[out_ext.size() - R + a];
      v = v.broadcast_to(full);
    }
    return "";
  }
  //! The logical value under output coordinates o (right-aligned broadcasting).
  T at_output(const index_t* o, std::size_t out_rank) const {
    index_t lin = 0;
    for (std::size_t a = 0; a < R; ++a) {
      const index_t e = lay.logical[a];
      lin = lin * e + (e == 1 ? 0 : o[out_rank - R + a]);
    }
    return values[static_cast<std::size_t>(lin)];
  }
  //! Bound strides as the test predicts them: stride 0 where broadcast.
  bool predicted_dense(const std::vector<index_t>& out_ext) const {
    std::vector<index_t> st(out_ext.size(), 0);
    for (std::size_t a = 0; a < R; ++a) {
      const std::size_t o = out_ext.size() - R + a;
      st[o] = lay.logical[a] == out_ext[o] ? lay.lstride[a] : 0;
    }
    return dense(out_ext, st);
  }
  //! The period of this operand broadcast to the output when it repeats a
  //! dense block (stride-0 or extent-1 leading axes over a dense suffix of
  //! the output's shape): the block's size; 0 when it is dense without
  //! repeating, -1 when it is neither.
  index_t predicted_period(const std::vector<index_t>& out_ext) const {
    std::vector<index_t> st(out_ext.size(), 0);
    for (std::size_t a = 0; a < R; ++a) {
      const std::size_t o = out_ext.size() - R + a;
      st[o] = lay.logical[a] == out_ext[o] ? lay.lstride[a] : 0;
    }
    if (dense(out_ext, st)) return 0;
    std::size_t k = out_ext.size();
    index_t expect = 1;
    while (k > 0 && (out_ext[k - 1] == 1 || st[k - 1] == expect)) expect *= out_ext[--k];
    for (std::size_t d = 0; d < k; ++d)
      if (out_ext[d] != 1 && st[d] != 0) return -1;
    return expect;
  }
  bool predicted_aligned() const {
    // In integers: mem may have no memory (an empty operand).
    return (reinterpret_cast<std::uintptr_t>(mem.data()) + static_cast<std::uintptr_t>(lay.offset0) * sizeof(T)) % 16 == 0;
  }
};

// ---------------------------------------------------------------------------
// Comparison with the reference.

//! Empty when `got` is what the reference allows, else why not.
template <class O>
std::string mismatch(O got, const ref::rv& want) {
  constexpr ref::kind k = ref::kind_of<O>();
  std::ostringstream s;
  s.precision(17);
  if constexpr (!ref::is_float(k)) {
    const std::int64_t g = static_cast<std::int64_t>(got);
    if (g == ref::wrap(k, want.i)) return "";
    s << "got " << g << ", want " << ref::wrap(k, want.i);
    return s.str();
  } else {
    const double g = loom_test::as_double(got), w = want.v;
    if (std::isnan(w)) {
      if (std::isnan(g)) return "";
      s << "got " << g << ", want NaN";
      return s.str();
    }
    if (want.e == 0 || std::isinf(w)) {
      const double x = ref::round_to(k, w);
      if (g == x && std::signbit(g) == std::signbit(x)) return "";
      s << "got " << g << ", want exactly " << x << " (" << w << " rounded to " << ref::kind_name(k) << ")";
      return s.str();
    }
    const double tol = 2 * want.e + ref::quantum(k, std::fabs(w) + want.e);
    if (std::fabs(g - w) <= tol) return "";
    if (std::isinf(g) && std::fabs(w) + tol >= ref::format_of(k).max) return "";
    s << "got " << g << ", want " << w << " +- " << tol << " (error bound " << want.e << ")";
    return s.str();
  }
}

inline const char* path_name(loom::eval_path p) {
  switch (p) {
    case loom::eval_path::empty: return "empty";
    case loom::eval_path::contiguous: return "contiguous";
    case loom::eval_path::general: return "general";
    case loom::eval_path::rows: return "rows";
  }
  return "?";
}

inline void count_path(stats& st, loom::eval_path p) {
  switch (p) {
    case loom::eval_path::empty: ++st.empty; break;
    case loom::eval_path::contiguous: ++st.contiguous; break;
    case loom::eval_path::general: ++st.general; break;
    case loom::eval_path::rows: ++st.rows; break;
  }
}

template <class Space>
std::uint64_t launches_in_space() {
  const auto l = loom::launches();
  return std::is_same_v<Space, loom::device> ? l.device : l.host;
}
}  // namespace loom_random
