// SPDX-License-Identifier: Apache-2.0
#pragma once

// A block mask (docs/15_attention.md): a mask_mod whose cells of 16 query
// rows by 16 keys were classified once, by one loom kernel, as empty,
// partial or full, so that attention skips the empty tiles of a
// data-dependent mask (a document mask) and tests no element of a full one.

#include <cstdint>
#include <string>
#include <type_traits>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/attention/mods.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom {
//! Query rows and keys per cell of a block mask; it divides every tile size
//! of loom's attention kernels, so a tile covers whole cells.
inline constexpr index_t block_mask_cell = 16;

//! The mask kind of a block mask (what loom::attention keeps): the
//! predicate, and a non-owning view of its cell table in memory space Space.
template <class F, class Space>
struct block_masked {
  using space = Space;
  F f;
  const std::uint8_t* cells = nullptr;  // [batch, heads, q_cells, k_cells]: 0 empty, 1 partial, 2 full
  index_t batch = 0, heads = 0, sq = 0, skv = 0;

  LOOM_HD index_t q_cells() const { return (sq + block_mask_cell - 1) / block_mask_cell; }
  LOOM_HD index_t k_cells() const { return (skv + block_mask_cell - 1) / block_mask_cell; }
  constexpr bool operator()(index_t b, index_t h, index_t q, index_t kv) const {
    return static_cast<bool>(f(b, h, q, kv));
  }
  //! Throws shape_error unless a call's sizes are the mask's.
  void check_sizes(const char* what, index_t b, index_t h, index_t q, index_t kv) const {
    if (b != batch || h != heads || q != sq || kv != skv)
      throw shape_error(std::string("loom: ") + what + ": the block mask was made for batch " + std::to_string(batch) +
                        ", " + std::to_string(heads) + " heads, Sq " + std::to_string(sq) + ", Skv " +
                        std::to_string(skv) + "; got batch " + std::to_string(b) + ", " + std::to_string(h) +
                        " heads, Sq " + std::to_string(q) + ", Skv " + std::to_string(kv));
  }
  //! Empty when every cell the tile touches is empty, full when every one is
  //! full, partial otherwise.
  LOOM_HD tile_kind classify(index_t b, index_t h, index_t q0, index_t q1, index_t k0, index_t k1) const {
    const std::uint8_t* table = cells + (b * heads + h) * q_cells() * k_cells();
    bool any = false, all_full = true;
    for (index_t qc = q0 / block_mask_cell; qc <= (q1 - 1) / block_mask_cell; ++qc)
      for (index_t kc = k0 / block_mask_cell; kc <= (k1 - 1) / block_mask_cell; ++kc) {
        const std::uint8_t v = table[qc * k_cells() + kc];
        any = any || v != 0;
        all_full = all_full && v == 2;
      }
    return all_full ? tile_kind::full : any ? tile_kind::partial : tile_kind::empty;
  }
};

namespace detail::attn {
// Classifies cell i of the table (one thread or host iteration per cell).
template <class F>
struct cell_classifier {
  block_masked<F, host> m;  // its cells pointer unused: out is written
  std::uint8_t* out;
  LOOM_HD void operator()(index_t i) const {
    const index_t kc = i % m.k_cells(), qc = i / m.k_cells() % m.q_cells(), h = i / (m.k_cells() * m.q_cells()) % m.heads,
                  b = i / (m.k_cells() * m.q_cells() * m.heads);
    const index_t q1 = (qc + 1) * block_mask_cell < m.sq ? (qc + 1) * block_mask_cell : m.sq;
    const index_t k1 = (kc + 1) * block_mask_cell < m.skv ? (kc + 1) * block_mask_cell : m.skv;
    index_t attended = 0;
    for (index_t q = qc * block_mask_cell; q < q1; ++q)
      for (index_t kv = kc * block_mask_cell; kv < k1; ++kv) attended += m.f(b, h, q, kv) ? 1 : 0;
    const index_t all = (q1 - qc * block_mask_cell) * (k1 - kc * block_mask_cell);
    out[i] = attended == 0 ? 0 : attended == all ? 2 : 1;
  }
};
}  // namespace detail::attn

//! A block mask: the cell table of mask_mod m for batch, heads, sq query
//! rows and skv keys, in memory space Space, built by one kernel on the
//! current stream (device) or one host loop; it owns the table. Pass it to
//! loom::attention in place of m; the calls must have these sizes.
//! Example: `auto doc = loom::make_block_mask<loom::device>(loom::mask_mod(doc_fn{ids}), B, H, S, S);
//!           auto attn = loom::attention(loom::score_mod(f), doc);`
template <class F, class Space>
struct block_mask {
  tensor<std::uint8_t, 4, Space> cells;
  block_masked<F, Space> kind;
};

template <class Space = host, class F>
[[nodiscard]] block_mask<F, Space> make_block_mask(const mask_mod_fn<F>& m, index_t batch, index_t heads, index_t sq,
                                                   index_t skv) {
  if (batch < 1 || heads < 1 || sq < 1 || skv < 1)
    throw shape_error("loom: make_block_mask needs batch, heads, sq and skv of at least 1; got " +
                      std::to_string(batch) + ", " + std::to_string(heads) + ", " + std::to_string(sq) + ", " +
                      std::to_string(skv));
  block_masked<F, Space> kind{m.f, nullptr, batch, heads, sq, skv};
  block_mask<F, Space> r{tensor<std::uint8_t, 4, Space>(shape<4>{batch, heads, kind.q_cells(), kind.k_cells()}), kind};
  const detail::attn::cell_classifier<F> fill_cells{{m.f, nullptr, batch, heads, sq, skv}, r.cells.data()};
  if constexpr (std::is_same_v<Space, host>) {
    detail::host_for_each(r.cells.size(), fill_cells, block_mask_cell * block_mask_cell);
  } else {
    detail::require_cuda_compiler_for<Space>();
#if LOOM_CUDA_COMPILER
    detail::device_for_each(r.cells.size(), fill_cells, current_stream());
#endif
  }
  r.kind.cells = r.cells.data();
  return r;
}

//! An attention with score_mod s and block mask m (which must outlive it).
template <class S, class F, class Space>
[[nodiscard]] auto attention(const score_mod_fn<S>& s, const block_mask<F, Space>& m) {
  return attention(s, m.kind);
}
}  // namespace loom
