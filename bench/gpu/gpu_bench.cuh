// SPDX-License-Identifier: Apache-2.0
// What loom's GPU benchmark programs share: the timing method (CUDA events
// after warm-up, median of many samples, each sample one call on each of
// several rotating buffer sets so the working set exceeds L2), the copy
// bandwidth measured in the same run (the ceiling), and random never-zero
// data generated on the device by a hash that the host can recompute for the
// reference checks. Not part of the library.
// A host compiler may include it too (a program's host self-test in a .cpp
// file): then what needs nvcc is left out (LOOM_CUDA_COMPILER 0: the copy
// ceiling, and hash_fill of device tensors).
#pragma once

#include <loom/config.hpp>

#if LOOM_CUDA_COMPILER
#include <thrust/execution_policy.h>
#include <thrust/tabulate.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <loom/loom.hpp>

#include "../bench_util.hpp"

namespace loom_bench {

//! Warm-up samples and timed samples (a sample calls the work once per set).
struct gpu_timing {
  int warmup = 3;
  int runs = 25;
};

//! Runs f() at least `at_least` times, and until `ms` milliseconds of it
//! have run on the GPU (events around each call, at most 10000 calls): an
//! idle GPU's clocks are low (an H200 read 345 MHz idle) and ramp up under
//! load, so what is timed first would otherwise run slower than the rest.
template <class F>
void warm_up_for(double ms, int at_least, F&& f) {
  loom::event start, stop;
  double spent = 0;
  for (int i = 0; i < 10000 && (i < at_least || spent < ms); ++i) {
    start.record();
    f();
    stop.record();
    stop.synchronize();
    spent += static_cast<double>(loom::elapsed_ms(start, stop));
  }
}

//! The median over `t.runs` samples of the time of one call, in ms. Each
//! sample runs f(0), ..., f(sets - 1) between two events on the current
//! stream, so consecutive calls touch different memory and launch overhead
//! counts as it does in real use.
template <class F>
double time_rotated_ms(int sets, const gpu_timing& t, F&& f) {
  for (int w = 0; w < t.warmup; ++w)
    for (int s = 0; s < sets; ++s) f(s);
  loom::event start, stop;
  std::vector<double> ms;
  for (int r = 0; r < t.runs; ++r) {
    start.record();
    for (int s = 0; s < sets; ++s) f(s);
    stop.record();
    stop.synchronize();
    ms.push_back(static_cast<double>(loom::elapsed_ms(start, stop)) / sets);
  }
  return median(ms);
}

//! The median and quartiles of one implementation's samples, in ms per call.
struct sample_stats {
  double median = 0, p25 = 0, p75 = 0;
};

//! Times `ways` implementations of the same work side by side: f(k) runs
//! implementation k once. After warm-up rounds (at least t.warmup, and
//! 100 ms of them unless t.warmup is 1 or less: the GPU may have idled, its
//! clocks down, while the host computed references), every round takes
//! one sample of each (`calls` calls between two events), in an order that
//! reverses every round (0..ways-1, then ways-1..0), so the clocks' ramp, the
//! GPU's warmth and any drift fall on all of them alike; a decision of a few
//! percent between them does not depend on which ran first.
template <class F>
std::vector<sample_stats> time_interleaved_ms(int ways, int calls, const gpu_timing& t, F&& f) {
  warm_up_for(t.warmup > 1 ? 100.0 : 0.0, t.warmup, [&] {
    for (int k = 0; k < ways; ++k)
      for (int c = 0; c < calls; ++c) f(k);
  });
  loom::event start, stop;
  std::vector<std::vector<double>> ms(static_cast<std::size_t>(ways));
  for (int r = 0; r < t.runs; ++r)
    for (int j = 0; j < ways; ++j) {
      const int k = r % 2 == 0 ? j : ways - 1 - j;
      start.record();
      for (int c = 0; c < calls; ++c) f(k);
      stop.record();
      stop.synchronize();
      ms[static_cast<std::size_t>(k)].push_back(static_cast<double>(loom::elapsed_ms(start, stop)) / calls);
    }
  std::vector<sample_stats> out;
  for (auto& v : ms) {
    std::sort(v.begin(), v.end());
    out.push_back({median(v), v[v.size() / 4], v[(3 * v.size()) / 4]});
  }
  return out;
}

//! Keeps the GPU busy with device-to-device copies of x into y for at least
//! `ms` milliseconds (warm_up_for), before a program's first measurement.
template <class Tensor>
void warm_up_clocks(const Tensor& x, Tensor& y, double ms) {
  const cudaStream_t s = loom::current_stream().get();
  const auto bytes = static_cast<std::size_t>(x.size()) * sizeof(typename Tensor::value_type);
  warm_up_for(ms, 1, [&] {
    for (int c = 0; c < 8; ++c) LOOM_CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), bytes, cudaMemcpyDeviceToDevice, s));
  });
}

//! How many buffer sets of `set_bytes` to rotate through so that together
//! they exceed twice the L2 cache; at least 1, and at most what fits in half
//! of the free device memory.
inline int rotation_sets(double set_bytes) {
  const double l2 = static_cast<double>(loom::gpu::properties().l2_cache_bytes);
  // The memory loom's pool keeps for reuse counts as used: give it back first.
  loom::gpu::device_synchronize();
  loom::release_pool_memory();
  std::size_t free_b = 0, total_b = 0;
  LOOM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int want = static_cast<int>(std::ceil(2.0 * l2 / set_bytes));
  const int fit = static_cast<int>(0.5 * static_cast<double>(free_b) / set_bytes);
  return std::max(1, std::min(want, fit));
}

