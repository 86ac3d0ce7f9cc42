// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/shape.hpp"

#if LOOM_CUDA_COMPILER
#include <cuda/atomic>

#include "loom/reduce/scan/tiles.hpp"
#endif

// The decoupled look-back of the single-pass scans (lookback_scan_kernel
// along rows, cross_lookback_kernel across rows): each tile publishes its
// aggregate, then its inclusive prefix, and a tile's prefix is folded from
// the earlier tiles' published values in tile order, so it depends on the
// data alone, never on which tile published first.
namespace loom::detail::scan {

// The look-back scan's tile states (see lookback_state).
enum : unsigned { tile_pending = 0, tile_aggregate = 1, tile_inclusive = 2 };

//! A tile's status and float value as one 64-bit word: the value's bits
//! above, the status below (a published word is never 0, the pending word).
LOOM_HD std::uint64_t lookback_pack(unsigned status, float v) {
#if defined(__CUDA_ARCH__)
  const std::uint32_t bits = __float_as_uint(v);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
#endif
  return static_cast<std::uint64_t>(bits) << 32 | status;
}
LOOM_HD unsigned lookback_status(std::uint64_t w) { return static_cast<unsigned>(w & 0xffffffffu); }
LOOM_HD float lookback_value(std::uint64_t w) {
  const auto bits = static_cast<std::uint32_t>(w >> 32);
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

inline constexpr int lookback_windows = 8;  // windows of 32 tiles kept while looking back

// Windows each warp of the look-back across rows keeps (see
// cross_lookback_kernel): its 16 warps' windows share the block's static
// shared memory (48 KB at most), so 16-byte accumulators (cummax/cummin's
// value and index) keep 4 windows (32 KB), the others 8 (at most 32 KB).
template <class A>
inline constexpr int cross_windows = sizeof(A) > 8 ? 4 : lookback_windows;

//! What a row's first tile publishes as its inclusive prefix: its aggregate
//! after the identity, as the host's loop starts each row (a tile of -0 sums
//! to -0 alone; +0 then, so that the later tiles' prefixes are +0 too).
template <class Op>
LOOM_HD typename Op::acc lookback_first(const Op& op, const typename Op::acc& aggregate) {
  return op(op.identity(), aggregate);
}

// How the look-back scan of a few long rows (one floating row, or a few
// rows) cuts and paces its tiles, a policy type: block threads x items
// elements per tile (0: loom's choice, 256 x 16 for 4-byte accumulators,
// 256 x 8 for double and int64, 256 x 4 for the value and index of
// cummax/cummin), cub::BlockScan's raking or (warp_scans) warp-scans
// algorithm, a wait of wait_ns before the first window is read (only in
// grids of at least 500 tiles; 0: none), and poll_ns between two reads of a
// tile that has published nothing yet. cumsum, cumprod, cummax and cummin
// use these; scan_impl takes any type with the same five members, so other
// choices can be timed against them. Any choice gives a correct, run-to-run
// reproducible scan; the tile length changes where the partial sums are
// rounded, so results differ between choices in the last bits.
struct lookback_tiles {
  static constexpr int block = 0, items = 0;
  static constexpr bool warp_scans = false;
  static constexpr unsigned wait_ns = 0, poll_ns = 32;
};

//! The look-back scan's prefix for a tile (see lookback_scan_kernel) from
//! what its walk found: the window that holds the nearest inclusive tile, in
//! which lane l read tile end - 1 - l and lane `first` that inclusive prefix
//! (`lane(l)`), and the `kept` windows walked before it without one
//! (`saved(k, l)`: window k, lane l; window 0 is the nearest to the tile).
//! Folded left to right in tile order: the inclusive prefix, the aggregates
//! after it in its window (lanes first - 1 .. 0), then the kept windows from
//! the farthest (lanes 31 .. 0 each). Which tile was found changes where the
//! fold starts, never its value.
template <class Op, class Lane, class Saved>
LOOM_HD typename Op::acc lookback_fold(const Op& op, int first, int kept, const Lane& lane, const Saved& saved) {
  typename Op::acc r = lane(first);
  for (int l = first - 1; l >= 0; --l) r = op(r, lane(l));
  for (int k = kept - 1; k >= 0; --k)
    for (int l = 31; l >= 0; --l) r = op(r, saved(k, l));
  return r;
}

#if LOOM_CUDA_COMPILER
// A tile's state while the look-back runs, for each tile of the row:
// pending (nothing published yet), then its aggregate, then its inclusive
// prefix. A reader needs the status and the value it goes with.
// Float accumulators (float, half and bf16 scan in float) keep both in one
// 64-bit word, published with one release store and read with one acquire
// load, so a window of the walk costs one round trip to memory. Others
// (double, the int64 of integer sums and products, cummax/cummin's value
// and index) keep the value beside a status word (a 16-byte load is not
// single-copy atomic): the reader loads the status, then the value it names
// (two round trips).
template <class A>
struct lookback_split {
  A* agg;            // each tile's aggregate
  A* incl;           // each tile's inclusive prefix
  unsigned* status;  // tile_pending -> tile_aggregate -> tile_inclusive
  unsigned* ticket;  // tiles started

  static std::size_t bytes(index_t tiles) {
    return 2 * static_cast<std::size_t>(tiles) * sizeof(A) + (static_cast<std::size_t>(tiles) + 1) * sizeof(unsigned);
  }
  // The state in `p` (of bytes(tiles)) and the part to zero before the scan.
  static lookback_split at(void* p, index_t tiles, void*& zero, std::size_t& zero_bytes) {
    A* const a = static_cast<A*>(p);
    unsigned* const s = reinterpret_cast<unsigned*>(a + 2 * tiles);
    zero = s;
    zero_bytes = (static_cast<std::size_t>(tiles) + 1) * sizeof(unsigned);
    return {a, a + tiles, s, s + tiles};
  }
  using status_ref = cuda::atomic_ref<unsigned, cuda::thread_scope_device>;
  __device__ void publish(index_t t, unsigned st, const A& v) const {
    (st == tile_inclusive ? incl : agg)[t] = v;
    status_ref(status[t]).store(st, cuda::memory_order_release);
  }
  // Waits until tile t has published (PollNs between reads); returns its status and sets v.
  template <unsigned PollNs>
  __device__ unsigned read(index_t t, A& v) const {
    unsigned f;
    while ((f = status_ref(status[t]).load(cuda::memory_order_acquire)) == tile_pending) __nanosleep(PollNs);
    v = f == tile_inclusive ? incl[t] : agg[t];
    return f;
  }
};

template <class A>
struct lookback_packed {
  static_assert(std::is_same_v<A, float>);
  std::uint64_t* word;  // per tile: lookback_pack(status, value); 0 while pending
  unsigned* ticket;     // tiles started

  static std::size_t bytes(index_t tiles) {
    return static_cast<std::size_t>(tiles) * sizeof(std::uint64_t) + sizeof(unsigned);
  }
  static lookback_packed at(void* p, index_t tiles, void*& zero, std::size_t& zero_bytes) {
    zero = p;
    zero_bytes = bytes(tiles);
    std::uint64_t* const w = static_cast<std::uint64_t*>(p);
    return {w, reinterpret_cast<unsigned*>(w + tiles)};
  }
  using word_ref = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>;
  __device__ void publish(index_t t, unsigned st, const A& v) const {
    word_ref(word[t]).store(lookback_pack(st, v), cuda::memory_order_release);
  }
  template <unsigned PollNs>
  __device__ unsigned read(index_t t, A& v) const {
    for (;;) {
      const std::uint64_t x = word_ref(word[t]).load(cuda::memory_order_acquire);
      if (lookback_status(x) != tile_pending) {
        v = lookback_value(x);
        return lookback_status(x);
      }
      __nanosleep(PollNs);
    }
  }
};

template <class A>
using lookback_state = std::conditional_t<std::is_same_v<A, float>, lookback_packed<A>, lookback_split<A>>;

// One warp's look-back for tile `tile` (> 0) of a run of tiles whose tile 0
// is state entry `state0` (a row of the look-back scan; a line of the scan
// across rows): the fold of the earlier tiles' aggregates, in every lane.
// Window [end - 32, end): lane l reads tile end - 1 - l. Windows with no
// inclusive prefix are kept in `saved` (at most Windows of them,
// lookback_windows in the row look-back; past that the walk starts again
// from this tile: the nearer tiles publish theirs meanwhile). Tile 0 of a
// run is always inclusive and started before every other tile of it, so a
// walk ends there at the latest; it never reads another run's tiles.
template <unsigned PollNs, class Op, class State, int Windows>
__device__ __forceinline__ typename Op::acc lookback_walk(const State& st, const Op& op, index_t state0, index_t tile,
                                                          int lane, typename Op::acc (&saved)[Windows][32]) {
  using acc = typename Op::acc;
  index_t end = tile;
  int kept = 0;
  for (;;) {
    const index_t j = end - 1 - lane;
    // Lanes past tile 0 read tile 0 (published: it started first) and drop it.
    acc v;
    unsigned f = st.template read<PollNs>(state0 + (j >= 0 ? j : 0), v);
    if (j < 0) {
      f = tile_pending;
      v = op.identity();
    }
    const unsigned found = __ballot_sync(0xffffffffu, f == tile_inclusive);
    if (found != 0) {
      const int first = __ffs(found) - 1;  // the nearest inclusive tile
      return lookback_fold(
          op, first, kept,
          [&](int l) { return warp_shfl(v, l); },
          [&](int k, int l) { return saved[k][l]; });
    }
    if (kept == Windows) {
      kept = 0;
      end = tile;
      continue;
    }
    saved[kept][lane] = v;
    __syncwarp();
    ++kept;
    end -= 32;
  }
}
#endif
}  // namespace loom::detail::scan
