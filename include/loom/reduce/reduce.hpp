// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/core/math.hpp"
#include "loom/exec/assign.hpp"
#include "loom/core/launch.hpp"
#include "loom/expr/expression.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"

#if LOOM_CUDA_COMPILER
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#endif

// Reductions over any expression: the elementwise work of the expression is
// fused into the reduction's loads, so `sum(x * y)` reads x and y once and
// writes one number. Every reduction is eager and returns a tensor in the
// expression's memory space.
//
// Accumulation order (the same for every run, so results are bit-identical run
// to run; no atomics anywhere):
//  - host, whole tensor: fixed chunks of 8192 elements, each summed pairwise
//    (blocks of 8 sequential, then a balanced binary tree), then the chunk
//    results combined pairwise. The chunking does not depend on the thread count.
//  - host, along axes: each output element reduces its segment pairwise.
//  - device, whole tensor: cub::DeviceReduce (run-to-run deterministic on one
//    GPU; its tiling, hence its rounding, may differ between GPU models). A
//    plain contiguous tensor is handed to CUB as its pointer
//    (reduces_by_pointer); other contiguous inputs as items of one 16-byte
//    vector of input each, combined left to right.
//  - device, along axes: along rows (the reduced range innermost) one block,
//    warp or thread per output, each thread combining its elements (or
//    16-byte vectors) left to right, then cub::BlockReduce or WarpReduce; across rows (`sum(x, 0)`) 32
//    outputs per block, 4 lanes per output combined in order, and the range
//    in fixed chunks when the outputs are few. See "Axis reductions on the
//    device" below.
namespace loom {

//! Tag that keeps the reduced axes (extent 1) in a reduction's result, like
//! NumPy's keepdims=True: `auto m = loom::amax(x, 1, loom::keepdims);` has
//! x's rank, so `x - m` broadcasts.
struct keepdims_t {
  explicit keepdims_t() = default;
};
//! See keepdims_t.
inline constexpr keepdims_t keepdims{};

//! The bias correction of var/stddev: the divisor is max(0, N - value)
//! (PyTorch's `correction`); 1 (the default) is Bessel's correction, 0 the
//! population variance. Example: `loom::var(x, loom::correction{0})`.
struct correction {
  double value = 1;
};

//! Result type of sum, prod, cumsum and cumprod over elements of type T:
//! int64 for bool and integer types (as PyTorch), else T (half stays half,
//! accumulated in float).
template <class T>
using sum_result_t = std::conditional_t<std::is_integral_v<T>, std::int64_t, T>;

//! Result type of mean, var, stddev, the norms and logsumexp over elements of
//! type T: T for floating types, float for bool and integers.
template <class T>
using float_result_t = std::conditional_t<is_floating_v<T>, T, float>;

//! Type in which sum and prod accumulate elements of type T: int64 for bool
//! and integers, float for half/bf16/float, double for double.
template <class T>
using accumulate_t = std::conditional_t<std::is_integral_v<T>, std::int64_t, compute_t<T>>;

namespace detail {
// ---------------------------------------------------------------------------
// Reduction operators. Each one says how an element enters the accumulator
// (lift, which also receives the element's position in the reduced range),
// how two accumulators combine (operator()), the identity, and how the final
// accumulator becomes the result (finalize, which receives the element count).

template <class F>
LOOM_HD F inf_of() {
  return std::numeric_limits<F>::infinity();
}
template <class C>
LOOM_HD C lowest_of() {
  if constexpr (std::is_floating_point_v<C>)
    return -std::numeric_limits<C>::infinity();
  else
    return std::numeric_limits<C>::lowest();
}
template <class C>
LOOM_HD C highest_of() {
  if constexpr (std::is_floating_point_v<C>)
    return std::numeric_limits<C>::infinity();
  else
    return std::numeric_limits<C>::max();
}

template <class T>
struct sum_op {
  static constexpr bool has_identity = true;
  using acc = accumulate_t<T>;
  using result = sum_result_t<T>;
  LOOM_HD acc identity() const { return acc(0); }
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    return static_cast<acc>(v);
  }
  // fn::add and fn::mul: integer accumulators wrap (as PyTorch's int64 do)
  // instead of overflowing with undefined behaviour.
  LOOM_HD acc operator()(acc a, acc b) const { return fn::add{}(a, b); }
  LOOM_HD result finalize(acc a, index_t) const { return convert<result>(a); }
};

template <class T>
struct prod_op : sum_op<T> {
  using acc = accumulate_t<T>;
  LOOM_HD acc identity() const { return acc(1); }
  LOOM_HD acc operator()(acc a, acc b) const { return fn::mul{}(a, b); }
};

// Integers of up to 32 bits and bool are summed exactly in int64 (no
// overflow below 2^32 elements) and divided once in double, so the float
// mean is the double quotient rounded once, exact to half a float ulp while
// the sum's magnitude is below 2^53 (summed in float, the mean of {2^24 + 1,
// 2^25 + 3, 2^25 + 3} came out 27962030 in any order, not 27962028). 64-bit
// integers are summed in double: an int64 sum of values near 2^62 would
// wrap. Floating types sum in compute_t.
template <class T>
using mean_acc_t = std::conditional_t<std::is_integral_v<T>,
                                      std::conditional_t<(sizeof(T) <= 4), std::int64_t, double>,
                                      compute_t<float_result_t<T>>>;
template <class T>
struct mean_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using acc = mean_acc_t<T>;
  LOOM_HD acc identity() const { return acc(0); }
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    return static_cast<acc>(v);
  }
  LOOM_HD acc operator()(acc a, acc b) const { return fn::add{}(a, b); }
  // An empty mean is 0/0 = NaN, as in PyTorch.
  LOOM_HD result finalize(acc a, index_t n) const {
    if constexpr (std::is_integral_v<T>)
      return convert<result>(static_cast<double>(a) / static_cast<double>(n));
    else
      return convert<result>(a / static_cast<acc>(n));
  }
};

// NaN-propagating max/min: the first NaN met wins, as in PyTorch.
template <class C, bool Max>
LOOM_HD C nan_extreme(C a, C b) {
  // One select, no branch (bitwise, not short-circuit, operators): with an
  // early return per NaN test, each 16-byte item of a vector load sat behind
  // branches, and the compiler issued a thread's loads one at a time.
  // b wins when it is NaN or beyond a, which is !(a >= b) for max: one
  // unordered comparison (setp.ltu) where "b != b | b > a" took two and an
  // or (PTX check case 11). Equal values and -0/+0 keep a either way.
  const bool a_nan = a != a;
  const bool b_wins = Max ? !(a >= b) : !(a <= b);
  return ((!a_nan) & b_wins) ? b : a;
}

template <class T, bool Max>
struct extreme_op {
  static constexpr bool has_identity = false;
  using acc = compute_t<T>;
  using result = T;
  LOOM_HD acc identity() const { return Max ? lowest_of<acc>() : highest_of<acc>(); }
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    return static_cast<acc>(v);
  }
  LOOM_HD acc operator()(acc a, acc b) const { return nan_extreme<acc, Max>(a, b); }
  LOOM_HD result finalize(acc a, index_t) const { return convert<result>(a); }
};
template <class T>
using max_op = extreme_op<T, true>;
template <class T>
using min_op = extreme_op<T, false>;

