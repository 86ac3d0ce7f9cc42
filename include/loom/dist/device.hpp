// SPDX-License-Identifier: Apache-2.0
#pragma once

// The collectives on device tensors and views, over NCCL (LOOM_HAS_NCCL).
// Each is enqueued on the current stream (loom::current_stream()) and
// returns without waiting for the data: stream-ordered like every loom
// device operation. The NCCL communicator is made at the first device
// collective, on the current device, non-blocking (no NCCL call can block
// forever; detail::nccl_wait). half, bf16, float and double are NCCL's own
// types (NCCL reduces half and bf16 in its own arithmetic). A non-contiguous
// view is packed into a contiguous buffer from the stream's pool by loom's
// strided copy kernel (a .cu file, nvcc) and unpacked after. NCCL has no
// v-variants: all_gather_v and reduce_scatter_v are grouped broadcasts and
// reduces, one per rank with rows.

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/core/device.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/dist/core.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom::dist::detail {
#if LOOM_HAS_NCCL
template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, half>)
    return ncclFloat16;
  else if constexpr (std::is_same_v<T, bf16>)
    return ncclBfloat16;
  else if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else
    return ncclFloat64;
}

inline ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return ncclSum;
    case reduce_op::average:
      return ncclAvg;
    case reduce_op::max:
      return ncclMax;
  }
  return ncclSum;
}

// Whether the work queued on `s` has finished (a CUDA error is thrown).
inline bool stream_done(stream_ref s) {
  const cudaError_t e = cudaStreamQuery(s.get());
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  LOOM_CUDA_CHECK(e);
  return true;
}

// Makes the NCCL communicator on the current device at the first device
// collective: under MPI, rank 0's ncclGetUniqueId reaches the others by
// MPI_Bcast; from the environment every rank derives the same id from
// NCCL_COMM_ID (communicator::from_env sets it).
inline void nccl_ready(comm_state& s) {
  gpu::require_device("a collective on device tensors");
  int dev = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&dev));
  if (s.nccl) {
    if (dev != s.nccl_device)
      throw dist_error("loom: a device collective on device " + std::to_string(dev) +
                       ", but this communicator's NCCL communicator is on device " + std::to_string(s.nccl_device) +
                       "; make the same device current for every device collective (loom::gpu::set_device)");
    return;
  }
  struct id_message {
    int ok = 0;
    ncclUniqueId id{};
  };
  auto msg = std::make_shared<id_message>();
  if (!s.from_mpi || s.rank == 0) msg->ok = ncclGetUniqueId(&msg->id) == ncclSuccess ? 1 : 0;
#if LOOM_HAS_MPI
  if (s.from_mpi) {
    MPI_Request req;
    LOOM_MPI_CHECK(&s, MPI_Ibcast(msg.get(), static_cast<int>(sizeof(id_message)), MPI_BYTE, 0, s.mpi, &req));
    mpi_wait(s, req, "sending NCCL's unique id from rank 0", msg);
  }
