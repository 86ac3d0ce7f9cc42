// SPDX-License-Identifier: Apache-2.0
#pragma once

// The collectives on host tensors and views, over MPI (LOOM_HAS_MPI).
// Each call posts one non-blocking MPI collective and waits for it within
// the communicator's timeout (detail::mpi_wait). float and double travel
// as they are; half and bf16 are reduced in float (converted into a float
// buffer, reduced, rounded once on the way back) and moved as 16-bit words
// by all_gather and broadcast. A contiguous tensor or view is given to MPI
// directly; a non-contiguous view is packed into a contiguous buffer by
// loom's strided copy and unpacked the same way. The v-variants (counts per
// rank) are MPI_Iallgatherv and MPI_Ireduce_scatter.

#include <climits>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "loom/core/dtype.hpp"
#include "loom/core/space.hpp"
#include "loom/dist/core.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/view.hpp"

namespace loom::dist::detail {
#if LOOM_HAS_MPI
// The type in which host data of T is reduced: float for half and bf16.
template <class T>
using reduce_t = std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bf16>, float, T>;

// The MPI datatype that carries T: the 16-bit types as raw words (moved, never reduced).
template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else
    return MPI_UINT16_T;
}

inline MPI_Op mpi_op(reduce_op op) { return op == reduce_op::max ? MPI_MAX : MPI_SUM; }

// A contiguous host buffer of n elements of W that MPI may keep using after
// a timeout (hence shared, see comm_state::abandoned).
template <class W>
std::shared_ptr<W[]> host_buffer(index_t n) {
  return std::shared_ptr<W[]>(new W[static_cast<std::size_t>(n > 0 ? n : 1)]);
}

// MPI counts are int: one rank's part of a collective holds at most INT_MAX elements.
inline int mpi_count(index_t n, const char* what) {
  if (n > INT_MAX)
    throw value_error(std::string("loom: ") + what + " of " + std::to_string(n) +
                      " elements per rank: MPI counts stop at 2^31 - 1; split the tensor");
  return static_cast<int>(n);
}

// Each rank's part of a stacked buffer (`rows` of it along axis 0 of
// `stacked`) as MPI's element counts and displacements (ints: a value_error
// past 2^31 - 1).
struct mpi_parts {
  std::vector<int> counts, displs;
};
template <std::size_t R>
std::shared_ptr<mpi_parts> mpi_parts_of(const std::vector<index_t>& rows, const shape<R>& stacked, const char* what) {
  index_t row = 1;
  for (std::size_t d = 1; d < R; ++d) row *= stacked[d];
  auto p = std::make_shared<mpi_parts>();
  index_t at = 0;
  for (const index_t r : rows) {
    p->counts.push_back(mpi_count(r * row, what));
    p->displs.push_back(mpi_count(at, what));
    at += r * row;
  }
  return p;
}

// Copies the elements of `v` (row-major order) into `dst`, converted to W:
// loom's strided copy when W is T, else one converting loop.
template <class W, class T, std::size_t R>
void pack(const view<const T, R, host>& v, W* dst) {
  if constexpr (std::is_same_v<W, T>) {
    loom::detail::copy_views(loom::detail::contiguous_view_of<W, R, host>(dst, v.extents()), v, stream_ref{}, false);
  } else {
    for (index_t i = 0; i != v.size(); ++i) dst[i] = loom::detail::convert<W>(v.data()[v.offset_of(i)]);
  }
}
// The reverse of pack: the elements of `src` into `v`, rounded to T once.
template <class W, class T, std::size_t R>
void unpack(const W* src, const view<T, R, host>& v) {
  if constexpr (std::is_same_v<W, T>) {
    const auto from = loom::detail::contiguous_view_of<T, R, host>(const_cast<W*>(src), v.extents());
    loom::detail::copy_views(v, view<const T, R, host>(from), stream_ref{}, false);
  } else {
    for (index_t i = 0; i != v.size(); ++i) v.data()[v.offset_of(i)] = loom::detail::convert<T>(src[i]);
  }
}

template <class W>
void divide(W* p, index_t n, int ranks) {
  const W d = static_cast<W>(ranks);
  for (index_t i = 0; i != n; ++i) p[i] = p[i] / d;
}

// The metadata check over MPI: one all-gather of every rank's call_record.
inline void mpi_check(comm_state& s, const call_record& r) {
  auto both = host_buffer<std::int64_t>(static_cast<index_t>(call_record::fields) * (s.size + 1));
  std::copy(r.v.begin(), r.v.end(), both.get());
  MPI_Request req;
  LOOM_MPI_CHECK(&s, MPI_Iallgather(both.get(), static_cast<int>(call_record::fields), MPI_INT64_T,
                                    both.get() + call_record::fields, static_cast<int>(call_record::fields),
                                    MPI_INT64_T, s.mpi, &req));
  mpi_wait(s, req, "the argument check of " + r.describe(), both);
  const std::vector<std::int64_t> all(both.get() + call_record::fields,
                                      both.get() + call_record::fields * static_cast<std::size_t>(s.size + 1));
  if (const std::string msg = compare_records(all, s.size); !msg.empty()) throw mismatch_error(msg);
}

