// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host loops at the CPU's full SIMD width without the user's -march: a
// loop body is compiled once per instruction set (baseline, AVX2+FMA,
// AVX-512) through function target attributes, and one of them is chosen
// at run time from what the CPU supports (once per process). The functions
// the body calls (the expression's nodes, loom::vmath) are inlined into
// each copy, so each runs at that copy's width; anything left out of line
// runs at the baseline, correctly. LOOM_HOST_SIMD=baseline|avx2|avx512 in
// the environment caps the choice (CI runs both paths).

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "loom/config.hpp"
#include "loom/core/launch.hpp"

// x86-64 multiversioning with g++ or clang++; off under nvcc (its front end
// compiles the host side: the baseline loop only) and on other CPUs (their
// baseline, such as aarch64's NEON, is the loop's only copy).
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define LOOM_SIMD_DISPATCH 1
#define LOOM_SIMD_TARGET_AVX2 [[gnu::target("avx2,fma")]]
#define LOOM_SIMD_TARGET_AVX512 [[gnu::target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")]]
#else
#define LOOM_SIMD_DISPATCH 0
#endif

namespace loom::simd {
//! The instruction sets the host's loops are compiled for.
enum class isa { baseline, avx2, avx512 };

//! Printable name of `i` ("baseline" is x86-64's SSE2 or the CPU's own
//! baseline, such as NEON on aarch64).
inline const char* name(isa i) {
  switch (i) {
    case isa::avx2: return "avx2+fma";
    case isa::avx512: return "avx512";
    default: return "baseline";
  }
}

//! The widest instruction set this process's CPU runs (x86-64 with g++ or
//! clang++, also in nvcc's host pass; baseline elsewhere), capped by
//! LOOM_HOST_SIMD (baseline, avx2 or avx512); decided once. The host GEMM
//! kernel (linalg/host_kernel.hpp) runs in it.
inline isa cpu_isa() {
  static const isa chosen = [] {
    isa best = isa::baseline;
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = isa::avx2;
    if (best == isa::avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
      best = isa::avx512;
#endif
    if (const char* cap = std::getenv("LOOM_HOST_SIMD")) {
      const isa want = std::strcmp(cap, "baseline") == 0 ? isa::baseline
                       : std::strcmp(cap, "avx2") == 0   ? isa::avx2
                                                         : isa::avx512;
      best = std::min(best, want);
    }
    return best;
  }();
  return chosen;
}

//! The instruction set the host executor's dense loops run in: cpu_isa()
//! where the build has loops for it (LOOM_SIMD_DISPATCH), else baseline.
inline isa host_isa() { return LOOM_SIMD_DISPATCH ? cpu_isa() : isa::baseline; }
}  // namespace loom::simd

namespace loom::detail::simd {
// The loop body, one copy per instruction set: f(i) for i in [b, e), where
// f(i) neither reads nor writes what another iteration writes. f is a copy
// (its address never escapes, so it stays in registers). Each copy is
// flattened (everything f calls inlined into it), so the whole expression
// runs at that copy's width: a call left out of line would run one element
// at a time in baseline code. `omp simd` asks
// g++ for lanes; under clang the loop carries no pragma (see
// host_for_each_simd) and its vectorizer decides alone.
#if LOOM_HAS_OPENMP && !defined(__clang__)
#define LOOM_SIMD_LOOP_PRAGMA _Pragma("omp simd")
#else
#define LOOM_SIMD_LOOP_PRAGMA
#endif
#define LOOM_SIMD_LOOP(name, attributes)                          \
  template <class F>                                              \
  [[gnu::flatten]] attributes void name(index_t b, index_t e, F f) { \
    LOOM_SIMD_LOOP_PRAGMA                                \
    for (index_t i = b; i < e; ++i) f(i);                \
  }
LOOM_SIMD_LOOP(loop_baseline, )
#if LOOM_SIMD_DISPATCH
LOOM_SIMD_LOOP(loop_avx2, LOOM_SIMD_TARGET_AVX2)
LOOM_SIMD_LOOP(loop_avx512, LOOM_SIMD_TARGET_AVX512)
#endif
#undef LOOM_SIMD_LOOP

// f(i) for i in [b, e) in instruction set `i`'s copy of the loop. Wide
// false compiles the baseline copy alone: callers pass it for loops without
// math functions (memory-bound arithmetic gains little from a wider copy,
// and each copy costs compile time).
template <bool Wide = true, class F>
void loop(loom::simd::isa i, index_t b, index_t e, const F& f) {
#if LOOM_SIMD_DISPATCH
  if constexpr (Wide) {
    if (i == loom::simd::isa::avx512) return loop_avx512(b, e, f);
    if (i == loom::simd::isa::avx2) return loop_avx2(b, e, f);
  }
#endif
  (void)i;
  loop_baseline(b, e, f);
}

// f() in a function of its own compiled for one instruction set: the
// wrapper is flattened (everything f calls inlined into it) and never
// inlined itself, so each call site keeps one out-of-line copy per
// instruction set, and a caller compiled for another instruction set
// calls it rather than inlining it.
#define LOOM_SIMD_CALL(name, attributes) \
  template <class F>                     \
  [[gnu::flatten, gnu::noinline]] attributes void name(const F& f) { f(); }
LOOM_SIMD_CALL(call_baseline, )
#if LOOM_SIMD_DISPATCH
LOOM_SIMD_CALL(call_avx2, LOOM_SIMD_TARGET_AVX2)
LOOM_SIMD_CALL(call_avx512, LOOM_SIMD_TARGET_AVX512)
#endif
#undef LOOM_SIMD_CALL

// f() in instruction set `i`'s copy (call_*): a host loop body that is not
// one flat loop over elements, such as a row kernel's passes over a row.
// Wide false compiles the baseline copy alone, as for loop.
template <bool Wide = true, class F>
void call(loom::simd::isa i, const F& f) {
#if LOOM_SIMD_DISPATCH
  if constexpr (Wide) {
    if (i == loom::simd::isa::avx512) return call_avx512(f);
    if (i == loom::simd::isa::avx2) return call_avx2(f);
  }
#endif
  (void)i;
  call_baseline(f);
}

// Elements per task of for_each: a few pages of output, so threads share
// the work and each task's loop runs long enough for its lanes.
inline constexpr index_t simd_chunk = 8192;

// host_for_each_simd at the CPU's width: f(i) for i in [0, n) as one host
// launch, threads over chunks, each chunk in host_isa()'s copy of the loop.
template <bool Wide = true, class F>
void for_each(index_t n, const F& f) {
  if (n <= 0) return;
  const loom::simd::isa i = loom::simd::host_isa();
  const index_t chunks = (n + simd_chunk - 1) / simd_chunk;
  host_for_each(
      chunks, [&](index_t c) { loop<Wide>(i, c * simd_chunk, std::min(n, (c + 1) * simd_chunk), f); }, simd_chunk);
}
}  // namespace loom::detail::simd
