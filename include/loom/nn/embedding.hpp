// SPDX-License-Identifier: Apache-2.0
#pragma once

// The embedding's backward: the gradient of the table, deterministic and
// without floating atomics. The positions of the ids are sorted by id
// (stably, so each id keeps its positions in increasing order), and each
// table row is the sum of the gradient rows at its positions, added in
// that order in the accumulation type of the row reductions (float, double
// for double). So every run gives the same bits, and the host and the
// device give the same bits too. The host sorts by counting; the device
// sorts with CUB's radix sort and then runs one kernel in which each block
// finds its rows' runs of positions by binary search. loom::grad's scatter
// rule runs on it: an embedding's table, an index_select's source, and a
// gather's source read as rows of length 1 (ids: source offsets).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/index_fault.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/indexing.hpp"
#include "loom/expr/row_nodes.hpp"
#include "loom/ops/creation.hpp"
#include "loom/reduce/sort.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom {
namespace detail::emb {
// A view of rank R whose leading axes can be read as one ([N, D] for R == 2,
// [N] for R == 1), or a contiguous copy when they cannot.
template <class T, std::size_t R, class S>
bool lead_axes_merge(const view<T, R, S>& v) {
  for (std::size_t d = 0; d + 2 < R; ++d)
    if (v.extent(d) != 1 && v.stride(d) != v.stride(d + 1) * v.extent(d + 1)) return false;
  return true;
}
template <std::size_t Out, class T, std::size_t R, class S>
view<const T, Out, S> merged(const view<const T, R, S>& v) {
  shape<Out> e{}, st{};
  if constexpr (Out == 2) {
    e[1] = R >= 1 ? v.extent(R - 1) : 1;
    st[1] = R >= 1 ? v.stride(R - 1) : 1;
  }
  constexpr std::size_t lead = Out == 2 ? R - 1 : R;
  index_t n = 1, stride = 1;
  for (std::size_t d = 0; d != lead; ++d) n *= v.extent(d);
  // The merged axis steps by the stride of the innermost leading axis of
  // extent above 1.
  for (std::size_t d = lead; d-- > 0;)
    if (v.extent(d) != 1) {
      stride = v.stride(d);
      break;
    }
  e[0] = n;
  st[0] = stride;
  return view<const T, Out, S>(v.data(), e, st);
}

// Accumulates the gradient rows of one table row, in position order.
template <class T, class G, class I>
void host_backward(const view<T, 2, host>& out, const view<const G, 2, host>& grad, const view<const I, 1, host>& ids,
                   index_t pad) {
  using A = row_acc_t<G>;
  const index_t n = ids.extent(0), rows = out.extent(0), dim = out.extent(1);
  // Counting sort of the positions by id (stable: positions ascending within an id).
  std::vector<index_t> start(static_cast<std::size_t>(rows) + 1, 0);
  for (index_t i = 0; i < n; ++i) {
    const auto v = static_cast<index_t>(ids(i));
    if (v >= 0 && v < rows) ++start[static_cast<std::size_t>(v) + 1];
  }
  for (index_t v = 0; v < rows; ++v) start[static_cast<std::size_t>(v) + 1] += start[static_cast<std::size_t>(v)];
  std::vector<index_t> order(static_cast<std::size_t>(start.back()));
  {
    std::vector<index_t> next(start.begin(), start.end() - 1);
    for (index_t i = 0; i < n; ++i) {
      const auto v = static_cast<index_t>(ids(i));
      if (v >= 0 && v < rows) order[static_cast<std::size_t>(next[static_cast<std::size_t>(v)]++)] = i;
    }
  }
  constexpr index_t chunk = 256;
  const index_t gs0 = grad.stride(0), gs1 = grad.stride(1), os0 = out.stride(0), os1 = out.stride(1);
  host_for_each(
      rows,
      [&](index_t v) {
        A acc[chunk];
        const auto at = static_cast<std::size_t>(v);
        const index_t lo = start[at], hi = v == pad ? lo : start[at + 1];
        T* const o = out.data() + v * os0;
        if (lo == hi && os1 == 1) {  // no ids here: a row of zeros
          std::fill(o, o + dim, convert<T>(A(0)));
          return;
        }
        for (index_t c0 = 0; c0 < dim; c0 += chunk) {
          const index_t len = std::min(chunk, dim - c0);
          for (index_t j = 0; j < len; ++j) acc[j] = A(0);
          for (index_t k = lo; k < hi; ++k) {
            const G* const gr = grad.data() + order[static_cast<std::size_t>(k)] * gs0 + c0 * gs1;
            if (gs1 == 1) {
              for (index_t j = 0; j < len; ++j) acc[j] += static_cast<A>(static_cast<compute_t<G>>(gr[j]));
            } else {
              for (index_t j = 0; j < len; ++j) acc[j] += static_cast<A>(static_cast<compute_t<G>>(gr[j * gs1]));
            }
          }
          if (os1 == 1) {
            for (index_t j = 0; j < len; ++j) o[c0 + j] = convert<T>(acc[j]);
          } else {
            for (index_t j = 0; j < len; ++j) o[(c0 + j) * os1] = convert<T>(acc[j]);
          }
        }
      },
      dim * (n / (rows > 0 ? rows : 1) + 1));
}

#if LOOM_CUDA_COMPILER
// Block b takes table rows b, b + gridDim.x, ...: the run of sorted ids
// equal to the row (two binary searches), then each thread a column,
// adding the gradient rows at the run's positions in order.
template <class T, class G, class I>
__global__ void __launch_bounds__(256)
    backward_kernel(view<T, 2, device> out, view<const G, 2, device> grad, const I* keys, const index_t* pos,
                    index_t n, index_t pad, index_fault_record* fault) {
  using A = row_acc_t<G>;
  const index_t rows = out.extent(0), dim = out.extent(1);
  if (blockIdx.x == 0 && threadIdx.x == 0 && n > 0) {
    if (keys[0] < 0) record_index_fault(fault, index_op::embedding_backward, 0, keys[0], rows);
    if (keys[n - 1] >= rows) record_index_fault(fault, index_op::embedding_backward, 0, keys[n - 1], rows);
  }
  for (index_t v = blockIdx.x; v < rows; v += gridDim.x) {
    auto lower = [&](index_t x) {
      index_t lo = 0, hi = n;
      while (lo < hi) {
        const index_t mid = lo + (hi - lo) / 2;
        if (static_cast<index_t>(keys[mid]) < x)
          lo = mid + 1;
        else
          hi = mid;
      }
      return lo;
    };
    const index_t lo = lower(v), hi = v == pad ? lo : lower(v + 1);
    for (index_t c = threadIdx.x; c < dim; c += blockDim.x) {
      A acc = A(0);
      for (index_t k = lo; k < hi; ++k) acc += static_cast<A>(static_cast<compute_t<G>>(grad(pos[k], c)));
      out(v, c) = convert<T>(acc);
    }
  }
}

// Returns its launches (a CUB sort counts one).
template <class T, class G, class I>
int device_backward(const view<T, 2, device>& out, const view<const G, 2, device>& grad,
                    const view<const I, 1, device>& ids, index_t pad, bool checked) {
  const stream_ref s = current_stream();
  const index_t n = ids.extent(0);
  // The ids as one contiguous array (a copy when strided), the positions 0..n-1.
  tensor<I, 1, device> keys_in(shape<1>{ids.is_contiguous() ? 0 : n});
  const I* kin = ids.data();
  if (!ids.is_contiguous()) {
    assign(keys_in, ids);
    kin = keys_in.data();
  }
  tensor<I, 1, device> keys(shape<1>{n});
  tensor<index_t, 1, device> pos_in(shape<1>{n}), pos(shape<1>{n});
  if (n > 0) {
    assign(pos_in, arange<index_t>(n));
    sort::device_sort_pairs<false>(kin, keys.data(), static_cast<const index_t*>(pos_in.data()), pos.data(), n,
                                   static_cast<int>(8 * sizeof(I)), s);
  }
  index_fault_record* fault = checked ? index_fault_device() : nullptr;
  launch_kernel(backward_kernel<T, G, I>, dim3(grid_size(out.extent(0), 8, s.device())), 256, 0, s.get(), out, grad,
                static_cast<const I*>(keys.data()), static_cast<const index_t*>(pos.data()), n, pad, fault);
  return (ids.is_contiguous() ? 1 : 2) + (n > 0 ? 2 : 0);
}
#endif

// embedding_backward; returns its launches.
template <class O, class G, class I>
int backward(O&& out, const G& grad, const I& ids, index_t padding_idx, index_mode mode) {
  auto o = as_view(out);
  const auto g = view<const typename decltype(as_view(grad))::value_type,
                      decltype(as_view(grad))::rank, typename decltype(as_view(grad))::space>(
      as_view(grad));
  const auto i = view<const typename decltype(as_view(ids))::value_type, decltype(as_view(ids))::rank,
                      typename decltype(as_view(ids))::space>(as_view(ids));
  using OV = decltype(o);
  using GV = std::remove_const_t<decltype(g)>;
  using IV = std::remove_const_t<decltype(i)>;
  using S = typename OV::space;
  using T = typename OV::value_type;
  using Gt = typename GV::value_type;
  using It = typename IV::value_type;
  constexpr std::size_t Ri = IV::rank;
  static_assert(!std::is_const_v<typename OV::element_type>, "loom: embedding_backward writes `out`; it is const");
  static_assert(std::is_same_v<typename GV::space, S> && std::is_same_v<typename IV::space, S>,
                "loom: embedding_backward's tensors must live in one memory space");
  static_assert(OV::rank == 2, "loom: embedding_backward writes a table of rank 2 ([rows, dim])");
  static_assert(GV::rank == Ri + 1, "loom: embedding_backward's gradient has the ids' rank plus one");
  static_assert(std::is_same_v<It, std::int32_t> || std::is_same_v<It, std::int64_t>,
                "loom: indices must be an int32 or int64 tensor");
  static_assert(is_floating_v<T> && is_floating_v<Gt>, "loom: embedding_backward needs floating gradients");
  require_cuda_compiler_for<S>();
  for (std::size_t d = 0; d != Ri; ++d)
    if (g.extent(d) != i.extent(d))
      throw shape_error("loom: embedding_backward: the gradient of shape " + shape_string(g.extents()) +
                        " does not fit ids of shape " + shape_string(i.extents()) + " (axis " + std::to_string(d) +
                        ")");
  if (g.extent(Ri) != o.extent(1))
    throw shape_error("loom: embedding_backward: the gradient of shape " + shape_string(g.extents()) +
                      " does not fit a table of shape " + shape_string(o.extents()) + " (its last axis)");
  if (may_overlap(o, g) || may_overlap(o, i))
    throw aliasing_error("loom: embedding_backward: the output overlaps the gradient or the ids");
  for (std::size_t d = 0; d != 2; ++d)
    if (o.extent(d) > 1 && o.stride(d) == 0) throw_repeating_output(o.extents(), o.strides());
  const index_t pad = padding_row("embedding_backward", padding_idx, o.extent(0));
  if (o.size() == 0) return 0;
  int launches = 0;
  // One run of positions and one [n, dim] gradient: merge the leading axes
  // (contiguous copies where they do not merge).
  tensor<Gt, GV::rank, S> g_copy;
  tensor<It, Ri, S> i_copy;
  auto g2 = merged<2>(g);
  auto i1 = merged<1>(i);
  if (!lead_axes_merge(g)) {
    g_copy = contiguous(g);
    ++launches;
    g2 = merged<2>(view<const Gt, GV::rank, S>(g_copy.view()));
  }
  if (Ri > 1 && !lead_axes_merge(i.unsqueeze(static_cast<int>(Ri)))) {
    i_copy = contiguous(i);
    ++launches;
    i1 = merged<1>(view<const It, Ri, S>(i_copy.view()));
  }
  if constexpr (std::is_same_v<S, host>) {
    if (mode == index_mode::checked)
      check_host_indices(i1, index_op::embedding_backward, 0, o.extent(0));
    host_backward(o, g2, i1, pad);
    launches += 1;
  } else {
#if LOOM_CUDA_COMPILER
    launches += device_backward(o, g2, i1, pad, mode == index_mode::checked);
#endif
  }
  return launches;
}

// The scatter of an embedding's adjoint: the adjoint assigned to a
// contiguous temporary of the node's shape in the accumulation type, then
// embedding_backward (padding row excluded). Returns the launches.
template <class O, class S, class Idx, class Src, std::size_t R, class A>
int scatter_table(const view<O, 2, S>& out, const gather_node<Idx, Src, R>& n, const A& adj) {
  tensor<row_acc_t<typename A::value_type>, R, S> tmp(n.extents());
  assign(tmp, adj);
  return 1 + backward(out, tmp, n.ids.v, n.padding, n.mode);
}

// The scatter of an index_select's adjoint along n.axis: the adjoint
// assigned to a contiguous temporary with that axis first, read as rows
// [selected, rest] by embedding_backward, which writes the output's rows
// [extent, rest] directly where the output's other axes read as one run,
// else a temporary that is then copied. Returns the launches.
template <class O, std::size_t RS, class S, class Idx, class Src, class A>
int scatter_selected(const view<O, RS, S>& out, const gather_node<Idx, Src, RS>& n, const A& adj) {
  const shape<RS> own = n.extents();
  std::array<int, RS> perm{}, inverse{};
  perm[0] = n.axis;
  for (int k = 0, j = 1; k != static_cast<int>(RS); ++k)
    if (k != n.axis) perm[static_cast<std::size_t>(j++)] = k;
  shape<RS> first{};
  index_t dim = 1;
  for (std::size_t j = 0; j != RS; ++j) {
    inverse[static_cast<std::size_t>(perm[j])] = static_cast<int>(j);
    first[j] = own[static_cast<std::size_t>(perm[j])];
    if (j > 0) dim *= first[j];
  }
  tensor<row_acc_t<typename A::value_type>, RS, S> tmp(first);
  assign(tmp.view().permute(inverse), adj);
  const view<const row_acc_t<typename A::value_type>, 2, S> rows(tmp.data(), shape<2>{first[0], dim},
                                                                 shape<2>{dim, 1});
  const auto o = out.permute(perm);
  bool merges = true;
  index_t step = 1, next = 0;  // the innermost stride; the stride that continues the run
  for (std::size_t d = RS; d-- > 1;) {
    if (o.extent(d) == 1) continue;
    if (next == 0)
      step = o.stride(d);
    else if (o.stride(d) != next)
      merges = false;
    next = o.stride(d) * o.extent(d);
  }
  if (merges) {
    const view<O, 2, S> o2(o.data(), shape<2>{o.extent(0), dim}, shape<2>{o.stride(0), step});
    return 1 + backward(o2, rows, n.ids.v, no_padding, n.mode);
  }
  tensor<O, RS, S> table(o.extents());
  const view<O, 2, S> t2(table.data(), shape<2>{o.extent(0), dim}, shape<2>{dim, 1});
  const int launches = 2 + backward(t2, rows, n.ids.v, no_padding, n.mode);
  assign(o, table);
  return launches;
}

// The flat row-major offset of coordinates c in a shape of rank R.
template <std::size_t R>
struct flat_offset {
  using result_type = std::int64_t;
  shape<R> strides;  // the shape's row-major strides
  LOOM_HD std::int64_t operator()(const index_t* c) const {
    std::int64_t off = 0;
    for (std::size_t d = 0; d != R; ++d) off += c[d] * strides[d];
    return off;
  }
};

// The scatter of a gather's adjoint (source rank R >= 2): each element of the
// node is a row of length 1 whose id is the flat offset of the source element
// it read. The node itself, over a leaf of the source's offsets, computes the
// ids into an int64 temporary (one kernel, with the forward's index checks
// and clamping); embedding_backward sums the adjoint's elements per offset
// into the output read as [size, 1] (a contiguous temporary, then copied,
// where the output is not contiguous). Returns the launches.
template <class O, std::size_t R, class S, class Idx, class Src, class A>
int scatter_gathered(const view<O, R, S>& out, const gather_node<Idx, Src, R>& n, const A& adj) {
  using Acc = row_acc_t<typename A::value_type>;
  const shape<R> se = n.src.extents();
  flat_offset<R> f{};
  index_t step = 1;
  for (std::size_t d = R; d-- > 0;) {
    f.strides[d] = step;
    step *= se[d];
  }
  tensor<std::int64_t, R, S> ids(n.extents());
  assign(ids, children_of<gather_node<Idx, Src, R>>::rebuild(n, n.ids, coord_leaf_node<flat_offset<R>, R>(f, se)));
  tensor<Acc, R, S> tmp(n.extents());
  assign(tmp, adj);
  const index_t count = tmp.size();
  const view<const Acc, 2, S> rows(tmp.data(), shape<2>{count, 1}, shape<2>{1, 1});
  const view<const std::int64_t, 1, S> flat(ids.data(), shape<1>{count}, shape<1>{1});
  if (out.is_contiguous())
    return 2 + backward(view<O, 2, S>(out.data(), shape<2>{step, 1}, shape<2>{1, 1}), rows, flat, no_padding,
                        index_mode::unchecked);
  tensor<O, R, S> whole(se);
  const int launches = 3 + backward(view<O, 2, S>(whole.data(), shape<2>{step, 1}, shape<2>{1, 1}), rows, flat,
                                    no_padding, index_mode::unchecked);
  assign(out, whole);
  return launches;
}

// The gradient of the source of indexing node n for the adjoint `adj` at n's
// shape (loom::grad's scatter rule), into `out`: an embedding's (padding row
// excluded), an index_select's (a rank-1 gather is one) or a gather's.
// Returns the launches.
template <class O, std::size_t RS, class S, class Idx, class Src, std::size_t R, class A>
int scatter_gradient(const view<O, RS, S>& out, const gather_node<Idx, Src, R>& n, const A& adj) {
  if (adj.extents() != n.extents())
    throw shape_error(std::string("loom: grad: the ") + index_op_name(static_cast<int>(n.op)) + " of shape " +
                      shape_string(n.extents()) + " is broadcast to " + shape_string(adj.extents()) +
                      "; loom::grad differentiates an indexing node's source only where the node is not broadcast");
  constexpr bool table = RS == 2 && R == Idx::rank + 1, selected = Idx::rank == 1 && R == RS;
  constexpr bool gathered = RS >= 2 && Idx::rank == RS && R == RS;
  static_assert(table || selected || gathered,
                "loom: grad: the scatter rule takes an embedding, an index_select or a gather");
  if constexpr (gathered)
    return scatter_gathered(out, n, adj);
  else if constexpr (table && selected)
    return n.op == index_op::embedding ? scatter_table(out, n, adj) : scatter_selected(out, n, adj);
  else if constexpr (table)
    return scatter_table(out, n, adj);
  else
    return scatter_selected(out, n, adj);
}
}  // namespace detail::emb