//! A value and its position, the accumulator of argmax/argmin and cummax/cummin.
template <class C>
struct value_index {
  C v;
  index_t i;
};

// Orders (value, index) pairs so that the combine is commutative and
// associative: NaN beats everything (the first NaN wins), then the larger
// (smaller) value, then, for reductions, the smaller index (argmax of ties is
// the first index, as in PyTorch).
template <class C, bool Max>
LOOM_HD value_index<C> arg_combine(const value_index<C>& a, const value_index<C>& b) {
  // One select, no branch (see nan_extreme).
  const bool an = a.v != a.v, bn = b.v != b.v, earlier = b.i < a.i;
  const bool better = Max ? b.v > a.v : b.v < a.v;
  const bool b_wins = (an & bn & earlier) | ((!an) & (bn | better | ((b.v == a.v) & earlier)));
  return b_wins ? b : a;
}

template <class T, bool Max>
struct arg_op {
  static constexpr bool has_identity = false;
  static constexpr bool positional = true;  // lift uses the element's position
  using acc = value_index<compute_t<T>>;
  using result = std::int64_t;
  LOOM_HD acc identity() const {
    return {Max ? lowest_of<compute_t<T>>() : highest_of<compute_t<T>>(), std::numeric_limits<index_t>::max()};
  }
  template <class V>
  LOOM_HD acc lift(V v, index_t i) const {
    return {static_cast<compute_t<T>>(v), i};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const { return arg_combine<compute_t<T>, Max>(a, b); }
  LOOM_HD result finalize(const acc& a, index_t) const { return a.i; }
};
template <class T>
using argmax_op = arg_op<T, true>;
template <class T>
using argmin_op = arg_op<T, false>;

template <class T>
struct any_op {
  static constexpr bool has_identity = true;
  using acc = bool;
  using result = bool;
  LOOM_HD acc identity() const { return false; }
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    return v != V(0);
  }
  LOOM_HD acc operator()(acc a, acc b) const { return a || b; }
  LOOM_HD result finalize(acc a, index_t) const { return a; }
};
template <class T>
struct all_op : any_op<T> {
  LOOM_HD bool identity() const { return true; }
  LOOM_HD bool operator()(bool a, bool b) const { return a && b; }
};
template <class T>
struct count_nonzero_op {
  static constexpr bool has_identity = true;
  using acc = std::int64_t;
  using result = std::int64_t;
  LOOM_HD acc identity() const { return 0; }
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    return v != V(0) ? 1 : 0;
  }
  LOOM_HD acc operator()(acc a, acc b) const { return a + b; }
  LOOM_HD result finalize(acc a, index_t) const { return a; }
};

// The norms: |x| summed (L1), x^2 summed then the square root (L2), and the
// NaN-propagating max of |x| (Linf; 0 when empty).
template <class T, int P>
struct norm_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using acc = compute_t<result>;
  LOOM_HD acc identity() const { return acc(0); }
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    const acc x = static_cast<acc>(v);
    return P == 2 ? x * x : ::loom::math::fabs(x);
  }
  LOOM_HD acc operator()(acc a, acc b) const {
    if constexpr (P == 0)
      return nan_extreme<acc, true>(a, b);
    else
      return a + b;
  }
  LOOM_HD result finalize(acc a, index_t) const { return convert<result>(P == 2 ? ::loom::math::sqrt(a) : a); }
};
template <class T>
using l1_op = norm_op<T, 1>;
template <class T>
using l2_op = norm_op<T, 2>;
template <class T>
using linf_op = norm_op<T, 0>;

//! Count, mean and sum of squared deviations of a set of values.
template <class F>
struct moments {
  index_t n;
  F mean;
  F m2;
};

// Variance by Welford's update, merged with Chan et al.'s pairwise formula:
// stable where the two-pass sum of squares minus square of sums cancels.
template <class T, bool Std>
struct var_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using F = compute_t<result>;
  using acc = moments<F>;
  F correction_ = 1;
  LOOM_HD acc identity() const { return {0, F(0), F(0)}; }
  // m2 starts as f - f: 0 for a finite value, NaN for an infinity or a NaN,
  // so a range holding one has a NaN variance whatever its length, position
  // or correction (as in PyTorch), not 0 for one element or inf for a last one.
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    const F f = static_cast<F>(v);
    return {1, f, f - f};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const index_t n = a.n + b.n;
    const F delta = b.mean - a.mean;
    const F fb = static_cast<F>(b.n) / static_cast<F>(n);
    return {n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * static_cast<F>(a.n) * fb};
  }
  // An empty range has no mean: NaN for any correction (d = 0, and m2 is 0),
  // also a negative one, whose divisor -c would give 0.
  LOOM_HD result finalize(const acc& a, index_t) const {
    F d = static_cast<F>(a.n) - correction_;
    if (d < F(0) || a.n == 0) d = F(0);
    const F v = a.m2 / d;
    return convert<result>(Std ? ::loom::math::sqrt(v) : v);
  }
};
template <class T>
using variance_op = var_op<T, false>;
template <class T>
using stddev_op = var_op<T, true>;

//! A running maximum and the sum of exp(x - maximum).
template <class F>
struct max_sumexp {
  F m;
  F s;
};

// logsumexp in one pass: the running maximum rescales the running sum, so
// nothing overflows; exp(x - max) <= 1 always.
template <class T>
struct logsumexp_op {
  static constexpr bool has_identity = true;
  using result = float_result_t<T>;
  using F = compute_t<result>;
  using acc = max_sumexp<F>;
  LOOM_HD acc identity() const { return {-inf_of<F>(), F(0)}; }
  template <class V>
  LOOM_HD acc lift(V v, index_t) const {
    return {static_cast<F>(v), F(1)};
  }
  LOOM_HD acc operator()(const acc& a, const acc& b) const {
    // The general value is computed always and the special cases are
    // selected over it, highest priority last: no branch (see nan_extreme).
    // In priority order: a NaN maximum (a's first), an empty side (s == 0),
    // an infinite maximum, which decides the result (inf - inf would be NaN).
    const F mx = a.m > b.m ? a.m : b.m;
    acc r{mx, a.s * ::loom::math::exp(a.m - mx) + b.s * ::loom::math::exp(b.m - mx)};
    if ((mx == inf_of<F>()) | (mx == -inf_of<F>())) r = acc{mx, F(1)};
    if (b.s == F(0)) r = a;
    if (a.s == F(0)) r = b;
    if (b.m != b.m) r = b;
    if (a.m != a.m) r = a;
    return r;
  }
  LOOM_HD result finalize(const acc& a, index_t) const { return convert<result>(a.m + ::loom::math::log(a.s)); }
};