template <class T, std::size_t R>
void host_all_reduce(comm_state& s, const view<T, R, host>& x, reduce_op op, const std::string& what) {
  using W = reduce_t<T>;
  const int n = mpi_count(x.size(), "all_reduce");
  std::shared_ptr<W[]> staged;
  W* buf = nullptr;
  if constexpr (std::is_same_v<W, T>) {
    if (x.is_contiguous()) buf = x.data();
  }
  if (!buf) {
    staged = host_buffer<W>(n);
    pack<W>(view<const T, R, host>(x), staged.get());
    buf = staged.get();
  }
  MPI_Request req;
  LOOM_MPI_CHECK(&s, MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_type<W>(), mpi_op(op), s.mpi, &req));
  mpi_wait(s, req, what, staged);
  if (op == reduce_op::average) divide(buf, n, s.size);
  if (staged) unpack(staged.get(), x);
}

// all_gather (MPI_Iallgather) or, with `counted`, all_gather_v
// (MPI_Iallgatherv): rank r's input is rows[r] rows of `out`.
template <class T, std::size_t RI, std::size_t R>
void host_all_gather(comm_state& s, const view<const T, RI, host>& in, const view<T, R, host>& out,
                     const std::vector<index_t>& rows, bool counted, const std::string& what) {
  const auto parts = mpi_parts_of(rows, out.extents(), "all_gather");
  const int n = parts->counts[static_cast<std::size_t>(s.rank)];
  std::shared_ptr<T[]> send, recv;
  // The input already in its place in the output (a rank's shard of a
  // gathered buffer): MPI_IN_PLACE; another overlap: the input is copied first.
  const bool in_place = in.is_contiguous() && out.is_contiguous() &&
                        in.data() == out.data() + parts->displs[static_cast<std::size_t>(s.rank)];
  const void* from = in_place ? MPI_IN_PLACE : static_cast<const void*>(in.data());
  if (!in_place && (!in.is_contiguous() || may_overlap(in, out))) {
    send = host_buffer<T>(n);
    pack<T>(in, send.get());
    from = send.get();
  }
  T* to = out.data();
  if (!out.is_contiguous()) {
    recv = host_buffer<T>(out.size());
    to = recv.get();
  }
  MPI_Request req;
  if (counted)
    LOOM_MPI_CHECK(&s, MPI_Iallgatherv(from, n, mpi_type<T>(), to, parts->counts.data(), parts->displs.data(),
                                       mpi_type<T>(), s.mpi, &req));
  else
    LOOM_MPI_CHECK(&s, MPI_Iallgather(from, n, mpi_type<T>(), to, n, mpi_type<T>(), s.mpi, &req));
  mpi_wait(s, req, what, std::make_shared<std::tuple<decltype(send), decltype(recv), decltype(parts)>>(send, recv, parts));
  if (recv) unpack(recv.get(), out);
}

// reduce_scatter (MPI_Ireduce_scatter_block) or, with `counted`,
// reduce_scatter_v (MPI_Ireduce_scatter): rank r receives rows[r] rows of `in`.
template <class T, std::size_t RI, std::size_t R>
void host_reduce_scatter(comm_state& s, const view<const T, RI, host>& in, const view<T, R, host>& out, reduce_op op,
                         const std::vector<index_t>& rows, bool counted, const std::string& what) {
  using W = reduce_t<T>;
  const auto parts = mpi_parts_of(rows, in.extents(), "reduce_scatter");
  const int n = parts->counts[static_cast<std::size_t>(s.rank)];
  std::shared_ptr<W[]> send, recv;
  const W* from = nullptr;
  W* to = nullptr;
  if constexpr (std::is_same_v<W, T>) {
    if (in.is_contiguous()) from = in.data();
    if (out.is_contiguous() && !may_overlap(in, out)) to = out.data();
  }
  if (!from) {
    send = host_buffer<W>(in.size());
    pack<W>(in, send.get());
    from = send.get();
  }
  if (!to) {
    recv = host_buffer<W>(n);
    to = recv.get();
  }
  MPI_Request req;
  if (counted)
    LOOM_MPI_CHECK(&s, MPI_Ireduce_scatter(from, to, parts->counts.data(), mpi_type<W>(), mpi_op(op), s.mpi, &req));
  else
    LOOM_MPI_CHECK(&s, MPI_Ireduce_scatter_block(from, to, n, mpi_type<W>(), mpi_op(op), s.mpi, &req));
  mpi_wait(s, req, what, std::make_shared<std::tuple<decltype(send), decltype(recv), decltype(parts)>>(send, recv, parts));
  if (op == reduce_op::average) divide(to, n, s.size);
  if (recv) unpack(recv.get(), out);
}

template <class T, std::size_t R>
void host_broadcast(comm_state& s, const view<T, R, host>& x, int root, const std::string& what) {
  const int n = mpi_count(x.size(), "broadcast");
  std::shared_ptr<T[]> staged;
  T* buf = x.data();
  if (!x.is_contiguous()) {
    staged = host_buffer<T>(n);
    if (s.rank == root) pack<T>(view<const T, R, host>(x), staged.get());
    buf = staged.get();
  }
  MPI_Request req;
  LOOM_MPI_CHECK(&s, MPI_Ibcast(buf, n, mpi_type<T>(), root, s.mpi, &req));
  mpi_wait(s, req, what, staged);
  if (staged && s.rank != root) unpack(staged.get(), x);
}

inline void host_barrier(comm_state& s) {
  MPI_Request req;
  LOOM_MPI_CHECK(&s, MPI_Ibarrier(s.mpi, &req));
  mpi_wait(s, req, "barrier (call " + std::to_string(s.calls) + ")");
}
#endif
}  // namespace loom::dist::detail