//! The gradient of embedding(ids, table) with respect to the table, written
//! into `out` ([rows, dim]), as torch's embedding_dense_backward: row v is
//! the sum of the rows of `grad` (shape ids.shape + [dim]) at the positions
//! where ids equal v, 0 where there are none, and 0 for the row padding_idx
//! (negative counts from the end; no_padding: none). Deterministic without
//! atomics: repeated ids are added in the order of their positions, in float
//! (double for double), the same bits on every run and on both executors.
//! Host: a counting sort and one parallel loop over the rows. Device: a CUB
//! radix sort of (id, position) pairs and one kernel (plus a copy of strided
//! ids or gradients, and the positions' fill), nothing synchronized.
//! Out-of-range ids: index_error (checked, the host before anything runs,
//! the device at the next synchronization), or skipped (unchecked).
//! Example: `loom::embedding_backward(dtable, dy, ids, pad);`
template <tensor_like O, tensor_like G, tensor_like I>
void embedding_backward(O&& out, const G& grad, const I& ids, index_t padding_idx = no_padding,
                        index_mode mode = index_mode::checked) {
  detail::emb::backward(std::forward<O>(out), grad, ids, padding_idx, mode);
}

//! A new table gradient [rows, dim] in the gradient's type and space; see
//! embedding_backward(out, ...). Example: `auto dw = loom::embedding_backward(dy, ids, 50257);`
template <tensor_like G, tensor_like I>
[[nodiscard]] auto embedding_backward(const G& grad, const I& ids, index_t rows, index_t padding_idx = no_padding,
                                      index_mode mode = index_mode::checked) {
  const auto g = detail::as_view(grad);
  using GV = decltype(g);
  if (rows < 0) throw value_error("loom: embedding_backward needs rows >= 0, got " + std::to_string(rows));
  tensor<typename GV::value_type, 2, typename GV::space> out(shape<2>{rows, GV::rank > 0 ? g.extent(GV::rank - 1) : 1});
  embedding_backward(out, grad, ids, padding_idx, mode);
  return out;
}
}  // namespace loom