// ---------------------------------------------------------------------------
// Index maps. A reduction or scan walks the expression's elements in a
// permuted row-major order: the kept (or row) axes first, then the reduced
// (or scanned) axes. axis_map turns a position j in that order into the
// coordinates of the expression.

template <std::size_t R>
struct axis_map {
  fast_divmod div[R > 0 ? R : 1];
  std::uint8_t axis[R > 0 ? R : 1];  // permuted position -> axis of the expression

  LOOM_HD void coords(index_t j, index_t* idx) const {
    std::uint64_t rest = static_cast<std::uint64_t>(j);
    for (std::size_t p = R; p-- > 0;) {
      std::uint64_t q, r;
      div[p].divmod(rest, q, r);
      idx[axis[p]] = static_cast<index_t>(r);
      rest = q;
    }
  }
};

//! Builds the map for `order` (a permutation of the axes) over `ext`, and says
//! whether that order is the plain row-major order (axes of extent 1 aside),
//! in which case position j is linear index j.
template <std::size_t R>
axis_map<R> make_axis_map(const shape<R>& ext, const std::array<std::size_t, R>& order, bool& row_major) {
  axis_map<R> m{};
  row_major = true;
  std::size_t last = 0;
  bool any = false;
  for (std::size_t p = 0; p != R; ++p) {
    const std::size_t a = order[p];
    m.axis[p] = static_cast<std::uint8_t>(a);
    m.div[p] = fast_divmod(static_cast<std::uint64_t>(ext[a] > 0 ? ext[a] : 1));
    if (ext[a] == 1) continue;
    if (any && a < last) row_major = false;
    last = a;
    any = true;
  }
  return m;
}

//! The value of element j (in the map's order) of a bound expression.
template <bool Linear, class B, std::size_t R>
LOOM_HD auto read_at(const B& b, const axis_map<R>& m, index_t j) {
  if constexpr (Linear) {
    return b.at_linear(j);
  } else {
    index_t idx[R > 0 ? R : 1] = {};
    m.coords(j, idx);
    return b.at(idx);
  }
}

// ---------------------------------------------------------------------------
// Host executor.

//! Elements per chunk of a host reduction: fixed, so the result does not
//! depend on the number of threads.
inline constexpr index_t host_chunk = 8192;

//! Pairwise (cascade) reduction of get(lo) .. get(hi - 1): runs of 8 left to
//! right, then a balanced tree. The rounding error grows with log(n), not n.
template <class Op, class Get>
typename Op::acc pairwise(const Op& op, const Get& get, index_t lo, index_t hi) {
  if (hi - lo <= 8) {
    typename Op::acc a = op.identity();
    for (index_t i = lo; i < hi; ++i) a = op(a, get(i));
    return a;
  }
  const index_t mid = lo + (hi - lo) / 2;
  return op(pairwise(op, get, lo, mid), pairwise(op, get, mid, hi));
}

//! One host "launch": reduces get(0) .. get(n - 1) in fixed chunks (in
//! parallel with OpenMP), then the chunk results pairwise.
template <class Op, class Get>
typename Op::acc host_reduce_all(const Op& op, const Get& get, index_t n) {
  using acc = typename Op::acc;
  const index_t chunks = (n + host_chunk - 1) / host_chunk;
  // Not std::vector: vector<bool> packs bits, and threads write neighbours.
  const std::unique_ptr<acc[]> part(new acc[static_cast<std::size_t>(chunks)]);
  count_host_launch();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (chunks > 1)
#endif
  for (index_t c = 0; c < chunks; ++c)
    part[c] = pairwise(op, get, c * host_chunk, std::min(n, (c + 1) * host_chunk));
  return pairwise(op, [&](index_t i) { return part[i]; }, 0, chunks);
}

// ---------------------------------------------------------------------------
// Axis reductions on the device: one kernel (two when the ranges are split
// into chunks), in one of two thread mappings chosen at run time.
//
//  - Along rows, when the reduced range is innermost (the expression's last
//    axis of extent > 1 is reduced): B threads per output, a block of
//    axis_block threads (then cub::BlockReduce), or for rows of at most
//    warp_row_max elements a warp (then cub::WarpReduce; a block's warps
//    take neighbouring outputs, so its loads for several rows are in flight
//    at once, where a block per short row had only a few), for rows of at
//    most thread_row_max elements one thread (a block's threads take 128
//    neighbouring rows, where a warp per row of 4 kept 31 lanes idle). On the
//    contiguous, 16-byte-aligned path thread t combines the row's unaligned
//    head elements t, t + B, ..., then the 16-byte vectors t, t + B, ... (V
//    elements each, left to right), then tail elements t, t + B, ...
//    (B >= V: at most one head and one tail element; B == 1: all of them);
//    otherwise elements t, t + B, t + 2B, ... Rows too few to fill the GPU are cut into `splits`
//    fixed chunks, a block per chunk (a second kernel combines each row's
//    chunks in order).
//  - Across rows, when the last axis of extent > 1 is kept (`sum(x, 0)`):
//    a block takes 32 consecutive outputs, one per thread of a warp, so a
//    warp's loads are consecutive in memory; its cross_lanes warps split the
//    range (lane l combines j = lo + l, lo + l + L, ...), and lane 0 combines
//    the lanes in order. When the outputs are too few to fill the GPU, the
//    range is also split into `splits` fixed chunks (a second kernel
//    combines the chunks' partial results in order).
//
// The per-thread shares are LOOM_HD functions: the host tests replay a
// kernel's plan with them (tests/reduce/reduce_cases.inl), so which thread
// reads which element is checked without a GPU.

inline constexpr int axis_block = 128;                     // threads per block
inline constexpr int cross_outputs = 32;                   // outputs per block across rows
inline constexpr int cross_lanes = axis_block / cross_outputs;
inline constexpr index_t cross_min_per_lane = 16;          // elements per lane and chunk, at least
inline constexpr index_t row_min_chunk = 64 * axis_block;  // elements per block and chunk along rows, at least
inline constexpr index_t warp_row_max = 1024;              // rows up to this length: a warp per output
inline constexpr index_t thread_row_max = 32;              // rows up to this length: a thread per output

//! How an axis reduction runs on the device (decided on the host).
struct axis_plan {
  bool linear = false;  // contiguous: element (o, j) at o * k + j along rows, line_base(o, inner, k) + j * inner across
  bool vec = false;     // along rows and linear: 16-byte vector loads (every leaf 16-byte aligned)
  bool cross = false;   // across rows (32 outputs per block) instead of along rows (one output per block or warp)
  int row_threads = 0;  // along rows: threads per output, axis_block, 32 (a warp) or 1; 0 across rows
  index_t splits = 1;   // chunks of the reduced range, each a partial result
  index_t chunk = 0;    // elements of the range per chunk (the last may have fewer)
  fast_divmod inner{};  // across rows and linear: the elements of the axes after the reduced ones
};

