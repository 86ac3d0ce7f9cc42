// SPDX-License-Identifier: Apache-2.0
#pragma once

// Multi-tensor launches: many assign_many items (exec/multi.hpp) of one
// type, or many sums over expressions, in one launch. Each tensor is cut
// into chunks of elements: one host loop over all chunks, or on the device
// one kernel per group of items (as many as fit a kernel's parameters), a
// block per chunk. `batches` gathers items of any types and launches each
// type's items together (an optimizer's dtype groups, optim/).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/simd/dispatch.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/multi.hpp"
#include "loom/expr/bound.hpp"

namespace loom::detail::multi {
// Many items launched together (multi-tensor): each item is cut into
// chunks of elements; one host loop over all chunks, or on the device one
// kernel per group_args, a block per chunk.
inline constexpr index_t host_chunk = 16384;
inline constexpr index_t device_chunk = 4096;

template <class Item, int N>
struct group_args {
  static constexpr int size = N;
  Item items[N];
  index_t first_chunk[N + 1];  // chunk c belongs to item j when first_chunk[j] <= c < first_chunk[j + 1]
  int count;
};

#if LOOM_CUDA_COMPILER
// The item of device chunk c and the chunk's elements [begin, end).
template <class Item, int N>
__device__ int chunk_item(const group_args<Item, N>& g, index_t c, index_t& begin, index_t& end) {
  int j = 0;
  while (c >= g.first_chunk[j + 1]) ++j;
  begin = (c - g.first_chunk[j]) * device_chunk;
  end = begin + device_chunk < g.items[j].n ? begin + device_chunk : g.items[j].n;
  return j;
}

template <class Item, int N>
__global__ void __launch_bounds__(256) group_kernel(group_args<Item, N> g) {
  const index_t chunks = g.first_chunk[g.count];
#pragma unroll 1
  for (index_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    index_t begin, end;
    const int j = chunk_item(g, c, begin, end);
    run_range(g.items[j], begin + static_cast<index_t>(threadIdx.x), end, static_cast<index_t>(blockDim.x));
  }
}
#endif

// Items per device launch: as many as fit the 32 KiB of a kernel's
// parameters (CUDA 12.1 and newer, Volta and newer), at most 64.
template <class Item>
inline constexpr int group_size = sizeof(Item) * 64 + 1024 <= 30000 ? 64
                                  : static_cast<int>((30000 - 1024) / sizeof(Item)) > 1
                                      ? static_cast<int>((30000 - 1024) / sizeof(Item))
                                      : 1;

// The host's loop over every chunk of `count` items: body(item, c, begin,
// end) for chunk c (numbered over all items) of elements [begin, end) of
// its item; one parallel loop. Returns the number of chunks.
template <class Item, class F>
index_t host_chunks(const Item* items, std::size_t count, const F& body) {
  std::vector<index_t> first(count + 1, 0);
  for (std::size_t j = 0; j != count; ++j) first[j + 1] = first[j] + (items[j].n + host_chunk - 1) / host_chunk;
  host_for_each(
      first[count],
      [&](index_t c) {
        const auto j = static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), c) - first.begin()) - 1;
        const index_t begin = (c - first[j]) * host_chunk;
        body(items[j], c, begin, std::min(begin + host_chunk, items[j].n));
      },
      host_chunk);
  return first[count];
}

