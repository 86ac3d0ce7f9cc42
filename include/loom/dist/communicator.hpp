// SPDX-License-Identifier: Apache-2.0
#pragma once

// loom::dist: a communicator over the processes of one job and the
// collectives of data-parallel training (all_reduce, reduce_scatter,
// all_gather, broadcast, barrier) on loom tensors and views: MPI carries
// host tensors, NCCL device tensors. Link the CMake target loom::dist
// (docs/17_distributed.md: what runs where, failure behaviour, costs).

#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/dist/core.hpp"
#include "loom/dist/device.hpp"
#include "loom/dist/host.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom::dist {

#if LOOM_HAS_MPI
//! Starts MPI for the process (MPI_Init_thread, threads funneled) unless it
//! is running already, and ends it when destroyed: MPI_Finalize, or
//! MPI_Abort when a collective of this process failed (a timeout, a failed
//! call), since MPI_Finalize could wait forever for a rank that died. Make
//! one at the top of main, before any communicator.
//! Example: `int main(int argc, char** argv) { loom::dist::mpi_environment mpi(argc, argv); ... }`
class mpi_environment {
 public:
  mpi_environment(int& argc, char**& argv) {
    int initialized = 0;
    LOOM_MPI_CHECK(nullptr, MPI_Initialized(&initialized));
    if (initialized) return;
    int provided = 0;
    LOOM_MPI_CHECK(nullptr, MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    owner_ = true;
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    if (!owner_) return;
    if (detail::process_failed() || std::uncaught_exceptions() > 0)
      MPI_Abort(MPI_COMM_WORLD, 1);
    else
      (void)MPI_Finalize();
  }

 private:
  bool owner_ = false;
};
#endif

//! The processes of one job, each with its rank in [0, size()). Made from
//! MPI (from_mpi: mpirun started the processes; host and device
//! collectives) or from torchrun-style environment variables (from_env:
//! device collectives over NCCL only). Every collective is called by every
//! rank in the same order; with check_metadata on, arguments that do not
//! match throw mismatch_error on every rank before any data moves. Host
//! collectives return when done; device collectives are enqueued on the
//! current stream (synchronize() waits for them within the timeout).
//! Move-only; not for concurrent use by several threads.
//! Example: `auto comm = loom::dist::communicator::from_mpi(); comm.all_reduce(grad, loom::dist::reduce_op::average);`
class communicator {
 public:
#if LOOM_HAS_MPI
  //! A communicator over MPI_COMM_WORLD (its duplicate, with errors
  //! returned, not fatal). MPI must be running (mpi_environment). local_rank()
  //! is the rank among the processes of the same node (MPI_COMM_TYPE_SHARED):
  //! the device to use there. The NCCL communicator is made at the first
  //! device collective, on the device current then. O(1) collectives.
  static communicator from_mpi(const options& o = {}) {
    int initialized = 0;
    LOOM_MPI_CHECK(nullptr, MPI_Initialized(&initialized));
    if (!initialized)
      throw dist_error("loom: communicator::from_mpi needs MPI running: make a loom::dist::mpi_environment first");
    communicator c(o);
    auto& s = *c.s_;
    s.from_mpi = true;
    LOOM_MPI_CHECK(&s, MPI_Comm_dup(MPI_COMM_WORLD, &s.mpi));
    LOOM_MPI_CHECK(&s, MPI_Comm_set_errhandler(s.mpi, MPI_ERRORS_RETURN));
    LOOM_MPI_CHECK(&s, MPI_Comm_rank(s.mpi, &s.rank));
    LOOM_MPI_CHECK(&s, MPI_Comm_size(s.mpi, &s.size));
    MPI_Comm node = MPI_COMM_NULL;
    LOOM_MPI_CHECK(&s, MPI_Comm_split_type(s.mpi, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &node));
    const int got = MPI_Comm_rank(node, &s.local_rank);
    (void)MPI_Comm_free(&node);
    LOOM_MPI_CHECK(&s, got);
    return c;
  }
#endif