//! The plan for reducing the axes `red` of an expression of extents `ext`
//! bound with `contiguous`/`aligned` leaves (`outputs` results of `k`
//! elements), on a device of `sms` multiprocessors.
template <std::size_t R>
axis_plan plan_axis_reduce(const shape<R>& ext, const std::array<bool, R>& red, bool contiguous, bool aligned,
                           index_t outputs, index_t k, int sms) {
  axis_plan p;
  // The axes of extent > 1 in order: "kept* reduced*" makes (o, j) linear
  // along rows; "kept* reduced* kept*" (one run of reduced axes) across rows.
  bool seen_red = false, kept_after_red = false;
  int red_runs = 0;
  index_t inner = 1;  // the elements of the axes after the last reduced one
  for (std::size_t d = 0; d != R; ++d) {
    if (ext[d] == 1) continue;
    if (red[d]) {
      red_runs += seen_red && !kept_after_red ? 0 : 1;
      seen_red = true;
      kept_after_red = false;
      inner = 1;
    } else {
      kept_after_red = kept_after_red || seen_red;
      inner *= ext[d];
    }
  }
  bool last_kept = false;
  for (std::size_t d = R; d-- > 0;)
    if (ext[d] != 1) {
      last_kept = !red[d];
      break;
    }
  p.cross = last_kept;
  p.linear = contiguous && red_runs <= 1;
  p.vec = !p.cross && p.linear && aligned;
  p.inner = fast_divmod(static_cast<std::uint64_t>(p.cross ? inner : 1));
  // Enough blocks for 16 per SM (a full GPU of 128-thread blocks): the range
  // in chunks when the outputs alone give fewer, each lane combining at least
  // cross_min_per_lane elements of its chunk (across rows), each block at
  // least row_min_chunk (along rows; chunks a multiple of 16 elements, so all
  // the chunks of a row share its alignment).
  const index_t blocks = p.cross ? (outputs + cross_outputs - 1) / cross_outputs : outputs;
  const index_t want = (static_cast<index_t>(sms > 0 ? sms : 1) * 16 + blocks - 1) / blocks;
  const index_t most = std::max<index_t>(1, k / (p.cross ? cross_lanes * cross_min_per_lane : row_min_chunk));
  const index_t splits = std::clamp<index_t>(want, 1, std::min<index_t>(most, 65535));
  p.chunk = (k + splits - 1) / splits;
  if (!p.cross && splits > 1) p.chunk = (p.chunk + 15) / 16 * 16;
  p.splits = k > 0 ? (k + p.chunk - 1) / p.chunk : 1;
  p.chunk = p.splits > 1 ? p.chunk : k;
  if (!p.cross) p.row_threads = p.splits > 1 ? axis_block : (k <= thread_row_max ? 1 : (k <= warp_row_max ? 32 : axis_block));
  return p;
}

//! Linear offset of element 0 of line o of a contiguous expression whose
//! lines (reduced or scanned ranges) of `len` elements are followed by
//! `inner` elements: line o starts at (o / inner) * len * inner + o % inner,
//! and its elements are `inner` apart.
LOOM_HD index_t line_base(index_t o, const fast_divmod& inner, index_t len) {
  std::uint64_t q, r;
  inner.divmod(static_cast<std::uint64_t>(o), q, r);
  return static_cast<index_t>(q) * len * static_cast<index_t>(inner.d) + static_cast<index_t>(r);
}

//! Thread t's share of the `k` elements of a row from position `start`
//! (element j0 of its row: a chunk's first), element by element: t,
//! t + nt, ... (nt: the row's threads, plan.row_threads).
template <bool Linear, class Op, class B, std::size_t R>
LOOM_HD typename Op::acc row_share(const Op& op, const B& b, const axis_map<R>& m, index_t start, index_t k, int t,
                                   int nt, index_t j0) {
  typename Op::acc a = op.identity();
  for (index_t j = t; j < k; j += nt) a = op(a, op.lift(read_at<Linear>(b, m, start + j), j0 + j));
  return a;
}

//! Thread t's share of the contiguous elements [start, start + k) (element
//! j0 of their row onwards) in 16-byte vectors of V elements: head elements
//! t, t + nt, ... (those before the first V-aligned position), vectors t,
//! t + nt, ..., then tail elements t, t + nt, ... (nt: the row's threads; with
//! nt >= V a thread has at most one head and one tail element, and Wide
//! says so: a test each instead of a loop, 8 fewer registers in the kernel).
template <int V, bool Wide, class Op, class B>
LOOM_HD typename Op::acc row_share_vec(const Op& op, const B& b, index_t start, index_t k, int t, int nt,
                                       index_t j0) {
  typename Op::acc a = op.identity();
  const index_t skew = (V - start % V) % V;
  const index_t head = skew < k ? skew : k;
  const index_t vectors = (k - head) / V;
  const index_t body = head + vectors * V;  // row position of the tail
  if constexpr (Wide) {
    if (t < head) a = op(a, op.lift(b.at_linear(start + t), j0 + t));
  } else {
    for (index_t j = t; j < head; j += nt) a = op(a, op.lift(b.at_linear(start + j), j0 + j));
  }
#if LOOM_DEVICE_CODE
#pragma unroll 4
#endif
  for (index_t v = t; v < vectors; v += nt) {
    const index_t p = head + v * V;
    typename B::template regs<V> r;
    b.template load<V>(start + p, r);
    LOOM_UNROLL
    for (int i = 0; i < V; ++i) a = op(a, op.lift(b.template elem<V>(r, i), j0 + p + i));
  }
  if constexpr (Wide) {
    if (t < k - body) a = op(a, op.lift(b.at_linear(start + body + t), j0 + body + t));
  } else {
    for (index_t j = body + t; j < k; j += nt) a = op(a, op.lift(b.at_linear(start + j), j0 + j));
  }
  return a;
}

//! Lane `lane`'s share of output o across rows, over the range [lo, hi):
//! j = lo + lane, lo + lane + cross_lanes, ... (Linear: element j at
//! base + j * inner, base = line_base(o, plan.inner, k)).
template <bool Linear, class Op, class B, std::size_t R>
LOOM_HD typename Op::acc cross_share(const Op& op, const B& b, const axis_map<R>& m, index_t o, index_t base,
                                     index_t inner, index_t k, index_t lo, index_t hi, int lane) {
  typename Op::acc a = op.identity();
#if LOOM_DEVICE_CODE
#pragma unroll 4
#endif
  for (index_t j = lo + lane; j < hi; j += cross_lanes) {
    if constexpr (Linear)
      a = op(a, op.lift(b.at_linear(base + j * inner), j));
    else
      a = op(a, op.lift(read_at<false>(b, m, o * k + j), j));
  }
  return a;
}

