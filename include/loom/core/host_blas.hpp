// SPDX-License-Identifier: Apache-2.0
#pragma once

// Which code computes the host executor's matrix products (a BLAS or loom's
// own kernel), and the binding to the BLAS: two CBLAS functions and the
// thread controls of OpenBLAS and BLIS. The CMake target loom::loom defines
// LOOM_HAS_BLAS=1 and links the BLAS when it finds one (cmake/loom_blas.cmake);
// without CMake, define it and link a CBLAS (-lopenblas) yourself.

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "loom/config.hpp"
#include "loom/core/error.hpp"

#ifndef LOOM_HAS_BLAS
#define LOOM_HAS_BLAS 0
#endif

#if LOOM_HAS_BLAS
#if defined(__APPLE__)
#define LOOM_DETAIL_C_SYMBOL(name) "_" name
#else
#define LOOM_DETAIL_C_SYMBOL(name) name
#endif
// Declared under loom's own names bound to the library's symbols: a file that
// also includes <cblas.h> sees no conflicting declaration, and no file pays
// for the BLAS's headers. CBLAS's enums are ints (row-major 101, no
// transpose 111, transpose 112); the LP64 interface takes int extents.
extern "C" {
void loom_cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                      const float* b, int ldb, float beta, float* c, int ldc) __asm__(LOOM_DETAIL_C_SYMBOL("cblas_sgemm"));
void loom_cblas_dgemm(int order, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a,
                      int lda, const double* b, int ldb, double beta, double* c,
                      int ldc) __asm__(LOOM_DETAIL_C_SYMBOL("cblas_dgemm"));
// Weak: null unless the linked BLAS is OpenBLAS (or BLIS).
int loom_openblas_get_num_threads(void) __asm__(LOOM_DETAIL_C_SYMBOL("openblas_get_num_threads")) __attribute__((weak));
void loom_openblas_set_num_threads(int) __asm__(LOOM_DETAIL_C_SYMBOL("openblas_set_num_threads")) __attribute__((weak));
char* loom_openblas_get_config(void) __asm__(LOOM_DETAIL_C_SYMBOL("openblas_get_config")) __attribute__((weak));
char* loom_openblas_get_corename(void) __asm__(LOOM_DETAIL_C_SYMBOL("openblas_get_corename")) __attribute__((weak));
std::int64_t loom_bli_thread_get_num_threads(void) __asm__(
    LOOM_DETAIL_C_SYMBOL("bli_thread_get_num_threads")) __attribute__((weak));
void loom_bli_thread_set_num_threads(std::int64_t) __asm__(
    LOOM_DETAIL_C_SYMBOL("bli_thread_set_num_threads")) __attribute__((weak));
const char* loom_bli_info_get_version_str(void) __asm__(
    LOOM_DETAIL_C_SYMBOL("bli_info_get_version_str")) __attribute__((weak));
}
#endif