  //! A communicator from torchrun-style environment variables: RANK,
  //! WORLD_SIZE, LOCAL_RANK (default 0), and the address of rank 0 where
  //! NCCL's bootstrap listens: NCCL_COMM_ID (host:port) when set, else
  //! MASTER_ADDR with port LOOM_DIST_PORT, else MASTER_PORT + 1 (torchrun's
  //! own store holds MASTER_PORT). Device collectives only (NCCL; host
  //! tensors need from_mpi); the NCCL communicator is made at the first one.
  //! Throws value_error naming a missing or malformed variable.
  static communicator from_env(const options& o = {}) {
#if !LOOM_HAS_NCCL
    (void)o;
    throw dist_error("loom: communicator::from_env needs NCCL, and loom::dist was built without it (nccl.h, libnccl)");
#else
    communicator c(o);
    auto& s = *c.s_;
    s.rank = env_int("RANK", -1);
    s.size = env_int("WORLD_SIZE", -1);
    s.local_rank = env_int("LOCAL_RANK", 0);
    if (s.size < 1 || s.rank < 0 || s.rank >= s.size)
      throw value_error("loom: RANK=" + std::to_string(s.rank) + " and WORLD_SIZE=" + std::to_string(s.size) +
                        " do not describe a rank of the job");
    if (!std::getenv("NCCL_COMM_ID")) {
      const char* addr = std::getenv("MASTER_ADDR");
      if (!addr || !*addr)
        throw value_error("loom: communicator::from_env needs NCCL_COMM_ID (host:port) or MASTER_ADDR with "
                          "MASTER_PORT or LOOM_DIST_PORT");
      const int port = std::getenv("LOOM_DIST_PORT") ? env_int("LOOM_DIST_PORT", -1) : env_int("MASTER_PORT", -1) + 1;
      if (port < 1 || port > 65535)
        throw value_error("loom: no usable port for NCCL's bootstrap (set LOOM_DIST_PORT, or MASTER_PORT)");
      const std::string id = std::string(addr) + ":" + std::to_string(port);
      if (setenv("NCCL_COMM_ID", id.c_str(), 0) != 0) throw dist_error("loom: setenv(NCCL_COMM_ID) failed");
    }
    return c;
#endif
  }

  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      release();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  ~communicator() { release(); }

  //! This process's rank, in [0, size()).
  [[nodiscard]] int rank() const { return s_->rank; }
  //! The number of ranks.
  [[nodiscard]] int size() const { return s_->size; }
  //! The rank among the processes on this node (the device to use there).
  [[nodiscard]] int local_rank() const { return s_->local_rank; }
  //! Whether host collectives are available (made by from_mpi).
  [[nodiscard]] bool has_mpi() const { return s_->from_mpi; }
  //! The timeout of collectives, waits and the NCCL communicator's creation.
  [[nodiscard]] std::chrono::milliseconds timeout() const { return s_->timeout; }
  void set_timeout(std::chrono::milliseconds t) {
    options o;
    o.timeout = t;
    s_->timeout = detail::resolve_timeout(o);
  }
  //! Whether collectives first check that all ranks' arguments match.
  [[nodiscard]] bool checks_metadata() const { return s_->check; }
  //! Turns the check on or off; every rank must do the same, at the same point.
  void set_check_metadata(bool on) { s_->check = on; }
  //! Why this communicator cannot be used any more ("" while it can).
  [[nodiscard]] const std::string& failure() const { return s_->broken; }

  //! Combines `x` of every rank element-wise (sum, average, max) and leaves
  //! the result in `x` on every rank. Host: one MPI all-reduce (half and
  //! bf16 reduced in float, rounded once). Device: one NCCL all-reduce on the
  //! current stream. A non-contiguous view adds a pack and an unpack copy.
  //! Example: `comm.all_reduce(grad, loom::dist::reduce_op::average);`
  template <tensor_like X>
  void all_reduce(X&& x, reduce_op op = reduce_op::sum) {
    const auto v = loom::detail::as_view(x);
    using V = decltype(v);
    check_element<typename V::element_type>();
    const auto what = enter(detail::collective::all_reduce, dtype_of<typename V::element_type>, op, 0, v.extents(),
                            v.extents(), std::is_same_v<typename V::space, device>);
    if constexpr (std::is_same_v<typename V::space, host>) {
#if LOOM_HAS_MPI
      detail::host_all_reduce(*s_, v, op, what);
#endif
    } else {
#if LOOM_HAS_NCCL
      detail::device_all_reduce(*s_, v, op, what);
#endif
    }
  }