// A whole tensor of a 4- or 8-byte arithmetic type, contiguous, reduced by
// an op whose lift does not use the element's position (every reduction but
// argmax/argmin): CUB is handed the tensor's pointer, so it runs its own
// vectorized pointer kernel, the kernel a direct cub::DeviceReduce call runs
// (CUB checks the pointer's alignment itself). Fused expressions, 1- and
// 2-byte types (whose CUB pointer loads would be narrower than 16 bytes)
// and argmax/argmin take lift_items.
//
// The accumulator must divide 16 bytes: CUB scales its items per thread by
// the accumulator's size (64 bytes of accumulators per thread on sm_90) and
// clamps its vector length to them, but loads its vector type of the
// unclamped length, 4 elements. With fewer than 4 items per thread (var of
// double: a 24-byte accumulator, 2 items) a thread would load 4 elements
// into 2 items' storage and the last thread of a tile would read past it;
// such ops take lift_items.
template <class Op, class Node>
inline constexpr bool reduces_by_pointer = false;
template <class Op, class T, std::size_t R, class S>
inline constexpr bool reduces_by_pointer<Op, leaf_node<T, R, S>> =
    std::is_arithmetic_v<std::remove_const_t<T>> && !std::is_same_v<std::remove_const_t<T>, bool> &&
    sizeof(T) >= 4 && !requires { Op::positional; } && sizeof(typename Op::acc) <= 16 &&
    16 % sizeof(typename Op::acc) == 0;

// ---------------------------------------------------------------------------
// CUDA executor.

#if LOOM_CUDA_COMPILER
// Item v of what CUB reduces: V consecutive elements of a contiguous, aligned
// expression loaded as 16-byte vectors and combined left to right, or, with
// V == 1, one element by coordinates. Every vector item is whole (the last
// n % V elements are combined by finalize_fn): an item has no branch, so the
// compiler can issue all of a thread's loads of a tile before their first
// use, as for CUB's own vectorized pointer loads.
template <class Op, class B, int V, bool Linear, std::size_t R>
struct lift_items {
  Op op;
  B b;
  axis_map<R> m;

  LOOM_HD typename Op::acc operator()(index_t v) const {
    if constexpr (V == 1) {
      return op.lift(read_at<Linear>(b, m, v), v);
    } else {
      const index_t i0 = v * V;
      typename B::template regs<V> r;
      b.template load<V>(i0, r);
      typename Op::acc a = op.lift(b.template elem<V>(r, 0), i0);
      for (int j = 1; j < V; ++j) a = op(a, op.lift(b.template elem<V>(r, j), i0 + j));
      return a;
    }
  }
};

// Applied once to CUB's result: combines the elements [tail, count) that no
// whole vector item held (none on the coordinates path: tail == count), then
// finalizes. One type for both paths of an expression, so CUB's second-pass
// kernel (partials in, this out) is compiled once for both.
template <class Op, class B>
struct finalize_fn {
  Op op;
  B b;
  index_t tail, count;
  LOOM_HD typename Op::result operator()(typename Op::acc a) const {
    for (index_t i = tail; i < count; ++i) a = op(a, op.lift(b.at_linear(i), i));
    return op.finalize(a, count);
  }
};

//! Runs one CUB algorithm: asks for its temp storage size, takes that from
//! the stream-ordered pool (freed in stream order on every path), runs it.
template <class Call>
void run_cub(const Call& call, stream_ref s) {
  std::size_t bytes = 0;
  LOOM_CUDA_CHECK(call(static_cast<void*>(nullptr), bytes));
  scratch<device> tmp(bytes > 0 ? bytes : 1, s);
  LOOM_CUDA_CHECK(call(tmp.p, bytes));
  LOOM_CUDA_CHECK(cudaGetLastError());
  count_device_launch();
}

template <class Op, class T>
struct lift_value {
  Op op;
  LOOM_HD typename Op::acc operator()(T v) const { return op.lift(static_cast<compute_t<T>>(v), 0); }
};

// Sums and means of floating accumulators combine by a plain a + b, so CUB
// is handed cuda::std::plus<> for them: CUB reduces a thread's 16 items of
// a tile as a tree for plus<> (5 adds deep) and one after the other for
// any other functor (17 dependent adds, about 70 cycles before the next
// tile's loads can issue), so with plus<> the kernel is the one
// cub::DeviceReduce::Sum runs, instruction for instruction (PTX check case
// 13). Integer accumulators keep loom's wrapping add (CUB reduces 8-byte
// items one after the other either way).
template <class Op>
inline constexpr bool adds_plainly = false;
template <class T>
inline constexpr bool adds_plainly<sum_op<T>> = std::is_floating_point_v<typename sum_op<T>::acc>;
template <class T>
inline constexpr bool adds_plainly<mean_op<T>> = std::is_floating_point_v<typename mean_op<T>::acc>;

template <class Op, class T, std::size_t R>
void device_reduce_pointer(const Op& op, const bound_leaf<T, R>& b, index_t n, typename Op::result* out,
                           stream_ref s) {
  auto out_it = thrust::make_transform_output_iterator(out, finalize_fn<Op, bound_leaf<T, R>>{op, b, n, n});
  const auto combine = [&] {
    if constexpr (adds_plainly<Op>)
      return ::cuda::std::plus<>{};
    else
      return op;
  }();
  run_cub(
      [&](void* tmp, std::size_t& bytes) {
        return cub::DeviceReduce::TransformReduce(tmp, bytes, b.p, out_it, n, combine, lift_value<Op, T>{op},
                                                  op.identity(), s.get());
      },
      s);
}

template <class Op, class B, int V, bool Linear, std::size_t R>
void device_reduce_all(const Op& op, const B& b, const axis_map<R>& m, index_t n, typename Op::result* out,
                       stream_ref s) {
  const index_t items = n / V;  // V == 1, or n >= V (a whole vector at least)
  const lift_items<Op, B, V, Linear, R> lift{op, b, m};
  auto out_it = thrust::make_transform_output_iterator(out, finalize_fn<Op, B>{op, b, items * V, n});
  run_cub(
      [&](void* tmp, std::size_t& bytes) {
        return cub::DeviceReduce::TransformReduce(tmp, bytes, thrust::counting_iterator<index_t>(0), out_it, items,
                                                  op, lift, op.identity(), s.get());
      },
      s);
}

