// SPDX-License-Identifier: Apache-2.0
#pragma once

// What loom's collectives share: their errors, options and reduce ops, the
// state of a communicator (MPI and NCCL handles, its failure), the waits with
// a deadline, and the check that every rank called the same collective with
// matching tensors. MPI parts need LOOM_HAS_MPI, NCCL parts LOOM_HAS_NCCL
// (the CMake target loom::dist sets each where the library is found).

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"

#ifndef LOOM_HAS_MPI
#define LOOM_HAS_MPI 0
#endif
#ifndef LOOM_HAS_NCCL
#define LOOM_HAS_NCCL 0
#endif
#if LOOM_HAS_MPI
#include <mpi.h>
#endif
#if LOOM_HAS_NCCL
#include <nccl.h>
#endif

namespace loom::dist {

//! A failed MPI or NCCL call (naming the call and the library's message), or
//! a collective this communicator cannot run (host tensors without MPI).
class dist_error : public error {
 public:
  using error::error;
};

//! The ranks called a collective with arguments that do not match (another
//! collective, dtype, shape, reduce op or root); thrown on every rank, before
//! any data moves, naming each rank's arguments. The communicator stays usable.
class mismatch_error : public dist_error {
 public:
  using dist_error::dist_error;
};

//! A collective (or its wait) that did not complete within the communicator's
//! timeout: a rank died, hangs, or never called it. The communicator cannot
//! be used again; end the process (communicator::abort).
class timeout_error : public dist_error {
 public:
  using dist_error::dist_error;
};

//! How a reduction combines the ranks' elements: their sum, their average
//! (the sum divided by the number of ranks) or their maximum.
enum class reduce_op { sum, average, max };

//! "sum", "average" or "max".
inline const char* reduce_op_name(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum:
      return "sum";
    case reduce_op::average:
      return "average";
    case reduce_op::max:
      return "max";
  }
  return "unknown";
}

//! A communicator's settings. Unset fields come from the environment, then
//! from the defaults: `timeout` from LOOM_DIST_TIMEOUT (seconds, default
//! 600), `check_metadata` from LOOM_DIST_CHECK (0 or 1; default on in builds
//! without NDEBUG, off with it).
//! Example: `loom::dist::options o; o.timeout = std::chrono::seconds(30); o.check_metadata = true;`
struct options {
  //! How long a collective, a communicator's creation or synchronize() may
  //! take before it fails with timeout_error.
  std::optional<std::chrono::milliseconds> timeout;
  //! Whether every collective first checks that all ranks called it with
  //! matching arguments (one small all-gather; docs/17_distributed.md).
  std::optional<bool> check_metadata;
};