//! A random value in +-[0.25, 2) from (seed, i): never zero, the same on the
//! host and the device (splitmix64), so references need no copy of inputs.
LOOM_HD float hash_value(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  // 21 bits: 1.75 * u and 0.25 + 1.75 * u are exact in float, so the value is
  // the same with or without a fused multiply-add (nvcc contracts, g++ not).
  const float u = static_cast<float>(z >> 43) * (1.0f / 2097152.0f);
  const float v = 0.25f + 1.75f * u;
  return (z & 1) ? -v : v;
}

//! The element a tensor filled with `seed` holds at linear index i, as a
//! float on the host (rounded to T first, as the device stored it).
template <class T>
float hashed(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(T(hash_value(seed, i)));
}

template <class T>
struct hash_fill_fn {
  std::uint64_t seed;
  LOOM_HD T operator()(std::uint64_t i) const { return T(hash_value(seed, i)); }
};

//! Fills a contiguous tensor with hash_value(seed, i): on the current stream
//! for a device tensor, a plain loop for a host one (the self-tests).
template <class Tensor>
void hash_fill(Tensor& t, std::uint64_t seed) {
  using X = std::remove_cvref_t<Tensor>;
  using T = typename X::value_type;
  if constexpr (std::is_same_v<typename X::space, loom::host>) {
    for (loom::index_t i = 0; i < t.size(); ++i) t.data()[i] = hash_fill_fn<T>{seed}(static_cast<std::uint64_t>(i));
  } else {
#if LOOM_CUDA_COMPILER
    thrust::tabulate(thrust::cuda::par_nosync.on(loom::current_stream().get()), t.data(), t.data() + t.size(),
                     hash_fill_fn<T>{seed});
    LOOM_CUDA_CHECK(cudaGetLastError());
#else
    static_assert(sizeof(T) == 0, "hash_fill of a device tensor needs nvcc");
#endif
  }
}

//! Poisons a device tensor (NaN everywhere) so an unwritten element fails the check.
template <class Tensor>
void poison(Tensor& t) {
  using T = typename std::remove_cvref_t<Tensor>::value_type;
  loom::fill(t, T(std::nanf("")));
}

//! The device-to-device copy bandwidth (bytes read + bytes written per
//! second, in GB/s) of cudaMemcpyAsync over 1 GiB, and of the same copy
//! written as a loom assignment `y = x`. Printed and recorded. First the
//! GPU's clocks are brought up (warm_up_clocks, 200 ms). `calls` copies per
//! sample: a program that times its work with several calls back to back
//! (bench_reduce_gpu) times its ceiling the same way, so the launch gaps
//! count alike on both sides of "% of copy".
struct copy_ceiling {
  double memcpy_gbps = 0, loom_gbps = 0;
};

#if LOOM_CUDA_COMPILER
inline copy_ceiling measure_copy(const std::string& bench, const options& opt, const gpu_timing& t, int calls = 1) {
  const loom::index_t n = opt.quick ? (loom::index_t{1} << 22) : (loom::index_t{1} << 28);  // floats
  loom::device_tensor<float, 1> x({n}), y({n});
  hash_fill(x, 1);
  warm_up_clocks(x, y, opt.quick ? 20.0 : 200.0);
  const double bytes = 2.0 * static_cast<double>(n) * sizeof(float);
  const cudaStream_t s = loom::current_stream().get();
  copy_ceiling c;
  record r{bench, "copy", std::to_string(n), "f32", "cudaMemcpyAsync D2D"};
  r.bytes = bytes;
  r.ms = time_rotated_ms(calls, t, [&](int) {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), static_cast<std::size_t>(n) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, s));
  });
  c.memcpy_gbps = gbps(r);
  r.copy_gbps = c.memcpy_gbps;
  print_row(r);
  emit_json(opt.json_path, r);
  record l{bench, "copy", std::to_string(n), "f32", "loom y = x"};
  l.bytes = bytes;
  l.ms = time_rotated_ms(calls, t, [&](int) { loom::assign(y, x); });
  c.loom_gbps = gbps(l);
  l.copy_gbps = c.memcpy_gbps;
  const auto yh = loom::to_host(y.view().slice(loom::range(0, 4096)));
  error_meter m{0, 0};
  for (loom::index_t i = 0; i < 4096; ++i) m.add(yh.data()[i], hashed<float>(1, static_cast<std::uint64_t>(i)));
  l.check = m.worst == 0 ? "ok" : "FAIL (copy differs)";
  print_row(l);
  emit_json(opt.json_path, l);
  return c;
}
#endif  // LOOM_CUDA_COMPILER

//! What every GPU benchmark program carries: its options, the timing, the
//! copy ceiling of this run, and whether a check failed.
struct bench_common {
  options opt;
  gpu_timing timing;
  copy_ceiling copy;
  bool failed = false;
};

//! Says why there is nothing to measure and gives the exit code 77 (ctest's
//! "skipped") when no GPU can be used.
inline int no_gpu(const char* program) {
  std::printf("%s: no GPU is present (%s); nothing measured\n", program, loom::gpu::unavailable_reason().c_str());
  return 77;
}

//! Short names for the element types in tables and JSON.
template <class T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, loom::bf16>) return "bf16";
  if constexpr (std::is_same_v<T, loom::half>) return "f16";
  return "?";
}
}  // namespace loom_bench