// Along rows: one block, warp or thread per output (grid-stride over
// outputs; plan.row_threads). Across rows:
// block (x, y) takes tiles of 32 outputs x, x + gridDim.x, ... over chunk y
// of the range. See the mappings above.
template <int V, bool Linear, class Op, class B, std::size_t R>
__global__ void __launch_bounds__(axis_block)
    axis_reduce_kernel(typename Op::result* out, typename Op::acc* partial, Op op, B b, axis_map<R> m,
                       index_t outputs, index_t k, axis_plan plan) {
  using acc = typename Op::acc;
  using block_reduce = cub::BlockReduce<acc, axis_block>;
  struct lane_accs {
    acc v[axis_block];
  };
  __shared__ typename block_reduce::TempStorage tmp;
  __shared__ cub::Uninitialized<lane_accs> lanes;
  const int t = static_cast<int>(threadIdx.x);
  const index_t s = blockIdx.y, lo = s * plan.chunk, hi = lo + plan.chunk < k ? lo + plan.chunk : k;
  if (!plan.cross) {
    const auto share = [&]<bool Wide>(index_t o, int u, int nt, std::bool_constant<Wide>) {
      if constexpr (Linear && V > 1)
        if (plan.vec) return row_share_vec<V, Wide>(op, b, o * k + lo, hi - lo, u, nt, lo);
      return row_share<Linear>(op, b, m, o * k + lo, hi - lo, u, nt, lo);
    };
    if (plan.row_threads == 1) {  // a thread per output (rows of at most thread_row_max, one chunk)
      const index_t step = static_cast<index_t>(gridDim.x) * axis_block;
      for (index_t o = static_cast<index_t>(blockIdx.x) * axis_block + t; o < outputs; o += step)
        out[o] = op.finalize(share(o, 0, 1, std::false_type{}), k);
      return;
    }
    if (plan.row_threads == 32) {  // a warp per output (short rows, one chunk)
      using warp_reduce = cub::WarpReduce<acc>;
      constexpr int warps = axis_block / 32;
      __shared__ typename warp_reduce::TempStorage wtmp[warps];
      const int warp = t / 32, lane = t % 32;
      for (index_t o = static_cast<index_t>(blockIdx.x) * warps + warp; o < outputs;
           o += static_cast<index_t>(gridDim.x) * warps) {
        const acc total = warp_reduce(wtmp[warp]).Reduce(share(o, lane, 32, std::true_type{}), op);
        if (lane == 0) out[o] = op.finalize(total, k);
        __syncwarp();  // wtmp[warp] is reused by the warp's next output
      }
      return;
    }
    for (index_t o = blockIdx.x; o < outputs; o += gridDim.x) {
      const acc total = block_reduce(tmp).Reduce(share(o, t, axis_block, std::true_type{}), op);
      if (t == 0) {
        if (plan.splits == 1)
          out[o] = op.finalize(total, k);
        else
          partial[s * outputs + o] = total;
      }
      __syncthreads();  // tmp is reused by the next output
    }
    return;
  }
  const int x = t % cross_outputs, lane = t / cross_outputs;
  const index_t tiles = (outputs + cross_outputs - 1) / cross_outputs;
  for (index_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const index_t o = tile * cross_outputs + x;
    const index_t base = Linear && o < outputs ? line_base(o, plan.inner, k) : 0;
    lanes.Alias().v[t] = o < outputs ? cross_share<Linear>(op, b, m, o, base, static_cast<index_t>(plan.inner.d), k,
                                                           lo, hi, lane)
                                     : op.identity();
    __syncthreads();
    if (lane == 0 && o < outputs) {
      acc a = lanes.Alias().v[x];
      for (int l = 1; l < cross_lanes; ++l) a = op(a, lanes.Alias().v[l * cross_outputs + x]);
      if (plan.splits == 1)
        out[o] = op.finalize(a, k);
      else
        partial[s * outputs + o] = a;
    }
    __syncthreads();  // lanes is reused by the next tile
  }
}

// Combines the chunks' partial results of each output in chunk order.
template <class Op>
__global__ void __launch_bounds__(256) axis_combine_kernel(typename Op::result* out, const typename Op::acc* partial,
                                                           Op op, index_t outputs, index_t splits, index_t k) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t o = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs; o += step) {
    typename Op::acc a = partial[o];
    for (index_t s = 1; s < splits; ++s) a = op(a, partial[s * outputs + o]);
    out[o] = op.finalize(a, k);
  }
}

template <int V, bool Linear, class Op, class B, std::size_t R>
void device_reduce_axes(const Op& op, const B& b, const axis_map<R>& m, index_t outputs, index_t k,
                        const axis_plan& plan, typename Op::result* out, stream_ref s) {
  using acc = typename Op::acc;
  const index_t per_block = plan.cross ? cross_outputs : axis_block / plan.row_threads;
  const index_t blocks = (outputs + per_block - 1) / per_block;
  const dim3 grid(grid_size(blocks, 16, s.device()), static_cast<unsigned>(plan.splits));
  const auto launch = [&](acc* partial) {
    launch_kernel(axis_reduce_kernel<V, Linear, Op, B, R>, grid, axis_block, 0, s.get(), out, partial, op, b, m, outputs,
                  k, plan);
  };
  if (plan.splits == 1) {
    launch(nullptr);
    return;
  }
  scratch<device> part(static_cast<std::size_t>(plan.splits * outputs) * sizeof(acc), s);
  launch(static_cast<acc*>(part.p));
  launch_kernel(axis_combine_kernel<Op>, grid_size((outputs + 255) / 256, 16, s.device()), 256, 0, s.get(), out,
                static_cast<const acc*>(part.p), op, outputs, plan.splits, k);
}
#endif

// ---------------------------------------------------------------------------
// The driver shared by every reduction.

template <class Node>
constexpr void check_reducible() {
  static_assert(!std::is_void_v<typename Node::space>,
                "loom: a reduction needs an expression over at least one tensor, not only scalars");
  static_assert(!std::is_same_v<typename Node::space, mixed_space>,
                "loom: an expression mixes host and device tensors; copy one side first with loom::to_device(x) or "
                "loom::to_host(x)");
}

//! Which axes of a rank-R expression are reduced; throws index_error for an
//! axis out of range or given twice.
template <std::size_t R, std::size_t K>
std::array<bool, R> reduced_axes(const std::array<int, K>& axes, const char* name) {
  std::array<bool, R> red{};
  for (std::size_t i = 0; i != K; ++i) {
    const std::size_t a = normalize_axis<R>(axes[i]);
    if (red[a])
      throw index_error(std::string("loom: ") + name + "() got axis " + std::to_string(axes[i]) +
                        " twice (expected distinct axes)");
    red[a] = true;
  }
  return red;
}

//! The walk order of a reduction over the axes `red` of extents `ext`: the
//! kept axes, then the reduced ones; the number of outputs and the elements
//! of each (`k`).
template <std::size_t R>
struct reduce_layout {
  std::array<std::size_t, R> order{};
  index_t outputs = 1, k = 1;
};
template <std::size_t R>
reduce_layout<R> layout_of(const shape<R>& ext, const std::array<bool, R>& red) {
  reduce_layout<R> l;
  std::size_t p = 0;
  for (std::size_t d = 0; d != R; ++d)
    if (!red[d]) {
      l.order[p++] = d;
      l.outputs *= ext[d];
    }
  for (std::size_t d = 0; d != R; ++d)
    if (red[d]) {
      l.order[p++] = d;
      l.k *= ext[d];
    }
  return l;
}

