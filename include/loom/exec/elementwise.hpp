// SPDX-License-Identifier: Apache-2.0
#pragma once

// The elementwise executor: one launch that evaluates a bound tree at every
// output element, on the host (a parallel loop) or the device (one kernel).
// Dense and periodic operands take the contiguous path (16-byte vector
// loads on the device, loops the compiler runs in SIMD lanes on the host);
// other broadcast, strided or unaligned ones the general path (coordinates
// from precomputed fast integer division).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/detail/fast_divmod.hpp"
#include "loom/exec/eval_info.hpp"
#include "loom/exec/shared_params.hpp"
#include "loom/expr/bound.hpp"
#include "loom/core/simd/dispatch.hpp"
#include "loom/tensor/view.hpp"

namespace loom::detail {
// One parameter block for the general path: output pointer and strides, and
// the divisors that turn a linear index into coordinates.
template <class O, std::size_t R>
struct general_out {
  O* p;
  shape<R> st;
  fast_divmod div[R > 0 ? R : 1];
};

template <class O, std::size_t R, class B>
LOOM_HD void eval_general_at(const general_out<O, R>& out, const B& e, index_t i) {
  index_t idx[R > 0 ? R : 1];
  index_t off = 0;
  std::uint64_t rest = static_cast<std::uint64_t>(i);
  for (std::size_t d = R; d-- > 0;) {
    std::uint64_t q, r;
    out.div[d].divmod(rest, q, r);
    idx[d] = static_cast<index_t>(r);
    off += idx[d] * out.st[d];
    rest = q;
  }
  out.p[off] = convert<O>(e.at(idx));
}

#if LOOM_CUDA_COMPILER
template <int vector_width, class O, class B>
__global__ void __launch_bounds__(256) contiguous_kernel(O* out, B e, index_t n) {
  const index_t nv = n / vector_width;
  const index_t tid = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
  // Not unrolled: one iteration already has a 16-byte load per input in flight,
  // and the code stays one loop body per expression.
#pragma unroll 1
  for (index_t v = tid; v < nv; v += step) {
    typename B::template regs<vector_width> r;
    e.template load<vector_width, true>(v * vector_width, r);
    vec_regs<O, vector_width> o;
#pragma unroll
    for (int j = 0; j < vector_width; ++j) o.v[j] = convert<O>(e.template elem<vector_width>(r, j));
    vec_store<O, vector_width>(out + v * vector_width, o);
  }
  const index_t t = nv * vector_width + tid;
  if (t < n) out[t] = convert<O>(e.template at_linear<true>(t));
}

// contiguous_kernel for a tree whose layer parameters are loaded once per
// vector step (shared_params.hpp): `params` loads each into the context its
// uses read.
template <int vector_width, class O, class B, class P>
__global__ void __launch_bounds__(256) contiguous_shared_kernel(O* out, B e, P params, index_t n) {
  const index_t nv = n / vector_width;
  const index_t tid = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
#pragma unroll 1
  for (index_t v = tid; v < nv; v += step) shared_vector_step<vector_width>(out, e, params, v);
  const index_t t = nv * vector_width + tid;
  if (t < n) out[t] = convert<O>(e.template at_linear<true>(t));
}

template <class O, std::size_t R, class B>
__global__ void __launch_bounds__(256) general_kernel(general_out<O, R> out, B e, index_t n) {
  const index_t step = static_cast<index_t>(gridDim.x) * blockDim.x;
#pragma unroll 1
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    eval_general_at(out, e, i);
}

// Blocks of 256 threads for `work` items, at most 32 resident per SM.
inline unsigned grid_for(index_t work, int device) { return grid_size((work + 255) / 256, 32, device); }
#endif

// The host's per-period loop: a tree of leaves, scalars, maps and nodes that
// can move their linear index 0 to an element (rebase_linear, as a random
// leaf does; their values depend on the index through their offsets alone)
// can be rebased to a block's first element. Any other node kind keeps the
// per-element periodic path.
namespace cap {
struct rebasable {
  template <class N>
  using fallback = std::bool_constant<requires(N& n) { n.rebase_linear(index_t{}); }>;
};
}  // namespace cap
template <class T, std::size_t R>
struct capability<cap::rebasable, bound_leaf<T, R>> : std::true_type {};
template <class C>
struct capability<cap::rebasable, bound_scalar<C>> : std::true_type {};
template <class F, class Cin, class... B>
struct capability<cap::rebasable, bound_map<F, Cin, B...>> : std::true_type {};
template <class N>
struct not_rebasable_node : std::bool_constant<!capability<cap::rebasable, N>::value> {};

// A node that computes several consecutive elements at once in load (a
// random leaf: one Philox block per four elements); trees that hold one
// take the host's run loop (host_run_loop) on the contiguous path.
namespace cap {
struct computes_blocks {
  template <class N>
  using fallback = std::bool_constant<requires { requires N::linear_blocks; }>;
};
}  // namespace cap
template <class N>
using computes_blocks = capability<cap::computes_blocks, N>;

// Periods shorter than this keep the per-element loop (a copy of the tree
// per piece would cost more than the modulo it saves); longer ones are cut
// into pieces of at most host_max_piece elements, so threads share the work.
inline constexpr index_t host_min_period = 64;
inline constexpr index_t host_max_piece = 16384;
// Elements per load of the host's run loop: a whole number of 16-byte
// units of any element type and of Philox blocks.
inline constexpr int host_run_width = 16;

// A copy of bound tree b whose at_linear<false>(k) reads what
// b.at_linear<true>(start + k) reads while start + k stays in start's block
// of g elements (g the gcd of the periods): its leaves moved to output
// element `start` (a periodic leaf to start mod its period).
template <class N>
struct moves_to_element
    : std::bool_constant<is_bound_leaf<N>::value ||
                         (!not_rebasable_node<N>::value && requires(N& n) { n.rebase_linear(index_t{}); })> {};
template <class B>
B rebased_tree(const B& b, index_t start) {
  B c = b;
  visit_if<moves_to_element>(c, [start](auto& node) {
    if constexpr (is_bound_leaf<std::remove_cvref_t<decltype(node)>>::value)
      node.p += node.template linear_offset<true>(start);
    else
      node.rebase_linear(start);
  });
  return c;
}

// A node the host's contiguous loop reads, row by row, as a dense operand
// over a run of memory (an indexing node of a tensor: host_run).
namespace cap {
struct reads_host_runs {
  template <class N>
  using fallback = std::bool_constant<requires(const N& n, index_t& len) { n.host_run(len); }>;
};
}  // namespace cap
template <class N>
using reads_host_runs = capability<cap::reads_host_runs, N>;
// A node the run-by-run path (host_segments) cannot rebuild: one that
// computes blocks (a random leaf) or holds children, other than maps and
// the run readers.
template <class N>
struct not_segment_node
    : std::bool_constant<!reads_host_runs<N>::value && (computes_blocks<N>::value || child_count_v<N> > 0)> {};
template <class F, class Cin, class... B>
struct not_segment_node<bound_map<F, Cin, B...>> : std::false_type {};
template <class B>
inline constexpr bool segments_tree = tree_any_v<B, reads_host_runs> && !tree_any_v<B, not_segment_node>;

// Segments of a piece of tree c that end where a run reader's row ends:
// in each, the tree with every run reader replaced by a dense leaf over its
// run, evaluated in SIMD lanes as a tree of dense operands (an embedding's
// rows copied as whole runs).
template <class O, class B>
void host_segments(O* q, const B& c, index_t len) {
  for (index_t k = 0; k < len;) {
    index_t seg = len - k;
    const auto t = transform(rebased_tree(c, k), [&seg](const auto& n) {
      if constexpr (reads_host_runs<std::remove_cvref_t<decltype(n)>>::value) {
        index_t run = 0;
        auto leaf = n.host_run(run);
        seg = std::min(seg, run);
        return leaf;
      } else {
        return n;
      }
    });
    O* const out = q + k;
    if constexpr (std::is_same_v<std::remove_const_t<decltype(t)>, bound_leaf<O, 1>>) {
      // The whole tree is one run of the output's type: a copy.
      std::memcpy(static_cast<void*>(out), static_cast<const void*>(t.p), static_cast<std::size_t>(seg) * sizeof(O));
    } else {
#if LOOM_HAS_OPENMP && !defined(__clang__)
#pragma omp simd
#endif
      for (index_t i = 0; i < seg; ++i) out[i] = convert<O>(t.template at_linear<false>(i));
    }
    k += seg;
  }
}

// A map whose functor computes in floating point (loom::fn's math and
// activations: `floating`) or says `vector_math` (pow): a tree with one
// takes the wide copies of the host's loops (core/simd/dispatch.hpp); other
// trees the baseline copy alone.
template <class N>
struct computes_math : std::false_type {};
template <class F, class Cin, class... B>
struct computes_math<bound_map<F, Cin, B...>>
    : std::bool_constant<requires { requires F::floating; } || requires { requires F::vector_math; }> {};

// One piece of the host's contiguous loop, the tree rebased to its first
// element: in SIMD lanes one element at a time, in the CPU's widest copy of
// the loop (core/simd/dispatch.hpp), or, for trees with nodes that compute
// several elements at once, host_run_width elements per load. A tree whose
// indexing nodes read whole runs takes host_segments instead.
template <class O, class B>
void host_piece(O* q, const B& c, index_t len) {
  if constexpr (segments_tree<B>) {
    bool runs = true;
    visit_if<reads_host_runs>(c, [&runs](const auto& n) { runs = runs && n.host_runs(host_min_period); });
    if (runs) {
      host_segments(q, c, len);
      return;
    }
  }
  if constexpr (tree_any_v<B, computes_blocks>) {
    index_t k = 0;
    for (; k + host_run_width <= len; k += host_run_width) {
      typename B::template regs<host_run_width> r;
      c.template load<host_run_width, false>(k, r);
      for (int j = 0; j < host_run_width; ++j) q[k + j] = convert<O>(c.template elem<host_run_width>(r, j));
    }
    for (; k < len; ++k) q[k] = convert<O>(c.template at_linear<false>(k));
  } else {
    simd::loop<tree_any_v<B, computes_math>>(loom::simd::host_isa(), 0, len,
                                              [q, c](index_t i) { q[i] = convert<O>(c.template at_linear<false>(i)); });
  }
}

// The host's contiguous loop per piece of a block of `period` elements (the
// gcd of the periods; n when every operand is dense): inside a block every
// periodic operand is read at consecutive offsets, so the rebased tree
// evaluates the piece as dense operands.
template <class O, class B>
void host_periodic_loop(O* p, const B& b, index_t n, index_t period) {
  const index_t piece = period < host_max_piece ? period : host_max_piece;
  const index_t pieces_per_block = (period + piece - 1) / piece;
  const index_t pieces = (n + period - 1) / period * pieces_per_block;
  host_for_each(
      pieces,
      [&](index_t j) {
        const index_t block = j / pieces_per_block;
        const index_t start = block * period + j % pieces_per_block * piece;
        if (start >= n) return;
        const index_t len = std::min({start + piece, (block + 1) * period, n}) - start;
        host_piece(p + start, rebased_tree(b, start), len);
      },
      piece);
}

// Leaf occurrences of bound tree b that read the same memory as an earlier
// one (the same address, element size, strides and period): each loads its
// own copy (eval_info::repeated_loads).
template <class B>
int repeated_loads(const B& b) {
  constexpr std::size_t n = tree_sum_v<B, is_bound_leaf>;
  if constexpr (n < 2) {
    return 0;
  } else {
    struct read {
      const void* p;
      std::size_t size, rank;
      const index_t* st;
      bool periodic;
      std::uint64_t period;
    };
    read seen[n];
    std::size_t k = 0;
    int repeated = 0;
    visit_if<is_bound_leaf>(b, [&](const auto& m) {
      const read r{m.p, sizeof(*m.p), m.st.size(), m.st.data(), m.periodic, m.period.d};
      for (std::size_t j = 0; j != k; ++j) {
        const read& o = seen[j];
        if (o.p == r.p && o.size == r.size && o.rank == r.rank && std::equal(o.st, o.st + o.rank, r.st) &&
            o.periodic == r.periodic && (!r.periodic || o.period == r.period)) {
          ++repeated;
          return;
        }
      }
      seen[k++] = r;
    });
    return repeated;
  }
}

//! Runs an elementwise assignment of node tree `e` (no row reductions) into
//! `out` (n > 0 elements): binds it, picks the path, launches once.
template <class O, std::size_t RO, class S, class N>
void run_elementwise(const view<O, RO, S>& out, const N& e, index_t n, eval_info& info) {
  bind_info bi;
  const auto b = binder::bind<0>(e, out, bi);
  info.repeated_loads = repeated_loads(b);
  // Contiguous path: a dense output and operands that are dense or periodic
  // (e.g. a bias row broadcast over the rows of a matrix).
  const bool contiguous = bi.linear && out.is_contiguous();

  if constexpr (std::is_same_v<S, host>) {
    O* const p = out.data();
    using bound_t = std::remove_const_t<decltype(b)>;
    constexpr bool runs = tree_any_v<bound_t, computes_blocks> && !tree_any_v<bound_t, not_rebasable_node>;
    if (runs && contiguous && (bi.contiguous || bi.period_gcd >= host_min_period)) {
      // A random leaf's values come four to a Philox block: pieces of the
      // output in runs of host_run_width elements.
      info.path = eval_path::contiguous;
      host_periodic_loop(p, b, n, bi.contiguous ? n : bi.period_gcd);
    } else if (contiguous && bi.contiguous) {
      // Every operand dense: element i of each at offset i, no periodic
      // branch, so the compiler can run the loop in SIMD lanes, at the
      // CPU's width (core/simd/dispatch.hpp). An output that is also an input
      // has the same index map (bind checks it), so no iteration reads
      // what another writes.
      info.path = eval_path::contiguous;
      simd::for_each<tree_any_v<bound_t, computes_math>>(
          n, [p, b](index_t i) { p[i] = convert<O>(b.template at_linear<false>(i)); });
    } else if (contiguous) {
      info.path = eval_path::contiguous;
      const index_t period = bi.period_gcd;
      if (!tree_any_v<bound_t, not_rebasable_node> && period >= host_min_period) {
        host_periodic_loop(p, b, n, period);
      } else {
        host_for_each(n, [&](index_t i) { p[i] = convert<O>(b.template at_linear<true>(i)); });
      }
    } else {
      info.path = eval_path::general;
      general_out<O, RO> g{p, out.strides(), {}};
      for (std::size_t d = 0; d != RO; ++d) g.div[d] = fast_divmod(static_cast<std::uint64_t>(out.extent(d)));
      host_for_each(n, [&](index_t i) { eval_general_at(g, b, i); });
    }
  } else {
#if LOOM_CUDA_COMPILER
    const stream_ref s = current_stream();
    const bool aligned = bi.aligned && reinterpret_cast<std::uintptr_t>(out.data()) % 16 == 0;
    constexpr int vector_width = vector_width_of<N, sizeof(O)>;
    // A vector of vector_width elements must not straddle the end of a periodic block.
    if (contiguous && aligned && bi.period_gcd % vector_width == 0) {
      info.path = eval_path::contiguous;
      info.vector_width = vector_width;
      const index_t nv = n / vector_width;
      // A layer's argument, or in a plain expression of 8 loads or more a
      // tensor or subexpression, used several times is loaded once per
      // vector step when the launch finds that the uses fit the shared
      // kernel's slots (shared_params.hpp). Other trees build nothing more.
      if constexpr (sharing_tags<N, std::remove_const_t<decltype(b)>>::type::size > 0) {
        using shared = shared_params_of<N, std::remove_const_t<decltype(b)>>;
        if constexpr (shared::repeated_count > 0) {
          using shared_t = typename shared::tree;
          using loads_t = param_loads_t<shared_t, shared::params>;
          shared_t sb = param_sharer<typename shared::tags>::share(e, b);
          loads_t loads{};
          if (const int shared_values = collect_params(sb, loads); shared_values > 0) {
            info.shared_params = shared_values;
            info.repeated_loads = repeated_loads(sb);
            launch_kernel(contiguous_shared_kernel<vector_width, O, shared_t, loads_t>, grid_for(nv, s.device()), 256,
                          0, s.get(), out.data(), sb, loads, n);
            return;
          }
        }
      }
      launch_kernel(contiguous_kernel<vector_width, O, std::remove_const_t<decltype(b)>>, grid_for(nv, s.device()), 256,
                    0, s.get(), out.data(), b, n);
    } else {
      info.path = eval_path::general;
      general_out<O, RO> g{out.data(), out.strides(), {}};
      for (std::size_t d = 0; d != RO; ++d) g.div[d] = fast_divmod(static_cast<std::uint64_t>(out.extent(d)));
      launch_kernel(general_kernel<O, RO, std::remove_const_t<decltype(b)>>, grid_for(n, s.device()), 256, 0, s.get(),
                    g, b, n);
    }
#endif
  }
}
}  // namespace loom::detail