  //! Stacks the ranks' `in` along axis 0 into `out` on every rank: rank r's
  //! input lands in out[r * n0, (r + 1) * n0), n0 = in.extent(0); `out` has
  //! the shape of `in` with axis 0 times size(). `in` may be this rank's part
  //! of `out` (gathering a sharded buffer in place).
  //! Example: `comm.all_gather(shard, full);`
  template <tensor_like In, tensor_like Out>
  void all_gather(const In& in, Out&& out) {
    in_out(detail::collective::all_gather, loom::detail::as_view(in), loom::detail::as_view(out), reduce_op::sum);
  }

  //! Combines `in` of every rank element-wise and leaves on rank r the r-th
  //! of size() equal parts along axis 0 in `out`: `in` has the shape of
  //! `out` with axis 0 times size(). `out` may be this rank's part of `in`.
  //! Example: `comm.reduce_scatter(grads, grad_shard, loom::dist::reduce_op::average);`
  template <tensor_like In, tensor_like Out>
  void reduce_scatter(const In& in, Out&& out, reduce_op op = reduce_op::sum) {
    in_out(detail::collective::reduce_scatter, loom::detail::as_view(in), loom::detail::as_view(out), op);
  }

  //! all_gather with counts per rank: rank r's `in` has counts[r] rows
  //! (axis 0; 0 allowed) and lands in out rows [d_r, d_r + counts[r]),
  //! d_r = counts[0] + ... + counts[r - 1]; `out` has sum(counts) rows and
  //! the other axes of `in`. Every rank gives the same counts (size()
  //! non-negative numbers). `in` may be this rank's rows of `out`. Host: one
  //! MPI_Iallgatherv. Device: one NCCL broadcast per rank with rows, grouped
  //! (ncclGroupStart/End; NCCL has no all-gather-v): the bytes of an
  //! all-gather; run one after the other, the parts take size() / (size() -
  //! 1) times an all-gather's time (docs/17_distributed.md, Costs).
  //! Example: `comm.all_gather_v(shard, full, std::vector<loom::index_t>{5, 3});`
  template <tensor_like In, tensor_like Out>
  void all_gather_v(const In& in, Out&& out, std::span<const index_t> counts) {
    in_out(detail::collective::all_gather_v, loom::detail::as_view(in), loom::detail::as_view(out), reduce_op::sum,
           counts);
  }

  //! reduce_scatter with counts per rank: `in` (sum(counts) rows along axis
  //! 0) combined element-wise across the ranks, and rank r receives rows
  //! [d_r, d_r + counts[r]) in `out` (counts[r] rows, the other axes of
  //! `in`), d_r = counts[0] + ... + counts[r - 1]. Every rank gives the same
  //! counts. `out` may be this rank's rows of `in`. Host: one
  //! MPI_Ireduce_scatter. Device: one NCCL reduce rooted at each rank with
  //! rows, grouped (NCCL has no reduce-scatter-v): the bytes of a
  //! reduce_scatter; run one after the other, the parts take size() /
  //! (size() - 1) times a reduce_scatter's time.
  //! Example: `comm.reduce_scatter_v(grads, my_rows, counts, loom::dist::reduce_op::average);`
  template <tensor_like In, tensor_like Out>
  void reduce_scatter_v(const In& in, Out&& out, std::span<const index_t> counts, reduce_op op = reduce_op::sum) {
    in_out(detail::collective::reduce_scatter_v, loom::detail::as_view(in), loom::detail::as_view(out), op, counts);
  }