// Whole: every axis is reduced (known at compile time), the one case that
// compiles CUB's device-wide reduction; axis reductions compile only
// axis_reduce_kernel, twice (linear and by coordinates), and one combining
// kernel per reduction type (compile time grows with every CUB instantiation).
template <class Op, bool Keep, bool Whole, std::size_t OR, class Node, std::size_t R>
auto reduce_run(const Node& n, const std::array<bool, R>& red, const Op& op, const char* api) {
  using S = typename Node::space;
  using result = typename Op::result;
  require_cuda_compiler_for<S>();
  const shape<R> ext = n.extents();
  shape<OR> oshape{};
  if constexpr (OR > 0) {
    std::size_t o = 0;
    for (std::size_t d = 0; d != R; ++d)
      if (!red[d] || Keep) oshape[o++] = red[d] ? 1 : ext[d];
  }
  const reduce_layout<R> lay = layout_of(ext, red);
  const index_t outputs = lay.outputs, k = lay.k;
  tensor<result, OR, S> out(oshape);
  if (outputs == 0) return out;
  if (k == 0) {
    if constexpr (!Op::has_identity) {
      throw value_error(std::string("loom: ") + api + "() over an empty range (shape " + shape_string(ext) +
                        ") has no identity; expected at least 1 element to reduce, got 0");
    } else {
      fill(out, op.finalize(op.identity(), 0));
      return out;
    }
  }
  bool row_major = false;
  const axis_map<R> m = make_axis_map(ext, lay.order, row_major);
  bind_info info;
  const auto b = bind_for_read(n, ext, info);
  const bool linear = info.contiguous && row_major;
  result* po = out.data();

  if constexpr (std::is_same_v<S, host>) {
    auto run = [&](auto linear_tag) {
      constexpr bool L = decltype(linear_tag)::value;
      if (outputs == 1) {
        po[0] = op.finalize(host_reduce_all(op, [&](index_t j) { return op.lift(read_at<L>(b, m, j), j); }, k), k);
        return;
      }
      count_host_launch();
#if LOOM_HAS_OPENMP
#pragma omp parallel for schedule(static) if (outputs * k > 32768)
#endif
      for (index_t q = 0; q < outputs; ++q)
        po[q] = op.finalize(pairwise(op, [&](index_t j) { return op.lift(read_at<L>(b, m, q * k + j), j); }, 0, k), k);
    };
    if (linear)
      run(std::true_type{});
    else
      run(std::false_type{});
  } else {
#if LOOM_CUDA_COMPILER
    const stream_ref s = current_stream();
    using B = std::remove_cvref_t<decltype(b)>;
    if constexpr (Whole) {
      constexpr int V = static_cast<int>(16 / min_leaf_size<Node>::value);
      // Two compiled paths per expression, not three: a contiguous input
      // (CUB's pointer path for a plain tensor, else 16-byte items) and
      // the coordinates path. An unaligned contiguous input (rare: a slice at
      // an odd offset) and one shorter than a vector take the coordinates
      // path unless it is a plain tensor.
      if constexpr (reduces_by_pointer<Op, Node>) {
        if (linear)
          device_reduce_pointer(op, b, k, po, s);
        else
          device_reduce_all<Op, B, 1, false>(op, b, m, k, po, s);
      } else if (linear && info.aligned && k >= V) {
        device_reduce_all<Op, B, V, true>(op, b, m, k, po, s);
      } else {
        device_reduce_all<Op, B, 1, false>(op, b, m, k, po, s);
      }
    } else {
      constexpr int V = static_cast<int>(16 / min_leaf_size<Node>::value);
      const axis_plan plan =
          plan_axis_reduce(ext, red, info.contiguous, info.aligned, outputs, k, sm_count(s.device()));
      if (plan.linear)
        device_reduce_axes<V, true>(op, b, m, outputs, k, plan, po, s);
      else
        device_reduce_axes<V, false>(op, b, m, outputs, k, plan, po, s);
    }
#endif
  }
  return out;
}

template <template <class> class OpT, class E, class... A>
auto reduce_all(const char* api, const E& e, A... args) {
  using node = node_t<E>;
  check_reducible<node>();
  using Op = OpT<typename node::value_type>;
  std::array<bool, node::rank> red{};
  red.fill(true);
  return reduce_run<Op, false, true, 0>(as_node(e), red, Op{args...}, api);
}

template <template <class> class OpT, bool Keep, class E, std::size_t K, class... A>
auto reduce_axes(const char* api, const E& e, const std::array<int, K>& axes, A... args) {
  using node = node_t<E>;
  check_reducible<node>();
  constexpr std::size_t R = node::rank;
  static_assert(K <= R, "loom: a reduction names more axes than the expression has");
  using Op = OpT<typename node::value_type>;
  const auto red = reduced_axes<R>(axes, api);
  return reduce_run<Op, Keep, K == R, (Keep ? R : R - K)>(as_node(e), red, Op{args...}, api);
}

template <std::size_t K>
std::array<int, K> to_axes(const int (&a)[K]) {
  std::array<int, K> r{};
  for (std::size_t i = 0; i != K; ++i) r[i] = a[i];
  return r;
}
}  // namespace detail