namespace detail {
inline std::chrono::milliseconds resolve_timeout(const options& o) {
  if (o.timeout) {
    if (o.timeout->count() <= 0) throw value_error("loom: a communicator's timeout must be positive");
    return *o.timeout;
  }
  if (const char* s = std::getenv("LOOM_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(s, &end);
    if (end == s || *end != '\0' || !(seconds > 0))
      throw value_error(std::string("loom: LOOM_DIST_TIMEOUT=") + s + " is not a positive number of seconds");
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  return std::chrono::seconds(600);
}

inline bool resolve_check(const options& o) {
  if (o.check_metadata) return *o.check_metadata;
  if (const char* s = std::getenv("LOOM_DIST_CHECK")) {
    if (std::string(s) == "1") return true;
    if (std::string(s) == "0") return false;
    throw value_error(std::string("loom: LOOM_DIST_CHECK=") + s + " must be 0 or 1");
  }
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

// Set once any communicator of the process failed (a timeout, a failed
// call): loom::dist::mpi_environment then ends MPI with MPI_Abort, since
// MPI_Finalize may wait for a dead rank forever.
inline std::atomic<bool>& process_failed() {
  static std::atomic<bool> failed{false};
  return failed;
}

// What each rank contributes to the metadata check: the collective, its
// call number on this communicator, dtype, reduce op, root, and the
// extents of its input and output (rank, then up to max_axes extents). The
// v-variants (counts per rank) record this rank's count where others record
// the root (-1 when the counts do not fit) and a checksum of all counts.
enum class collective : std::int64_t {
  all_reduce = 1,
  all_gather,
  reduce_scatter,
  broadcast,
  barrier,
  all_gather_v,
  reduce_scatter_v
};
inline const char* collective_name(collective c) noexcept {
  switch (c) {
    case collective::all_reduce:
      return "all_reduce";
    case collective::all_gather:
      return "all_gather";
    case collective::reduce_scatter:
      return "reduce_scatter";
    case collective::broadcast:
      return "broadcast";
    case collective::barrier:
      return "barrier";
    case collective::all_gather_v:
      return "all_gather_v";
    case collective::reduce_scatter_v:
      return "reduce_scatter_v";
  }
  return "unknown";
}
// Whether c gathers (the output is the stacked inputs) or scatters (the
// input is split into the outputs), with equal or per-rank counts.
inline bool gathers(collective c) noexcept { return c == collective::all_gather || c == collective::all_gather_v; }
inline bool splits(collective c) noexcept {
  return c != collective::all_reduce && c != collective::broadcast && c != collective::barrier;
}
inline bool per_rank_counts(collective c) noexcept {
  return c == collective::all_gather_v || c == collective::reduce_scatter_v;
}

// The rows (along axis 0) of each rank in a v-variant, checked against the
// ranks and the stacked side's rows: `mine` is this rank's count, or -1 when
// the counts do not fit (a wrong number of them, a negative one, a sum other
// than `rows`); `checksum` tells other counts apart in the argument check.
struct rank_counts {
  std::int64_t mine = -1;
  std::int64_t checksum = 0;
  rank_counts(const index_t* counts, std::size_t n, int ranks, int rank, index_t rows) {
    index_t total = 0;
    bool ok = n == static_cast<std::size_t>(ranks);
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the counts
    for (std::size_t r = 0; r != n; ++r) {
      ok = ok && counts[r] >= 0;
      total += counts[r];
      h = (h ^ static_cast<std::uint64_t>(counts[r])) * 1099511628211ull;
    }
    ok = ok && total == rows;
    mine = ok ? counts[rank] : -1;
    checksum = static_cast<std::int64_t>(h >> 1);
  }
};
inline constexpr std::size_t max_axes = 8;
struct call_record {
  static constexpr std::size_t fields = 6 + 2 * (1 + max_axes);
  std::array<std::int64_t, fields> v{};

  template <std::size_t RI, std::size_t RO>
  call_record(collective c, std::uint64_t seq, dtype dt, reduce_op op, std::int64_t root, const shape<RI>& in,
              const shape<RO>& out, std::int64_t checksum = 0) {
    static_assert(RI <= max_axes && RO <= max_axes, "loom: collectives take tensors of rank 8 or less");
    v.fill(0);
    v[0] = static_cast<std::int64_t>(c);
    v[1] = static_cast<std::int64_t>(seq);
    v[2] = static_cast<std::int64_t>(dt);
    v[3] = static_cast<std::int64_t>(op);
    v[4] = root;
    v[5] = checksum;
    v[6] = static_cast<std::int64_t>(RI);
    for (std::size_t d = 0; d != RI; ++d) v[7 + d] = in[d];
    v[7 + max_axes] = static_cast<std::int64_t>(RO);
    for (std::size_t d = 0; d != RO; ++d) v[8 + max_axes + d] = out[d];
  }
  explicit call_record(const std::int64_t* p) { std::copy(p, p + fields, v.begin()); }

  collective kind() const { return static_cast<collective>(v[0]); }
  std::string axes(std::size_t at) const {
    std::string s = "[";
    for (std::int64_t d = 0; d != v[at]; ++d) s += (d ? ", " : "") + std::to_string(v[at + 1 + d]);
    return s + "]";
  }
  std::string input() const { return axes(6); }
  std::string output() const { return axes(7 + max_axes); }
  std::string describe() const {
    std::string s = std::string(collective_name(kind())) + " (call " + std::to_string(v[1]) + ")";
    if (kind() == collective::barrier) return s;
    s += " of " + std::string(dtype_name(static_cast<dtype>(v[2]))) + " " + input();
    if (splits(kind())) s += " into " + output();
    if (kind() != collective::broadcast && !gathers(kind()))
      s += ", " + std::string(reduce_op_name(static_cast<reduce_op>(v[3])));
    if (kind() == collective::broadcast) s += ", root " + std::to_string(v[4]);
    if (per_rank_counts(kind()))
      s += v[4] < 0 ? ", counts that do not fit" : ", count " + std::to_string(v[4]) + " of counts #" + std::to_string(v[5] % 100000);
    return s;
  }
};

// Whether `r`'s output extents fit its input for `ranks` ranks: all_gather
// stacks the inputs along axis 0, reduce_scatter splits the input along it
// (in equal parts, or in the v-variants by the counts, whose sum
// rank_counts checked); all_reduce and broadcast work in place.
inline std::string local_problem(const call_record& r, int ranks) {
  const auto& v = r.v;
  const std::int64_t ri = v[6], ro = v[7 + max_axes];
  if (r.kind() == collective::broadcast && (v[4] < 0 || v[4] >= ranks))
    return "root " + std::to_string(v[4]) + " is not a rank of " + std::to_string(ranks);
  if (!splits(r.kind())) return "";
  const bool gather = gathers(r.kind()), counted = per_rank_counts(r.kind());
  const std::int64_t* small = gather ? &v[7] : &v[8 + max_axes];
  const std::int64_t* big = gather ? &v[8 + max_axes] : &v[7];
  if (counted && v[4] < 0)
    return "the counts must be " + std::to_string(ranks) + " non-negative numbers (one per rank) that sum to axis 0 of " +
           (gather ? "the output " + r.output() : "the input " + r.input());
  bool ok = ri == ro && ri >= 1 && (counted ? small[0] == v[4] : big[0] == small[0] * ranks);
  for (std::int64_t d = 1; ok && d < ri; ++d) ok = big[d] == small[d];
  if (ok) return "";
  if (counted)
    return std::string(gather ? "the input" : "the output") + " must have this rank's count (" + std::to_string(v[4]) +
           ") along axis 0 and the other axes of " + (gather ? "the output" : "the input") + ": input " + r.input() +
           ", output " + r.output();
  return std::string(gather ? "the output" : "the input") + " must have the shape of " +
         (gather ? "the input" : "the output") + " with axis 0 times " + std::to_string(ranks) + " (the ranks): input " +
         r.input() + ", output " + r.output();
}

// The verdict on all ranks' records, the same on every rank: "" when they
// agree and each fits, else the message of the mismatch_error.
inline std::string compare_records(const std::vector<std::int64_t>& all, int ranks) {
  std::vector<call_record> recs;
  for (int r = 0; r != ranks; ++r) recs.emplace_back(all.data() + static_cast<std::size_t>(r) * call_record::fields);
  std::string problems;
  for (int r = 0; r != ranks; ++r) {
    const std::string p = local_problem(recs[static_cast<std::size_t>(r)], ranks);
    if (!p.empty()) problems += "; rank " + std::to_string(r) + ": " + p;
  }
  bool same = true;
  for (int r = 1; r != ranks; ++r) {
    auto a = recs[0].v, b = recs[static_cast<std::size_t>(r)].v;
    if (splits(recs[0].kind())) {
      // Only the stacked side must agree; the other side was checked above.
      const std::size_t skip = gathers(recs[0].kind()) ? 6 : 7 + max_axes;
      for (std::size_t k = skip; k != skip + 1 + max_axes; ++k) a[k] = b[k] = 0;
      if (per_rank_counts(recs[0].kind())) a[4] = b[4] = 0;  // each rank's own count; the checksums must agree
    }
    if (recs[0].kind() == collective::barrier) a[2] = b[2] = a[6] = b[6] = a[7 + max_axes] = b[7 + max_axes] = 0;
    same = same && a == b;
  }
  if (same && problems.empty()) return "";
  std::string msg = "loom: the ranks' collective calls do not match:";
  for (int r = 0; r != ranks; ++r) msg += " rank " + std::to_string(r) + ": " + recs[static_cast<std::size_t>(r)].describe() + ";";
  msg.pop_back();
  return msg + problems;
}

// The shared state of a communicator (held by pointer, so that a
// communicator moves and its collectives keep their handles).
struct comm_state {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  bool from_mpi = false;
  std::chrono::milliseconds timeout{600000};
  bool check = false;
  std::uint64_t calls = 0;
  std::string broken;  // why the communicator cannot be used again ("" while it can)
  // Buffers of a collective that timed out: MPI or NCCL may still write
  // them, so they are kept until the process ends.
  std::vector<std::shared_ptr<void>> abandoned;
#if LOOM_HAS_MPI
  MPI_Comm mpi = MPI_COMM_NULL;
#endif
#if LOOM_HAS_NCCL
  ncclComm_t nccl = nullptr;
  int nccl_device = -1;
#endif
};

using steady = std::chrono::steady_clock;

[[noreturn]] inline void fail(comm_state& s, const std::string& msg, bool timed_out) {
  s.broken = msg;
  process_failed() = true;
  if (timed_out) throw timeout_error(msg);
  throw dist_error(msg);
}

inline void require_usable(const comm_state& s, const char* what) {
  if (!s.broken.empty())
    throw dist_error(std::string("loom: ") + what + " on a communicator that failed earlier and cannot be used again (" +
                     s.broken + ")");
}

inline std::string seconds_text(std::chrono::milliseconds t) {
  const auto ms = t.count();
  return std::to_string(ms / 1000) + (ms % 1000 ? "." + std::to_string(1000 + ms % 1000).substr(1) : "") + " s";
}

#if LOOM_HAS_MPI
[[noreturn]] inline void throw_mpi(comm_state* s, int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) text[0] = '\0';
  const std::string msg =
      std::string("loom: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " + text;
  if (s) fail(*s, msg, false);
  throw dist_error(msg);
}
#define LOOM_MPI_CHECK(state, call)                                                            \
  do {                                                                                         \
    const int loom_mpi_status_ = (call);                                                       \
    if (loom_mpi_status_ != MPI_SUCCESS)                                                       \
      ::loom::dist::detail::throw_mpi((state), loom_mpi_status_, #call, __FILE__, __LINE__);   \
  } while (0)

// Waits for a non-blocking MPI operation until the communicator's deadline,
// testing it (which also drives MPI's progress) and yielding the core
// between tests. On timeout the communicator fails and `keep` (the buffers
// MPI may still write) is kept until the process ends.
inline void mpi_wait(comm_state& s, MPI_Request& req, const std::string& what, std::shared_ptr<void> keep = {}) {
  const auto deadline = steady::now() + s.timeout;
  for (;;) {
    int done = 0;
    LOOM_MPI_CHECK(&s, MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (steady::now() > deadline) {
      if (keep) s.abandoned.push_back(std::move(keep));
      fail(s,
           "loom: " + what + " did not complete within " + seconds_text(s.timeout) + " on rank " +
               std::to_string(s.rank) + " of " + std::to_string(s.size) +
               ": a rank died, hangs or did not call it; this communicator cannot be used again (end the process, "
               "e.g. communicator::abort())",
           true);
    }
    std::this_thread::yield();
  }
}
#endif

#if LOOM_HAS_NCCL
[[noreturn]] inline void throw_nccl(comm_state* s, ncclResult_t code, const char* call, const char* file, int line) {
  std::string msg = std::string("loom: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                    ncclGetErrorString(code);
  if (s && s->nccl) {
    if (const char* last = ncclGetLastError(s->nccl); last && *last) msg += std::string(" (") + last + ")";
  }
  if (s) fail(*s, msg, false);
  throw dist_error(msg);
}
#define LOOM_NCCL_CHECK(state, call)                                                                   \
  do {                                                                                                 \
    const ncclResult_t loom_nccl_status_ = (call);                                                     \
    if (loom_nccl_status_ != ncclSuccess && loom_nccl_status_ != ncclInProgress)                       \
      ::loom::dist::detail::throw_nccl((state), loom_nccl_status_, #call, __FILE__, __LINE__);         \
  } while (0)

// NCCL communicators are made non-blocking (ncclConfig_t::blocking = 0), so
// no NCCL call can block forever: a call may return ncclInProgress, and this
// waits until the communicator's asynchronous state leaves it, or until
// `done` (when given) says the stream's work finished, within the deadline.
// An error or the deadline aborts the NCCL communicator (ncclCommAbort, which
// also ends its kernels) and fails this one.
template <class Done>
void nccl_wait(comm_state& s, const std::string& what, Done&& done) {
  const auto deadline = steady::now() + s.timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(s.nccl, &state);
    if (q != ncclSuccess) state = q;
    if (state != ncclSuccess && state != ncclInProgress) {
      std::string msg = "loom: " + what + " failed on rank " + std::to_string(s.rank) + ": NCCL reports " +
                        ncclGetErrorString(state);
      if (const char* last = ncclGetLastError(s.nccl); last && *last) msg += std::string(" (") + last + ")";
      (void)ncclCommAbort(s.nccl);
      s.nccl = nullptr;
      fail(s, msg, false);
    }
    if (state == ncclSuccess && done()) return;
    if (steady::now() > deadline) {
      (void)ncclCommAbort(s.nccl);
      s.nccl = nullptr;
      fail(s,
           "loom: " + what + " did not complete within " + seconds_text(s.timeout) + " on rank " +
               std::to_string(s.rank) + " of " + std::to_string(s.size) +
               ": a rank died, hangs or did not call it; the NCCL communicator was aborted and this communicator "
               "cannot be used again",
           true);
    }
    std::this_thread::yield();
  }
}
inline void nccl_wait(comm_state& s, const std::string& what) {
  nccl_wait(s, what, [] { return true; });
}
#endif
}  // namespace detail
}  // namespace loom::dist