// The device's launches of `count` items: launch(g) for each group_args g
// of up to group_size items. Returns the launches.
template <class Item, class F>
std::size_t device_groups(const Item* items, std::size_t count, const F& launch) {
  constexpr int N = group_size<Item>;
  using args_t = group_args<Item, N>;
  static_assert(sizeof(args_t) <= 32764, "loom: internal error: a multi-tensor launch exceeds a kernel's parameters");
  // Items need not be default-constructible: the arguments are built in
  // raw storage (every member trivially copyable).
  alignas(args_t) unsigned char raw[sizeof(args_t)];
  args_t& g = *reinterpret_cast<args_t*>(raw);
  std::size_t launched = 0;
  for (std::size_t j0 = 0; j0 < count; j0 += N) {
    g.count = static_cast<int>(std::min<std::size_t>(N, count - j0));
    g.first_chunk[0] = 0;
    for (int j = 0; j != g.count; ++j) {
      std::memcpy(static_cast<void*>(&g.items[j]), static_cast<const void*>(&items[j0 + j]), sizeof(Item));
      g.first_chunk[j + 1] = g.first_chunk[j] + (items[j0 + j].n + device_chunk - 1) / device_chunk;
    }
    launch(g);
    ++launched;
  }
  return launched;
}

// Launches `count` assignment items of one type; returns the launches.
template <class S, std::size_t R, class L>
std::size_t launch_items(const item<R, L>* items, std::size_t count, void*) {
  if (count == 0) return 0;
  if constexpr (std::is_same_v<S, host>) {
    // A dense item's chunk runs in SIMD lanes at the CPU's width (no
    // periodic branch per leaf), the others one element at a time.
    constexpr bool wide = parts_compute_math<L>::value;
    const loom::simd::isa isa = loom::simd::host_isa();
    host_chunks(items, count, [isa](const auto& it, index_t, index_t begin, index_t end) {
      if (it.dense)
        loom::detail::simd::loop<wide>(isa, begin, end, [parts = it.parts](index_t i) {
          at_linear<false>(parts, i, std::make_index_sequence<L::size>{});
        });
      else
        run_range(it, begin, end, 1);
    });
    return 1;
  } else {
#if LOOM_CUDA_COMPILER
    const stream_ref s = current_stream();
    return device_groups(items, count, [&](const auto& g) {
      using args_t = std::remove_cvref_t<decltype(g)>;
      launch_kernel(group_kernel<item<R, L>, args_t::size>, grid_size(g.first_chunk[g.count], 8, s.device()), 256, 0,
                    s.get(), g);
    });
#else
    return 0;
#endif
  }
}

// A sum over the elements of one expression (bound for reading), for
// sums_of many tensors in one launch: its chunks' partial sums, in double.
template <std::size_t R, class B>
struct sum_item {
  B b;
  index_t n;
  bool linear;
  divisors<R> div;
};

template <std::size_t R, class B>
LOOM_HD double value_at(const sum_item<R, B>& it, index_t i) {
  if (it.linear) return static_cast<double>(it.b.template at_linear<true>(i));
  index_t idx[R > 0 ? R : 1] = {};
  coords_of<R>(it.div.d, i, idx);
  return static_cast<double>(it.b.at(idx));
}

//! The sum item of expression `e` (no item for no elements: f is not called).
template <class E, class F>
void prepare_sum(const E& e, const F& f) {
  const auto n = as_node(e);
  constexpr std::size_t R = std::remove_const_t<decltype(n)>::rank;
  const shape<R> ext = n.extents();
  index_t size = 1;
  for (std::size_t d = 0; d != R; ++d) size *= ext[d];
  if (size == 0) return;
  bind_info bi;
  const auto b = bind_for_read(n, ext, bi);
  divisors<R> div{};
  for (std::size_t d = 0; d != R; ++d) div.d[d] = fast_divmod(static_cast<std::uint64_t>(ext[d]));
  f(sum_item<R, std::remove_const_t<decltype(b)>>{b, size, bi.linear, div});
}

//! The partial sums that sum items of `n` elements each write: one per
//! chunk, in space S.
template <class S>
index_t sum_chunks(index_t n) {
  const index_t chunk = std::is_same_v<S, host> ? host_chunk : device_chunk;
  return (n + chunk - 1) / chunk;
}