// Five spellings per reduction: whole tensor, one axis, one axis keeping it,
// a set of axes, a set of axes keeping them.
#define LOOM_REDUCTION_AXES(name, op)                                                     \
  template <expression E>                                                                 \
  [[nodiscard]] auto name(const E& e, int axis) {                                         \
    return detail::reduce_axes<op, false>(#name, e, std::array<int, 1>{axis});            \
  }                                                                                       \
  template <expression E>                                                                 \
  [[nodiscard]] auto name(const E& e, int axis, keepdims_t) {                             \
    return detail::reduce_axes<op, true>(#name, e, std::array<int, 1>{axis});             \
  }                                                                                       \
  template <expression E, std::size_t K>                                                  \
  [[nodiscard]] auto name(const E& e, const int (&axes)[K]) {                             \
    return detail::reduce_axes<op, false>(#name, e, detail::to_axes(axes));               \
  }                                                                                       \
  template <expression E, std::size_t K>                                                  \
  [[nodiscard]] auto name(const E& e, const int (&axes)[K], keepdims_t) {                 \
    return detail::reduce_axes<op, true>(#name, e, detail::to_axes(axes));                \
  }
#define LOOM_REDUCTION(name, op)                                                          \
  template <expression E>                                                                 \
  [[nodiscard]] auto name(const E& e) {                                                   \
    return detail::reduce_all<op>(#name, e);                                              \
  }                                                                                       \
  LOOM_REDUCTION_AXES(name, op)

//! Sum of the elements of any expression, over the whole tensor (a 0-d
//! tensor), one axis or a set of axes (`keepdims` keeps them as extent 1).
//! Result type sum_result_t<T>: int64 for bool/integers, else T; accumulates
//! in accumulate_t<T> (float for half/bf16). Empty: 0. The expression's
//! elementwise work is fused into the loads: one pass over the inputs.
//! Kernels: whole tensor, one cub::DeviceReduce call (CUB runs one kernel, or
//! two for inputs larger than one tile); along axes, one kernel (two when the
//! outputs are few and their ranges long: the ranges in chunks, then their
//! combination; see docs/03_reductions.md). Host: one parallel loop.
//! Example: `auto s = loom::sum(x * y); float v = loom::item(s);`,
//! `auto rows = loom::sum(x, -1);`, `auto c = loom::sum(x, {0, 2}, loom::keepdims);`
LOOM_REDUCTION(sum, detail::sum_op)
//! Product of the elements; like sum (int64 for integers, 1 when empty).
//! Example: `auto p = loom::prod(x, 0);`
LOOM_REDUCTION(prod, detail::prod_op)
//! Arithmetic mean; float_result_t<T> (float for integers: up to 32 bits
//! summed exactly in int64, 64-bit ones in double, divided once in double);
//! NaN when empty.
//! Same kernels as sum (the division happens as CUB writes its result).
//! Example: `auto m = loom::mean(x, 1, loom::keepdims);`
LOOM_REDUCTION(mean, detail::mean_op)
//! Largest / smallest element along axes (torch.amax / amin); NaN propagates;
//! the result type is T; an empty range throws value_error. Kernels as sum.
//! (loom::max(a, b) with two operands is the elementwise maximum, so the
//! axis forms are spelled amax / amin, as in PyTorch.)
//! Example: `auto m = loom::amax(abs(a - b), 1);`
LOOM_REDUCTION(amax, detail::max_op)
LOOM_REDUCTION(amin, detail::min_op)
//! True where any / all elements are non-zero; bool. Empty: false / true.
//! Example: `bool bad = loom::item(loom::any(x != x));  // a NaN anywhere`
LOOM_REDUCTION(any, detail::any_op)
LOOM_REDUCTION(all, detail::all_op)
//! Number of non-zero elements; int64. Example: `auto n = loom::count_nonzero(x > 0, 1);`
LOOM_REDUCTION(count_nonzero, detail::count_nonzero_op)
//! Vector norms: sum |x| (L1), sqrt(sum x^2) (L2), max |x| (Linf, NaN
//! propagates); float_result_t<T>; 0 when empty. Kernels as sum.
//! Example: `auto d = loom::l2_norm(a - b);`
LOOM_REDUCTION(l1_norm, detail::l1_op)
LOOM_REDUCTION(l2_norm, detail::l2_op)
LOOM_REDUCTION(linf_norm, detail::linf_op)
//! log(sum(exp(x))) computed stably in one pass (running maximum);
//! float_result_t<T>; -inf when empty. Kernels as sum.
//! Example: `auto lse = loom::logsumexp(logits, -1, loom::keepdims);`
LOOM_REDUCTION(logsumexp, detail::logsumexp_op)

//! The largest / smallest element of the whole expression (a 0-d tensor of
//! T); NaN propagates; empty throws value_error. One CUB call. With two
//! operands, loom::max(a, b) is the elementwise maximum; use amax/amin for axes.
//! Example: `float hi = loom::item(loom::max(x));`
template <expression E>
[[nodiscard]] auto max(const E& e) {
  return detail::reduce_all<detail::max_op>("max", e);
}
template <expression E>
[[nodiscard]] auto min(const E& e) {
  return detail::reduce_all<detail::min_op>("min", e);
}

//! Position of the largest / smallest element (int64): over the whole
//! expression the row-major flat index, along an axis the index on that
//! axis. Ties give the first index; a NaN counts as the largest (argmax) /
//! smallest (argmin) and the first NaN wins, as in PyTorch. Empty throws
//! value_error. Kernels as sum.
//! Example: `auto cls = loom::argmax(logits, -1);`
template <expression E>
[[nodiscard]] auto argmax(const E& e) {
  return detail::reduce_all<detail::argmax_op>("argmax", e);
}
template <expression E>
[[nodiscard]] auto argmax(const E& e, int axis) {
  return detail::reduce_axes<detail::argmax_op, false>("argmax", e, std::array<int, 1>{axis});
}
template <expression E>
[[nodiscard]] auto argmax(const E& e, int axis, keepdims_t) {
  return detail::reduce_axes<detail::argmax_op, true>("argmax", e, std::array<int, 1>{axis});
}
template <expression E>
[[nodiscard]] auto argmin(const E& e) {
  return detail::reduce_all<detail::argmin_op>("argmin", e);
}
template <expression E>
[[nodiscard]] auto argmin(const E& e, int axis) {
  return detail::reduce_axes<detail::argmin_op, false>("argmin", e, std::array<int, 1>{axis});
}
template <expression E>
[[nodiscard]] auto argmin(const E& e, int axis, keepdims_t) {
  return detail::reduce_axes<detail::argmin_op, true>("argmin", e, std::array<int, 1>{axis});
}

// var and stddev take an optional trailing correction.
#define LOOM_MOMENT_REDUCTION(name, op)                                                           \
  template <expression E>                                                                         \
  [[nodiscard]] auto name(const E& e, correction c = {}) {                                        \
    return detail::reduce_all<op>(#name, e, detail::moment_arg<op, E>(c));                        \
  }                                                                                               \
  template <expression E>                                                                         \
  [[nodiscard]] auto name(const E& e, int axis, correction c = {}) {                              \
    return detail::reduce_axes<op, false>(#name, e, std::array<int, 1>{axis}, detail::moment_arg<op, E>(c)); \
  }                                                                                               \
  template <expression E>                                                                         \
  [[nodiscard]] auto name(const E& e, int axis, keepdims_t, correction c = {}) {                  \
    return detail::reduce_axes<op, true>(#name, e, std::array<int, 1>{axis}, detail::moment_arg<op, E>(c)); \
  }                                                                                               \
  template <expression E, std::size_t K>                                                          \
  [[nodiscard]] auto name(const E& e, const int (&axes)[K], correction c = {}) {                  \
    return detail::reduce_axes<op, false>(#name, e, detail::to_axes(axes), detail::moment_arg<op, E>(c)); \
  }                                                                                               \
  template <expression E, std::size_t K>                                                          \
  [[nodiscard]] auto name(const E& e, const int (&axes)[K], keepdims_t, correction c = {}) {      \
    return detail::reduce_axes<op, true>(#name, e, detail::to_axes(axes), detail::moment_arg<op, E>(c)); \
  }

namespace detail {
template <template <class> class OpT, class E>
auto moment_arg(correction c) {
  return static_cast<typename OpT<typename node_t<E>::value_type>::F>(c.value);
}
}  // namespace detail

//! Variance and standard deviation, numerically stable (Welford / Chan
//! merging, one pass), with PyTorch's correction: divisor max(0, N - c),
//! c = 1 by default. float_result_t<T>; NaN when N - c <= 0 and all equal,
//! and NaN over an empty range for any c.
//! Kernels as sum.
//! Example: `auto v = loom::var(x, 0, loom::correction{0});`, `auto s = loom::stddev(x);`
LOOM_MOMENT_REDUCTION(var, detail::variance_op)
LOOM_MOMENT_REDUCTION(stddev, detail::stddev_op)

#undef LOOM_MOMENT_REDUCTION
#undef LOOM_REDUCTION
#undef LOOM_REDUCTION_AXES

//! The single element of a tensor or view (any rank, size 1) as a host
//! value: the same as `x.item()` (see view::item). For device data this
//! copies one element to the host and waits for the current stream. Throws
//! shape_error unless the size is 1.
//! Example: `float total = loom::item(loom::sum(x));`
template <tensor_like X>
auto item(const X& x) {
  return x.item();
}
}  // namespace loom