  //! Copies `x` of rank `root` into `x` on every other rank.
  //! Example: `comm.broadcast(weights, 0);`
  template <tensor_like X>
  void broadcast(X&& x, int root = 0) {
    const auto v = loom::detail::as_view(x);
    using V = decltype(v);
    check_element<typename V::element_type>();
    const auto what = enter(detail::collective::broadcast, dtype_of<typename V::element_type>, reduce_op::sum, root,
                            v.extents(), v.extents(), std::is_same_v<typename V::space, device>);
    if constexpr (std::is_same_v<typename V::space, host>) {
#if LOOM_HAS_MPI
      detail::host_broadcast(*s_, v, root, what);
#endif
    } else {
#if LOOM_HAS_NCCL
      detail::device_broadcast(*s_, v, root, what);
#endif
    }
  }

  //! Returns when every rank has called barrier (within the timeout): an
  //! MPI barrier, or without MPI an NCCL all-reduce of one element and a
  //! wait for the current stream.
  void barrier() {
    (void)enter(detail::collective::barrier, dtype::float32, reduce_op::sum, 0, shape<0>{}, shape<0>{}, !s_->from_mpi);
#if LOOM_HAS_MPI
    if (s_->from_mpi) return detail::host_barrier(*s_);
#endif
#if LOOM_HAS_NCCL
    detail::nccl_barrier(*s_);
#endif
  }

  //! Waits for the work queued on `st` (device collectives included) within
  //! the timeout, watching NCCL's asynchronous errors: a rank that died
  //! makes this throw timeout_error (the NCCL communicator is aborted)
  //! instead of waiting forever as cudaStreamSynchronize would.
  void synchronize(stream_ref st = current_stream()) {
    detail::require_usable(*s_, "synchronize");
#if LOOM_HAS_NCCL
    if (s_->nccl) {
      detail::nccl_wait(*s_, "synchronize (after call " + std::to_string(s_->calls) + ")",
                        [&] { return detail::stream_done(st); });
      return;
    }
#endif
    st.synchronize();
  }

  //! Ends every process of the job at once (MPI_Abort; without MPI, aborts
  //! the NCCL communicator and this process): what to do after a
  //! timeout_error. Never returns.
  [[noreturn]] void abort(int code = 1) noexcept {
#if LOOM_HAS_NCCL
    if (s_ && s_->nccl) (void)ncclCommAbort(s_->nccl);
#endif
#if LOOM_HAS_MPI
    if (s_ && s_->from_mpi) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    std::_Exit(code);
  }

 private:
  explicit communicator(const options& o) : s_(std::make_unique<detail::comm_state>()) {
    s_->timeout = detail::resolve_timeout(o);
    s_->check = detail::resolve_check(o);
  }