#endif
  if (!msg->ok)
    throw dist_error(std::string("loom: ncclGetUniqueId failed on rank ") + (s.from_mpi ? "0" : std::to_string(s.rank)) +
                     (s.from_mpi ? "" : " (is NCCL_COMM_ID a reachable host:port?)"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  LOOM_NCCL_CHECK(&s, ncclCommInitRankConfig(&s.nccl, s.size, msg->id, s.rank, &config));
  s.nccl_device = dev;
  nccl_wait(s, "creating the NCCL communicator");
}

// Each rank's element count and offset in a stacked buffer of `rows[r]`
// rows (axis 0 of `stacked`) per rank.
struct device_parts {
  std::vector<std::size_t> counts, offsets;
};
template <std::size_t R>
device_parts device_parts_of(const std::vector<index_t>& rows, const shape<R>& stacked) {
  std::size_t row = 1, at = 0;
  for (std::size_t d = 1; d < R; ++d) row *= static_cast<std::size_t>(stacked[d]);
  device_parts p;
  for (const index_t r : rows) {
    p.counts.push_back(static_cast<std::size_t>(r) * row);
    p.offsets.push_back(at);
    at += p.counts.back();
  }
  return p;
}

// One NCCL call per rank whose part has elements, `call(r)`, grouped
// (ncclGroupStart/End: NCCL runs them together); the group is closed
// before the first error is thrown.
template <class Call>
void nccl_grouped(comm_state& s, const device_parts& p, Call&& call) {
  LOOM_NCCL_CHECK(&s, ncclGroupStart());
  ncclResult_t first = ncclSuccess;
  for (std::size_t r = 0; r != p.counts.size(); ++r) {
    if (p.counts[r] == 0) continue;
    const ncclResult_t e = call(static_cast<int>(r));
    if (e != ncclSuccess && e != ncclInProgress && first == ncclSuccess) first = e;
  }
  const ncclResult_t end = ncclGroupEnd();
  LOOM_NCCL_CHECK(&s, first != ncclSuccess ? first : end);
}

// A contiguous device buffer of n elements allocated (and freed) on stream
// `st`, for packing non-contiguous views.
template <class T>
tensor<T, 1, device> device_buffer(index_t n, stream_ref st) {
  return tensor<T, 1, device>(shape<1>{n}, st);
}

// The metadata check over NCCL (a communicator from the environment, no
// MPI): one ncclAllGather of the records, then a wait for the stream.
inline void nccl_check(comm_state& s, const call_record& r) {
  nccl_ready(s);
  const stream_ref st = current_stream();
  const auto f = static_cast<index_t>(call_record::fields);
  auto buf = device_buffer<std::int64_t>(f * (s.size + 1), st);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(buf.data(), r.v.data(), sizeof(r.v), cudaMemcpyHostToDevice, st.get()));
  LOOM_NCCL_CHECK(&s, ncclAllGather(buf.data(), buf.data() + f, static_cast<std::size_t>(f), ncclInt64, s.nccl, st.get()));
  const std::string what = "the argument check of " + r.describe();
  nccl_wait(s, what, [&] { return stream_done(st); });
  std::vector<std::int64_t> all(static_cast<std::size_t>(f * s.size));
  LOOM_CUDA_CHECK(cudaMemcpy(all.data(), buf.data() + f, all.size() * sizeof(std::int64_t), cudaMemcpyDeviceToHost));
  if (const std::string msg = compare_records(all, s.size); !msg.empty()) throw mismatch_error(msg);
}

template <class T, std::size_t R>
void device_all_reduce(comm_state& s, const view<T, R, device>& x, reduce_op op, const std::string& what) {
  nccl_ready(s);
  const stream_ref st = current_stream();
  const auto n = static_cast<std::size_t>(x.size());
  if (x.is_contiguous()) {
    LOOM_NCCL_CHECK(&s, ncclAllReduce(x.data(), x.data(), n, nccl_type<T>(), nccl_op(op), s.nccl, st.get()));
    nccl_wait(s, what);
    return;
  }
  auto t = device_buffer<T>(x.size(), st);
  loom::detail::copy_views(t.view().reshape(x.extents()), view<const T, R, device>(x), st, false);
  LOOM_NCCL_CHECK(&s, ncclAllReduce(t.data(), t.data(), n, nccl_type<T>(), nccl_op(op), s.nccl, st.get()));
  nccl_wait(s, what);
  loom::detail::copy_views(x, view<const T, R, device>(t.view().reshape(x.extents())), st, false);
}

// all_gather (ncclAllGather) or, with `counted`, all_gather_v (one
// ncclBroadcast from each rank into its rows of the output, grouped).
template <class T, std::size_t RI, std::size_t R>
void device_all_gather(comm_state& s, const view<const T, RI, device>& in, const view<T, R, device>& out,
                       const std::vector<index_t>& rows, bool counted, const std::string& what) {
  nccl_ready(s);
  const stream_ref st = current_stream();
  const auto parts = device_parts_of(rows, out.extents());
  const auto me = static_cast<std::size_t>(s.rank);
  const std::size_t n = parts.counts[me];
  tensor<T, 1, device> send, recv;
  const T* from = in.data();
  // NCCL's in place: the input already at this rank's place in the output.
  const bool in_place = in.is_contiguous() && out.is_contiguous() && in.data() == out.data() + parts.offsets[me];
  if (!in_place && (!in.is_contiguous() || may_overlap(in, out))) {
    send = device_buffer<T>(in.size(), st);
    loom::detail::copy_views(send.view().reshape(in.extents()), in, st, false);
    from = send.data();
  }
  T* to = out.data();
  if (!out.is_contiguous()) {
    recv = device_buffer<T>(out.size(), st);
    to = recv.data();
  }
  if (counted)
    nccl_grouped(s, parts, [&](int r) {
      T* dst = to + parts.offsets[static_cast<std::size_t>(r)];
      return ncclBroadcast(r == s.rank ? from : dst, dst, parts.counts[static_cast<std::size_t>(r)], nccl_type<T>(), r,
                           s.nccl, st.get());
    });
  else
    LOOM_NCCL_CHECK(&s, ncclAllGather(from, to, n, nccl_type<T>(), s.nccl, st.get()));
  nccl_wait(s, what);
  if (!out.is_contiguous())
    loom::detail::copy_views(out, view<const T, R, device>(recv.view().reshape(out.extents())), st, false);
}

