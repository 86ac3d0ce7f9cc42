// SPDX-License-Identifier: Apache-2.0
#pragma once

//! loom's version, as numbers and as a string.
#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0
#define LOOM_VERSION_STRING "0.1.0"

// LOOM_HD marks code that runs on both executors: the host one and the CUDA one.
// LOOM_CUDA_COMPILER is 1 when this translation unit is compiled by nvcc, so it
// can launch kernels; 0 for a host compiler (then device tensors still allocate
// and copy, through the CUDA runtime's host API, but evaluating an expression on
// them is a compile error that says to use nvcc).
#if defined(__CUDACC__)
#define LOOM_CUDA_COMPILER 1
#define LOOM_HD __host__ __device__ __forceinline__
#define LOOM_DEVICE __device__ __forceinline__
#define LOOM_GLOBAL __global__
#else
#define LOOM_CUDA_COMPILER 0
#define LOOM_HD inline
#define LOOM_DEVICE inline
#endif

// Asks nvcc to unroll the next loop in device code; nothing in host code
// (host compilers warn about the unknown pragma).
#if defined(__CUDA_ARCH__)
#define LOOM_UNROLL _Pragma("unroll")
#else
#define LOOM_UNROLL
#endif

// Inlines a host function or lambda into every caller, so that it runs at
// the width of the copy of core/simd/dispatch.hpp's loops that calls it
// (a call left out of line runs in baseline code). Empty under nvcc and in
// unoptimized builds (compile time).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && defined(__OPTIMIZE__)
#define LOOM_HOST_INLINE __attribute__((always_inline))
#else
#define LOOM_HOST_INLINE
#endif

// True while compiling the device side of a CUDA translation unit.
#if defined(__CUDA_ARCH__)
#define LOOM_DEVICE_CODE 1
#else
#define LOOM_DEVICE_CODE 0
#endif

// Marks a host function that only builds and throws an error: kept out of
// line and out of the hot path, so the message is compiled once per
// translation unit instead of inline in every assignment that can fail.
#if defined(__GNUC__) || defined(__clang__)
#define LOOM_COLD __attribute__((cold, noinline))
#define LOOM_NOINLINE __attribute__((noinline))
#else
#define LOOM_COLD
#define LOOM_NOINLINE
#endif

#if defined(_OPENMP)
#define LOOM_HAS_OPENMP 1
#else
#define LOOM_HAS_OPENMP 0
#endif

#include <cstddef>
#include <cstdint>

namespace loom {
//! Signed 64-bit index type used for every extent, stride and offset, so that
//! tensors of more than 2^31 elements work everywhere.
using index_t = std::int64_t;

//! The library version as a string ("major.minor.patch").
inline constexpr const char* version = LOOM_VERSION_STRING;

namespace detail {
//! True when this translation unit can launch kernels (compiled by nvcc).
inline constexpr bool cuda_compiler = LOOM_CUDA_COMPILER != 0;
//! A `false` that depends on T, for static_asserts in templates.
template <class...>
inline constexpr bool always_false = false;
}  // namespace detail
}  // namespace loom
