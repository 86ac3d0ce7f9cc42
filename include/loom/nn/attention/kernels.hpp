// SPDX-License-Identifier: Apache-2.0
#pragma once

// The device path of attention (docs/15_attention.md, "On the GPU"): the
// kernels that run the block bodies of nn/attention/tile.hpp, and the same
// bodies run on the host by device_emulation (the tests' view of the device
// code). One forward kernel; the backward is a dq kernel (which also writes
// D = rowsum(dout ∘ o) per row), a dk/dv kernel, and, with extra arguments,
// one small kernel per argument that adds the rows' partial sums in a fixed
// order.

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/config.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/nn/attention/host.hpp"
#include "loom/nn/attention/tile.hpp"
#include "loom/tensor/tensor.hpp"

namespace loom::detail::attn {
//! Where the block bodies run: on the GPU, or emulated on the host.
enum class block_exec { gpu, emulated };

//! The largest head size the kernels take.
constexpr index_t kernel_max_dim = 128;

// Calls f(tiles<64>{}) or f(tiles<128>{}) for head size dim.
template <class F>
decltype(auto) with_tiles(index_t dim, const F& f) {
  if (dim > kernel_max_dim)
    throw shape_error("loom: attention on the device (and its emulation) takes head sizes D <= " +
                      std::to_string(kernel_max_dim) + "; got D = " + std::to_string(dim));
  if (dim <= 64) return f(tiles<64>{});
  return f(tiles<128>{});
}

template <class A, class X>
using extra_values_of =
    extra_values<A, std::remove_const_t<typename decltype(X::values)::value_type>, X::axis, false>;

template <class T, class S, class M, class... X>
using params_t = kernel_params<T, acc_t<T>, S, M, tuple<extra_values_of<acc_t<T>, X>...>>;

//! The kernels' parameters for q, k, v (views of any strides) and the
//! extra arguments; outputs and scratch set by the caller.
template <class T, class S, class M, class QV, class... X>
params_t<T, S, M, X...> make_params(const geometry& g, const S& score, const M& mask, const QV& q, const QV& k,
                                    const QV& v, const std::tuple<X...>& extra) {
  using A = acc_t<T>;
  // Built in one aggregate initialization: a score_mod or mask_mod that
  // captures is copyable but neither default-constructible nor assignable.
  return std::apply(
      [&](const auto&... x) {
        return params_t<T, S, M, X...>{g.batch, g.heads, g.kv_heads, g.sq, g.skv, g.dim, static_cast<A>(g.scale),
                                       operand_of<const T>(q), operand_of<const T>(k), operand_of<const T>(v), {}, {},
                                       nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                       score, mask,
                                       decltype(params_t<T, S, M, X...>::extra)(
                                           extra_values_of<A, std::remove_cvref_t<decltype(x)>>{
                                               x.values.data(), x.values.stride(0)}...)};
      },
      extra);
}

//! The GPU's thread group: f(threadIdx.x, this thread's state), then a
//! barrier.
template <class State>
struct gpu_threads {
  State* state;
  template <class F>
  LOOM_HD void operator()(const F& f) const {
#if LOOM_DEVICE_CODE
    f(static_cast<int>(threadIdx.x), *state);
    __syncthreads();
#else
    (void)f;
#endif
  }
};

// Writes element i of extra argument j's gradient (a kernel's or a host loop's body).
template <class P>
struct extra_gradient_fn {
  P p;
  extra_axis axis;
  index_t j, extras;
  decltype(P::scale)* out;
  LOOM_HD void operator()(index_t i) const { out[i] = extra_gradient(p, axis, i, j, extras); }
};

// The three block bodies, each with its thread state: a query row of the
// forward, a query row of dq, a key row of dk and dv.
enum class body_kind { forward, dq, dkdv };
template <body_kind Kind>
struct body {
  template <class Tl, int Extras, class A>
  using state = std::conditional_t<
      Kind == body_kind::forward, forward_row<A, Tl::max_dim>,
      std::conditional_t<Kind == body_kind::dq, dq_row<A, Tl::max_dim, Extras>, dkdv_row<A, Tl::max_dim, Extras>>>;
  template <class Tl, int Extras, class P, class A, class Threads>
  static LOOM_HD void run(const P& p, index_t b, index_t h, index_t r0, A* smem, const Threads& threads) {
    if constexpr (Kind == body_kind::forward)
      forward_block<Tl>(p, b, h, r0, smem, threads);
    else if constexpr (Kind == body_kind::dq)
      dq_block<Tl, Extras>(p, b, h, r0, smem, threads);
    else
      dkdv_block<Tl, Extras>(p, b, h, r0, smem, threads);
  }
};

#if LOOM_CUDA_COMPILER
// One block of Body: blockIdx (rows / Tl::rows, head, batch), one thread per row.
template <class Body, class Tl, int Extras, class P>
__global__ void __launch_bounds__(Tl::rows) attention_kernel(P p) {
  extern __shared__ __align__(16) unsigned char attention_smem[];
  using A = decltype(P::scale);
  using state = typename Body::template state<Tl, Extras, A>;
  state st;
  Body::template run<Tl, Extras>(p, blockIdx.z, blockIdx.y, static_cast<index_t>(blockIdx.x) * Tl::rows,
                                 reinterpret_cast<A*>(attention_smem), gpu_threads<state>{&st});
}
#endif

// Runs Body's blocks over (rows / Tl::rows, heads, batch) with smem
// elements of shared memory each: one kernel on the current stream (after
// checking that the device offers that much shared memory), or on the
// host, block after block, thread after thread.
template <block_exec Exec, class Body, class Tl, int Extras, class P>
void run_blocks(const P& p, index_t rows, index_t heads, std::size_t smem) {
  using A = decltype(P::scale);
  const index_t blocks = (rows + Tl::rows - 1) / Tl::rows;
  if constexpr (Exec == block_exec::emulated) {
    using state = typename Body::template state<Tl, Extras, A>;
    std::vector<A> shared(smem);
    std::vector<state> st(Tl::rows);
    for (index_t b = 0; b < p.batch; ++b)
      for (index_t h = 0; h < heads; ++h)
        for (index_t blk = 0; blk < blocks; ++blk)
          Body::template run<Tl, Extras>(p, b, h, blk * Tl::rows, shared.data(), emulated_threads<state>{st.data(), Tl::rows});
  } else {
#if LOOM_CUDA_COMPILER
    const stream_ref s = current_stream();
    const std::size_t bytes = smem * sizeof(A);
    int optin = 0;
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, s.device()));
    if (bytes > static_cast<std::size_t>(optin))
      throw error("loom: attention's kernel needs " + std::to_string(bytes) + " bytes of shared memory per block; " +
                  "this device offers " + std::to_string(optin) + " (use a head size D <= 64)");
    if (heads > 65535 || p.batch > 65535)
      throw shape_error("loom: attention on the device takes at most 65535 heads and batches; got " +
                        std::to_string(heads) + " heads, batch " + std::to_string(p.batch));
    if (blocks <= 0 || heads <= 0 || p.batch <= 0) return;
    const auto kernel = attention_kernel<Body, Tl, Extras, P>;
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    launch_kernel(kernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads), static_cast<unsigned>(p.batch)),
                  static_cast<unsigned>(Tl::rows), bytes, s.get(), p);