namespace loom {
//! What computes the host executor's matrix products.
enum class host_gemm_backend : std::uint8_t {
  blas,  //!< the BLAS loom::loom linked (LOOM_HAS_BLAS): cblas_sgemm/cblas_dgemm on blocks of the output
  loom   //!< loom's own packed, register-blocked kernel (always there)
};

namespace detail::linalg {
// The backend at start-up: the environment variable LOOM_HOST_GEMM (`blas` or
// `loom`), else the BLAS where loom has one.
inline host_gemm_backend initial_host_gemm_backend() {
  const char* env = std::getenv("LOOM_HOST_GEMM");
  const std::string v = env ? env : "";
  if (v == "loom") return host_gemm_backend::loom;
  if (v != "" && v != "blas")
    throw value_error("loom: LOOM_HOST_GEMM=" + v + " names no host GEMM backend; use blas or loom");
  if (v == "blas" && !LOOM_HAS_BLAS)
    throw value_error(
        "loom: LOOM_HOST_GEMM=blas, but this program was built without a BLAS (LOOM_HAS_BLAS): install "
        "libopenblas-dev and reconfigure, or unset LOOM_HOST_GEMM");
  return LOOM_HAS_BLAS ? host_gemm_backend::blas : host_gemm_backend::loom;
}
inline std::atomic<host_gemm_backend>& host_gemm_backend_state() {
  static std::atomic<host_gemm_backend> state{initial_host_gemm_backend()};
  return state;
}
}  // namespace detail::linalg

//! The backend of the host executor's matrix products from now on: `blas`
//! when loom::loom linked a BLAS (LOOM_HAS_BLAS), else `loom`; the
//! environment variable LOOM_HOST_GEMM=loom (or =blas) chooses at the first
//! product, set_host_gemm_backend() at any time. O(1).
//! Example: `if (loom::current_host_gemm_backend() == loom::host_gemm_backend::blas) ...`
inline host_gemm_backend current_host_gemm_backend() {
  return detail::linalg::host_gemm_backend_state().load(std::memory_order_relaxed);
}

//! Chooses the backend of later host matrix products (every thread). Throws
//! value_error for `blas` when loom was built without one. The two agree
//! within float (double) rounding, not bit for bit. O(1).
//! Example: `loom::set_host_gemm_backend(loom::host_gemm_backend::loom);`
inline void set_host_gemm_backend(host_gemm_backend b) {
  if (b == host_gemm_backend::blas && !LOOM_HAS_BLAS)
    throw value_error(
        "loom: set_host_gemm_backend(blas), but this program was built without a BLAS (LOOM_HAS_BLAS): install "
        "libopenblas-dev and reconfigure");
  detail::linalg::host_gemm_backend_state().store(b, std::memory_order_relaxed);
}

//! One line naming what computes host matrix products now, for reports: the
//! BLAS with its version, kernels and threading, or loom's own kernel and why
//! (chosen, or no BLAS built in). loom::env_report() includes it. Never throws. O(1).
//! Example: `std::cout << loom::host_gemm_backend_name() << '\n';`
inline std::string host_gemm_backend_name() {
  std::string blas = "none (built without LOOM_HAS_BLAS)";
#if LOOM_HAS_BLAS
  if (loom_openblas_get_config) {
    blas = loom_openblas_get_config();
    const std::string core = loom_openblas_get_corename ? loom_openblas_get_corename() : "";
    if (!core.empty()) blas += " (" + core + " kernels)";
  } else if (loom_bli_info_get_version_str) {
    blas = std::string("BLIS ") + loom_bli_info_get_version_str();
  } else {
    blas = "a CBLAS (neither OpenBLAS nor BLIS)";
  }
#endif
  host_gemm_backend now = host_gemm_backend::loom;
  try {
    now = current_host_gemm_backend();
  } catch (const value_error& e) {
    return e.what();  // an unknown LOOM_HOST_GEMM: the first product throws the same
  }
  if (now == host_gemm_backend::blas)
    return blas + (LOOM_HAS_OPENMP ? "; called single-threaded from each of the host executor's threads"
                                   : "; on its own threads (loom without OpenMP)");
  return "loom's packed kernel (BLAS: " + blas + ")";
}

namespace detail::linalg {
// While it lives, an OpenBLAS or BLIS linked here runs single-threaded: the
// host executor's OpenMP threads each call it on their own blocks, so one
// team of threads runs (no second team spinning beside it). Restores the
// BLAS's own thread count at the end. Products running at the same time on
// several user threads may see each other's setting (results stay right).
class blas_single_threaded {
 public:
  blas_single_threaded() {
#if LOOM_HAS_BLAS
    if (loom_openblas_get_num_threads && loom_openblas_set_num_threads) {
      saved_ = loom_openblas_get_num_threads();
      if (saved_ > 1) loom_openblas_set_num_threads(1);
    } else if (loom_bli_thread_get_num_threads && loom_bli_thread_set_num_threads) {
      saved_ = loom_bli_thread_get_num_threads();
      if (saved_ > 1) loom_bli_thread_set_num_threads(1);
    }
#endif
  }
  ~blas_single_threaded() {
#if LOOM_HAS_BLAS
    if (saved_ <= 1) return;
    if (loom_openblas_set_num_threads)
      loom_openblas_set_num_threads(static_cast<int>(saved_));
    else if (loom_bli_thread_set_num_threads)
      loom_bli_thread_set_num_threads(saved_);
#endif
  }
  blas_single_threaded(const blas_single_threaded&) = delete;
  blas_single_threaded& operator=(const blas_single_threaded&) = delete;

 private:
  std::int64_t saved_ = 0;
};
}  // namespace detail::linalg
}  // namespace loom
