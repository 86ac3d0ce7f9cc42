// SPDX-License-Identifier: Apache-2.0
#pragma once

// What an assignment reports about the path it took (loom::last_eval).

#include <cstdint>

namespace loom {
//! Which compiled path an assignment took.
enum class eval_path : std::uint8_t {
  empty,       //!< nothing to do (zero elements); no launch
  contiguous,  //!< every operand contiguous, same shape (and 16-byte aligned on the device): linear indexing, vector
               //!< loads
  general,     //!< broadcast, strided or unaligned operands: coordinates from fast integer division
  rows         //!< the tree holds row reductions: one group of threads per row, reductions then the output
};

//! What an assignment did: its path, and on the device the elements each
//! thread moves with 16-byte loads (1 on the host and on the general path).
struct eval_info {
  eval_path path = eval_path::empty;
  int vector_width = 1;
  bool on_device = false;
  int threads_per_row = 0;  //!< on the rows path: threads that share one row (1 on the host)
  int row_passes = 0;       //!< on the rows path: reduction passes over each row before the output pass
  int cached_rows = 0;    //!< on the rows path: distinct input rows held on chip (shared memory; a per-thread buffer on
                          //!< the host, which copies rows only for trees that read an operand through coordinates)
                          //!< and read from there by every pass; 0 when the rows do not fit the cache
  int cached_values = 0;  //!< on the rows path: distinct computed values (a subtree such as exp(x - row_max(x))
                          //!< that several passes use) that one pass stores in the row cache and later passes
                          //!< read instead of computing again
  int recomputed_values = 0;  //!< on the rows path: such values that every pass computes again: they do not fit the
                              //!< cache next to the input rows, or LOOM_ROW_CACHE_VALUES=0
  int shared_params = 0;  //!< on the device's elementwise contiguous path: inputs used several times and loaded
                          //!< once per vector step, read by every use: a loom::layer call's arguments, or in a
                          //!< plain expression of 8 loads or more its repeated tensors and subexpressions (0:
                          //!< each use loads its own 16 bytes; always 0 on the host)
  int repeated_loads = 0;  //!< on the elementwise paths: operand occurrences that read the same memory as an earlier
                           //!< one (a tensor named twice, `x * sigmoid(x)`) and load it again; on the device's
                           //!< shared kernel these count only repeats outside its parameters
  int per_row_values = 0;  //!< on the host's rows path: subtrees with one value per row (such as rsqrt(row_mean(x * x)
                           //!< + eps)) computed once per row instead of in every column; 0 on the device
};

namespace detail {
// The calling thread's record of its last operation of kind T (eval_info,
// column_sums_info, grad_info): what loom::last_eval() and its kin return.
template <class T>
T& last_slot() {
  thread_local T info;
  return info;
}
inline eval_info& last_eval_slot() { return last_slot<eval_info>(); }
}  // namespace detail
}  // namespace loom