#endif
  }
}

//! Runs the forward block bodies on Exec (the GPU: one kernel on the
//! current stream; or emulated on the host) with p's outputs o and lse set.
template <block_exec Exec, class P>
void run_forward(const P& p) {
  with_tiles(p.dim, [&](auto tl) {
    using Tl = decltype(tl);
    run_blocks<Exec, body<body_kind::forward>, Tl, 0>(p, p.sq, p.heads, forward_smem<Tl>);
  });
}

//! Runs the backward block bodies on Exec: dq (and D, and the partial sums
//! of the extra arguments read at h or q) over query blocks, then dk and dv
//! (and the partial sums of those read at kv) over key blocks, then each
//! extra argument's gradient (dextra[j], extents[j] values along axes[j]).
//! p's outputs dq, dk, dv and scratch row_d, extra_partial, key_partial set.
template <block_exec Exec, int Extras, class P>
void run_backward(const P& p, const extra_axis* axes, const index_t* extents, decltype(P::scale)* const* dextra) {
  with_tiles(p.dim, [&](auto tl) {
    using Tl = decltype(tl);
    run_blocks<Exec, body<body_kind::dq>, Tl, Extras>(p, p.sq, p.heads, dq_smem<Tl>);
    run_blocks<Exec, body<body_kind::dkdv>, Tl, Extras>(p, p.skv, p.kv_heads, dkdv_smem<Tl>);
  });
  for (int j = 0; j < Extras; ++j) {
    const extra_gradient_fn<P> f{p, axes[j], j, Extras, dextra[j]};
    if constexpr (Exec == block_exec::emulated) {
      for (index_t i = 0; i < extents[j]; ++i) f(i);
    } else {
#if LOOM_CUDA_COMPILER
      device_for_each(extents[j], f, current_stream());
#endif
    }
  }
}
}  // namespace loom::detail::attn
