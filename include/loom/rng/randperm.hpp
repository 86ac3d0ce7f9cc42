// SPDX-License-Identifier: Apache-2.0
#pragma once

// A random permutation of 0 .. n - 1 (loom::randperm), for shuffling a data
// set: a random 64-bit key per index from the Philox stream (seed, offset),
// then the indices sorted by key with loom's sort (docs/09_random.md).

#include <cstddef>
#include <cstdint>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/creation.hpp"
#include "loom/reduce/sort.hpp"
#include "loom/rng/node.hpp"
#include "loom/rng/philox.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom {
namespace fn {
//! randperm's sort key of index i: the 64 bits of words 2i (high half) and
//! 2i + 1 (low half) of the Philox stream `key`, as a signed int64; those
//! are words 2 (i % 2) and 2 (i % 2) + 1 of block i / 2. One Philox block
//! per index (two indices share a block).
struct randperm_key {
  using result_type = std::int64_t;
  detail::rng::stream_key key;
  LOOM_HD std::int64_t operator()(const index_t* c) const {
    const auto i = static_cast<std::uint64_t>(c[0]);
    const philox_words w = key.block(i >> 1);
    const int lane = 2 * static_cast<int>(i & 1);
    return static_cast<std::int64_t>((std::uint64_t{w.w[lane]} << 32) | w.w[lane + 1]);
  }
};
}  // namespace fn

//! A random permutation of the integers 0 .. n - 1, as a new rank-1 int64
//! tensor in Space (device unless given): index i gets a 64-bit key from the
//! Philox stream (seed, offset) (fn::randperm_key), and the permutation
//! lists the indices in ascending order of their keys (as signed integers),
//! equal keys in index order. With independent uniform keys every
//! permutation is equally likely (no modulo bias); two keys are equal with
//! probability below n^2 / 2^65, and then the order is still fixed. The
//! result depends only on (n, seed, offset): not on the executor, the GPU
//! or the number of host threads. The keys are the stream's own words, so
//! give a shuffle a (seed, offset) of its own (for a new order each epoch,
//! the epoch as offset). n < 0 throws value_error.
//! Cost: one kernel writes the keys, then loom::sort's passes over one row:
//! host, std::stable_sort of the indices by key (one thread); device, a
//! position kernel, one 64-bit cub::DeviceRadixSort (about 8 passes over
//! keys and positions) and a gather kernel, with temporaries from the pool
//! and nothing waiting for the host. Memory: 3 n int64 in Space besides the
//! sort's temporaries.
//! Example: `auto order = loom::randperm<loom::host>(n_samples, seed, epoch);`
template <memory_space Space = device>
[[nodiscard]] tensor<std::int64_t, 1, Space> randperm(index_t n, std::uint64_t seed, std::uint64_t offset = 0) {
  detail::require_cuda_compiler_for<Space>();
  detail::check_creation_count(n, "randperm");
  tensor<std::int64_t, 1, Space> keys({n});
  assign(keys, coord_leaf_node<fn::randperm_key, 1>(fn::randperm_key{detail::rng::stream_key::of(seed, offset)},
                                                    shape<1>{n}));
  values_indices<std::int64_t, 1, Space> sorted{tensor<std::int64_t, 1, Space>({n}),
                                                tensor<std::int64_t, 1, Space>({n})};
  detail::sort::sort_rows(keys, sorted, sort_order::ascending);
  return std::move(sorted.indices);
}
}  // namespace loom