#if LOOM_CUDA_COMPILER
// A block per chunk: each thread sums its elements in order, then the
// block adds its threads' sums in a fixed tree (deterministic).
template <class Item, int N>
__global__ void __launch_bounds__(256) sum_kernel(group_args<Item, N> g, double* partials) {
  __shared__ double acc[256];
  const index_t chunks = g.first_chunk[g.count];
#pragma unroll 1
  for (index_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    index_t begin, end;
    const int j = chunk_item(g, c, begin, end);
    double s = 0;
    for (index_t i = begin + static_cast<index_t>(threadIdx.x); i < end; i += static_cast<index_t>(blockDim.x))
      s += value_at(g.items[j], i);
    acc[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = 128; w > 0; w >>= 1) {
      if (threadIdx.x < w) acc[threadIdx.x] += acc[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) partials[c] = acc[0];
    __syncthreads();
  }
}
#endif

// Launches `count` sum items of one type, writing their chunks' partial
// sums from *static_cast<double**>(ctx) on (and moving it past them);
// returns the launches.
template <class S, std::size_t R, class B>
std::size_t launch_items(const sum_item<R, B>* items, std::size_t count, void* ctx) {
  double*& out = *static_cast<double**>(ctx);
  if (count == 0) return 0;
  if constexpr (std::is_same_v<S, host>) {
    double* const partials = out;
    out += host_chunks(items, count, [partials](const auto& it, index_t c, index_t begin, index_t end) {
      double sum = 0;
      for (index_t i = begin; i < end; ++i) sum += value_at(it, i);
      partials[c] = sum;
    });
    return 1;
  } else {
#if LOOM_CUDA_COMPILER
    const stream_ref s = current_stream();
    return device_groups(items, count, [&](const auto& g) {
      using args_t = std::remove_cvref_t<decltype(g)>;
      launch_kernel(sum_kernel<sum_item<R, B>, args_t::size>, grid_size(g.first_chunk[g.count], 8, s.device()), 256,
                    0, s.get(), g, out);
      out += g.first_chunk[g.count];
    });
#else
    (void)out;
    return 0;
#endif
  }
}

// Items of any types gathered for launching together: one batch per item
// type (a type is one set of outputs' and expressions' types: an
// optimizer's dtype group), launched by flush(). Items are trivially
// copyable and kept as bytes; launch_items launches a batch.
template <class S>
class batches {
 public:
  template <class Item>
  void add(const Item& it) {
    static_assert(std::is_trivially_copyable_v<Item>);
    const launcher f = &launch_erased<Item>;
    one* b = nullptr;
    for (auto& x : list_)
      if (x.f == f) b = &x;
    if (!b) {
      list_.push_back({f, {}, 0});
      b = &list_.back();
    }
    const std::size_t units = ((b->count + 1) * sizeof(Item) + sizeof(unit) - 1) / sizeof(unit);
    b->store.resize(units);
    std::memcpy(reinterpret_cast<unsigned char*>(b->store.data()) + b->count * sizeof(Item),
                static_cast<const void*>(&it), sizeof(Item));
    ++b->count;
  }
  //! Launches every batch in the order of their first items (`ctx`: what
  //! the items' launches share; sum items: the cursor into the partial
  //! sums); returns the launches. The batches are then empty.
  std::size_t flush(void* ctx = nullptr) {
    std::size_t n = 0;
    for (auto& b : list_) n += b.f(b.store.data(), b.count, ctx);
    list_.clear();
    return n;
  }
  std::size_t size() const { return list_.size(); }

 private:
  using launcher = std::size_t (*)(const void*, std::size_t, void*);
  template <class Item>
  static std::size_t launch_erased(const void* p, std::size_t count, void* ctx) {
    return launch_items<S>(static_cast<const Item*>(p), count, ctx);
  }
  // Storage aligned for any item (std::max_align_t itself is an unnamed
  // struct under g++, which nvcc's front end fails to destroy in a vector).
  struct alignas(std::max_align_t) unit {
    unsigned char bytes[alignof(std::max_align_t)];
  };
  struct one {
    launcher f;
    std::vector<unit> store;
    std::size_t count;
  };
  std::vector<one> list_;
};
}  // namespace loom::detail::multi
