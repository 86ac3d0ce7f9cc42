// SPDX-License-Identifier: Apache-2.0
// loom's reductions and scans against CUB called directly, and against the
// device-to-device copy bandwidth measured in the same run: sum and max over
// 1 GiB of float (vs cub::DeviceReduce::Sum / Max), and cumsum over 256 MiB
// (vs cub::DeviceScan::InclusiveSum). Targets: within 3% of direct CUB, and a
// full reduction at >= 90% of the copy bandwidth (bytes read / time). CUDA
// events after warm-up, median of many runs. Without a GPU it says so and
// exits 77 (ctest's "skipped").
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <loom/loom.hpp>
#include <loom/reduce/reduce.hpp>
#include <loom/reduce/scan.hpp>

namespace {
constexpr int warmup = 5;
constexpr int runs = 30;

template <class F>
double median_ms(F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<float> t;
  loom::event start, stop;
  for (int i = 0; i < runs; ++i) {
    start.record();
    f();
    stop.record();
    stop.synchronize();
    t.push_back(loom::elapsed_ms(start, stop));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// One CUB algorithm with its temp storage allocated once, outside the timing.
struct cub_temp {
  void* p = nullptr;
  std::size_t bytes = 0;
  void ensure(std::size_t b) {
    if (b <= bytes) return;
    if (p) LOOM_CUDA_CHECK(cudaFree(p));
    LOOM_CUDA_CHECK(cudaMalloc(&p, b));
    bytes = b;
  }
  ~cub_temp() {
    if (p) (void)cudaFree(p);
  }
};

void report(const char* what, double ms, double gb, double ref_ms, double copy_gbs) {
  std::printf("  %-40s %8.3f ms  %7.1f GB/s  %6.1f%% of direct CUB  %6.1f%% of copy bandwidth\n", what, ms, gb / ms * 1e3,
              100.0 * ref_ms / ms, 100.0 * (gb / ms * 1e3) / copy_gbs);
}
}  // namespace

int main() {
  if (!loom::gpu::is_available()) {
    std::printf("no GPU: %s; the reduction benchmark needs one\n", loom::gpu::unavailable_reason().c_str());
    return 77;
  }
  const auto props = loom::gpu::properties();
  std::printf("%s, %d SMs\n", props.name.c_str(), props.sm_count);
  const loom::index_t n = loom::index_t{1} << 28;  // 1 GiB of float
  loom::device_tensor<float, 1> x({n});
  loom::fill(x, 1.0f);
  loom::device_tensor<float, 1> copy_dst({n});
  loom::device_tensor<float, 0> out(loom::shape<0>{});
  const cudaStream_t s = loom::current_stream().get();
  const double gb = static_cast<double>(n) * sizeof(float) / 1e9;

  // The floor: a device-to-device copy moves 2 bytes per byte read.
  const double copy_ms = median_ms([&] {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(copy_dst.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  });
  const double copy_gbs = 2 * gb / copy_ms * 1e3;
  std::printf("device-to-device copy of 1 GiB: %.3f ms, %.1f GB/s (read + write)\n", copy_ms, copy_gbs);

  cub_temp tmp;
  std::size_t b = 0;
  LOOM_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, b, x.data(), out.data(), n, s));
  tmp.ensure(b);
  const double cub_sum = median_ms([&] {
    std::size_t bytes = tmp.bytes;
    LOOM_CUDA_CHECK(cub::DeviceReduce::Sum(tmp.p, bytes, x.data(), out.data(), n, s));
  });
  LOOM_CUDA_CHECK(cub::DeviceReduce::Max(nullptr, b, x.data(), out.data(), n, s));
  tmp.ensure(b);
  const double cub_max = median_ms([&] {
    std::size_t bytes = tmp.bytes;
    LOOM_CUDA_CHECK(cub::DeviceReduce::Max(tmp.p, bytes, x.data(), out.data(), n, s));
  });
  const double loom_sum = median_ms([&] { out = loom::sum(x); });
  const double loom_max = median_ms([&] { out = loom::max(x); });
  std::printf("full reductions over 1 GiB of float:\n");
  report("cub::DeviceReduce::Sum", cub_sum, gb, cub_sum, copy_gbs / 2);
  report("loom::sum(x)", loom_sum, gb, cub_sum, copy_gbs / 2);
  report("cub::DeviceReduce::Max", cub_max, gb, cub_max, copy_gbs / 2);
  report("loom::max(x)", loom_max, gb, cub_max, copy_gbs / 2);
  std::printf("  (sum of 2^28 ones: %.0f)\n", static_cast<double>(loom::item(loom::sum(x))));

  // Scans: 256 MiB in, 256 MiB out.
  const loom::index_t m = loom::index_t{1} << 26;
  auto xs = x.view().slice(loom::range(0, m));
  loom::device_tensor<float, 1> scan_out({m});
  LOOM_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, b, x.data(), scan_out.data(), m, s));
  tmp.ensure(b);
  const double cub_scan = median_ms([&] {
    std::size_t bytes = tmp.bytes;
    LOOM_CUDA_CHECK(cub::DeviceScan::InclusiveSum(tmp.p, bytes, x.data(), scan_out.data(), m, s));
  });
  loom::device_tensor<float, 1> loom_scan_out;
  const double loom_scan = median_ms([&] { loom_scan_out = loom::cumsum(xs, 0); });
  const double sgb = 2.0 * static_cast<double>(m) * sizeof(float) / 1e9;
  std::printf("inclusive scan of 256 MiB of float (read + write):\n");
  report("cub::DeviceScan::InclusiveSum", cub_scan, sgb, cub_scan, copy_gbs);
  report("loom::cumsum(x, 0)", loom_scan, sgb, cub_scan, copy_gbs);
  return 0;
}