// reduce_scatter (ncclReduceScatter) or, with `counted`, reduce_scatter_v
// (one ncclReduce of each rank's rows of the input, rooted at that rank,
// grouped).
template <class T, std::size_t RI, std::size_t R>
void device_reduce_scatter(comm_state& s, const view<const T, RI, device>& in, const view<T, R, device>& out,
                           reduce_op op, const std::vector<index_t>& rows, bool counted, const std::string& what) {
  nccl_ready(s);
  const stream_ref st = current_stream();
  const auto parts = device_parts_of(rows, in.extents());
  const auto me = static_cast<std::size_t>(s.rank);
  const std::size_t n = parts.counts[me];
  tensor<T, 1, device> send, recv;
  const T* from = in.data();
  const bool in_place = in.is_contiguous() && out.is_contiguous() && out.data() == in.data() + parts.offsets[me];
  if (!in.is_contiguous()) {
    send = device_buffer<T>(in.size(), st);
    loom::detail::copy_views(send.view().reshape(in.extents()), in, st, false);
    from = send.data();
  }
  T* to = out.data();
  if (!out.is_contiguous() || (!in_place && may_overlap(in, out))) {
    recv = device_buffer<T>(out.size(), st);
    to = recv.data();
  }
  if (counted)
    nccl_grouped(s, parts, [&](int r) {  // the receive buffer counts on the root only
      return ncclReduce(from + parts.offsets[static_cast<std::size_t>(r)], to, parts.counts[static_cast<std::size_t>(r)],
                        nccl_type<T>(), nccl_op(op), r, s.nccl, st.get());
    });
  else
    LOOM_NCCL_CHECK(&s, ncclReduceScatter(from, to, n, nccl_type<T>(), nccl_op(op), s.nccl, st.get()));
  nccl_wait(s, what);
  if (to != out.data())
    loom::detail::copy_views(out, view<const T, R, device>(recv.view().reshape(out.extents())), st, false);
}

template <class T, std::size_t R>
void device_broadcast(comm_state& s, const view<T, R, device>& x, int root, const std::string& what) {
  nccl_ready(s);
  const stream_ref st = current_stream();
  const auto n = static_cast<std::size_t>(x.size());
  if (x.is_contiguous()) {
    LOOM_NCCL_CHECK(&s, ncclBroadcast(x.data(), x.data(), n, nccl_type<T>(), root, s.nccl, st.get()));
    nccl_wait(s, what);
    return;
  }
  auto t = device_buffer<T>(x.size(), st);
  if (s.rank == root) loom::detail::copy_views(t.view().reshape(x.extents()), view<const T, R, device>(x), st, false);
  LOOM_NCCL_CHECK(&s, ncclBroadcast(t.data(), t.data(), n, nccl_type<T>(), root, s.nccl, st.get()));
  nccl_wait(s, what);
  if (s.rank != root) loom::detail::copy_views(x, view<const T, R, device>(t.view().reshape(x.extents())), st, false);
}

// A barrier without MPI: an all-reduce of one element, then a wait for the stream.
inline void nccl_barrier(comm_state& s) {
  nccl_ready(s);
  const stream_ref st = current_stream();
  auto one = device_buffer<float>(1, st);
  LOOM_CUDA_CHECK(cudaMemsetAsync(one.data(), 0, sizeof(float), st.get()));
  LOOM_NCCL_CHECK(&s, ncclAllReduce(one.data(), one.data(), 1, ncclFloat32, ncclSum, s.nccl, st.get()));
  nccl_wait(s, "barrier (call " + std::to_string(s.calls) + ")", [&] { return stream_done(st); });
}
#endif
}  // namespace loom::dist::detail