  static int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    if (!v) return fallback;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 0 || x > 1 << 30)
      throw value_error(std::string("loom: ") + name + "=" + v + " is not a non-negative integer");
    return static_cast<int>(x);
  }

  template <class E>
  static void check_element() {
    static_assert(!std::is_const_v<E>, "loom: a collective writes this tensor: give a view of non-const elements");
    using T = std::remove_const_t<E>;
    static_assert(std::is_same_v<T, half> || std::is_same_v<T, bf16> || std::is_same_v<T, float> ||
                      std::is_same_v<T, double>,
                  "loom: collectives take half, bf16, float or double tensors");
  }
  // all_gather and reduce_scatter, with equal parts (no counts) or per-rank
  // counts: an input and an output of one element type and space.
  template <class IV, class OV>
  void in_out(detail::collective c, const IV& iv, const OV& ov, reduce_op op, std::span<const index_t> counts = {}) {
    using T = typename OV::element_type;
    check_element<T>();
    static_assert(std::is_same_v<std::remove_const_t<typename IV::element_type>, T>,
                  "loom: a collective's input and output have the same element type");
    static_assert(std::is_same_v<typename IV::space, typename OV::space>,
                  "loom: a collective's input and output live in the same memory space");
    const bool gather = detail::gathers(c), counted = detail::per_rank_counts(c);
    static_assert(IV::rank >= 1 && OV::rank >= 1, "loom: all_gather and reduce_scatter take tensors of rank 1 or more");
    const index_t rows = gather ? ov.extent(0) : iv.extent(0);
    const detail::rank_counts rc(counts.data(), counts.size(), s_->size, s_->rank, rows);
    const auto what = enter(c, dtype_of<T>, op, counted ? rc.mine : 0, iv.extents(), ov.extents(),
                            std::is_same_v<typename OV::space, device>, counted ? rc.checksum : 0);
    // Each rank's rows: the counts, or equal parts.
    std::vector<index_t> parts(counts.begin(), counts.end());
    if (!counted) parts.assign(static_cast<std::size_t>(s_->size), rows / s_->size);
    const view<const T, IV::rank, typename IV::space> ic = iv;
    if constexpr (std::is_same_v<typename OV::space, host>) {
#if LOOM_HAS_MPI
      gather ? detail::host_all_gather(*s_, ic, ov, parts, counted, what)
             : detail::host_reduce_scatter(*s_, ic, ov, op, parts, counted, what);
#endif
    } else {
#if LOOM_HAS_NCCL
      gather ? detail::device_all_gather(*s_, ic, ov, parts, counted, what)
             : detail::device_reduce_scatter(*s_, ic, ov, op, parts, counted, what);
#endif
    }
  }

  // The common entry of every collective: the communicator usable, the
  // backend there, the call counted, and (with check_metadata) every rank's
  // arguments compared. Returns the call's description for messages.
  template <std::size_t RI, std::size_t RO>
  std::string enter(detail::collective c, dtype dt, reduce_op op, std::int64_t root, const shape<RI>& in,
                    const shape<RO>& out, bool on_device, std::int64_t checksum = 0) {
    auto& s = *s_;
    const detail::call_record r(c, s.calls, dt, op, root, in, out, checksum);
    detail::require_usable(s, detail::collective_name(c));
    if (on_device && !LOOM_HAS_NCCL)
      throw dist_error(std::string("loom: ") + r.describe() +
                       " on device tensors needs NCCL, and loom::dist was built without it (nccl.h, libnccl)");
    if (!on_device && !s.from_mpi)
      throw dist_error(std::string("loom: ") + r.describe() +
                       " on host tensors needs MPI: make the communicator with communicator::from_mpi under mpirun "
                       "(a communicator from the environment has device collectives only)");
    ++s.calls;
    if (s.check) {
#if LOOM_HAS_MPI
      if (s.from_mpi) detail::mpi_check(s, r);
#endif
#if LOOM_HAS_NCCL
      if (!s.from_mpi) detail::nccl_check(s, r);
#endif
    } else if (const std::string p = detail::local_problem(r, s.size); !p.empty()) {
      // Found on this rank only: the others go on into the collective and
      // time out (with the check on, every rank reports it at once).
      if (c == detail::collective::broadcast) throw value_error("loom: " + r.describe() + ": " + p);
      throw shape_error("loom: " + r.describe() + ": " + p);
    }
    return r.describe();
  }

  void release() noexcept {
    if (!s_) return;
#if LOOM_HAS_NCCL
    if (s_->nccl) {
      // A non-blocking NCCL communicator is finalized (its queued work
      // flushed) before it is destroyed; a failed or stuck one is aborted.
      bool finalized = false;
      const ncclResult_t started = s_->broken.empty() ? ncclCommFinalize(s_->nccl) : ncclInternalError;
      if (started == ncclSuccess || started == ncclInProgress) {
        const auto deadline = detail::steady::now() + s_->timeout;
        ncclResult_t state = started;
        while (state == ncclInProgress && detail::steady::now() < deadline)
          if (ncclCommGetAsyncError(s_->nccl, &state) != ncclSuccess) break;
        finalized = state == ncclSuccess;
      }
      (void)(finalized ? ncclCommDestroy(s_->nccl) : ncclCommAbort(s_->nccl));
      s_->nccl = nullptr;
    }
#endif
#if LOOM_HAS_MPI
    // A failed communicator's MPI handle is left to MPI_Abort: freeing it
    // may wait for the dead rank.
    if (s_->mpi != MPI_COMM_NULL && s_->broken.empty()) (void)MPI_Comm_free(&s_->mpi);
#endif
    if (!s_->broken.empty()) (void)s_.release();  // MPI or NCCL may still write its abandoned buffers
    s_.reset();
  }

  std::unique_ptr<detail::comm_state> s_;
};
}  // namespace loom::dist
