// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
#include "tensor_cases.inl"

#include <unistd.h>

#include <filesystem>
#include <string>

TEST_CASE("device tensors free on their stream and memory stats return to the start", "[tensor][cuda]") {
  const int dev = loom::gpu::current_device();
  const auto start = loom::device_memory_stats(dev);
  {
    loom::stream s;
    loom::stream_guard on(s);
    loom::device_tensor<float, 2> t({1000, 257});
    CHECK(t.stream() == loom::stream_ref(s));
    const auto mid = loom::device_memory_stats(dev);
    CHECK(mid.in_use == start.in_use + 1000 * 257 * sizeof(float));
    CHECK(mid.allocations == start.allocations + 1);
    CHECK(mid.peak >= mid.in_use);
    loom::fill(t, 1.0f);
  }
  loom::gpu::device_synchronize();
  const auto end = loom::device_memory_stats(dev);
  CHECK(end.in_use == start.in_use);
  CHECK(end.allocations == start.allocations);
}

TEST_CASE("an allocation larger than the device throws out_of_memory and leaks nothing", "[tensor][cuda]") {
  const int dev = loom::gpu::current_device();
  const auto start = loom::device_memory_stats(dev);
  const auto total = loom::gpu::properties(dev).total_memory;
  const loom::index_t n = static_cast<loom::index_t>(total / sizeof(float)) * 2;
  try {
    loom::device_tensor<float, 1> t({n});
    FAIL("no exception");
  } catch (const loom::out_of_memory& e) {
    CHECK(e.requested() == static_cast<std::size_t>(n) * sizeof(float));
    CHECK(e.total() == total);
    CHECK_THAT(std::string(e.what()), Contains(std::to_string(e.requested())));
  }
  CHECK(loom::device_memory_stats(dev).in_use == start.in_use);
  loom::device_tensor<float, 1> ok({16});  // the device still works
  loom::fill(ok, 1.0f);
  CHECK(loom::to_host(ok)(15) == 1.0f);
}

TEST_CASE("copy_async with pinned memory overlaps and events order it", "[tensor][cuda]") {
  loom::stream s;
  loom::host_tensor<float, 1> src({1 << 20}, loom::host_memory::pinned);
  loom::host_tensor<float, 1> dst({1 << 20}, loom::host_memory::pinned);
  CHECK(src.is_pinned());
  for (loom::index_t i = 0; i < src.size(); ++i) src(i) = static_cast<float>(i % 977);
  loom::device_tensor<float, 1> d({1 << 20}, s);
  loom::event start, stop;
  start.record(s);
  loom::copy_async(src, d, s);
  loom::copy_async(d, dst, s);
  stop.record(s);
  stop.synchronize();
  CHECK(stop.query());
  CHECK(loom::elapsed_ms(start, stop) >= 0.0f);
  for (loom::index_t i = 0; i < dst.size(); ++i) REQUIRE(dst(i) == static_cast<float>(i % 977));
}

TEST_CASE("stream_guard makes a stream current and restores the previous one", "[tensor][cuda]") {
  const auto outer = loom::current_stream();
  loom::stream a, b;
  {
    loom::stream_guard ga(a);
    CHECK(loom::current_stream() == loom::stream_ref(a));
    {
      loom::stream_guard gb(b);
      CHECK(loom::current_stream() == loom::stream_ref(b));
    }
    CHECK(loom::current_stream() == loom::stream_ref(a));
  }
  CHECK(loom::current_stream() == outer);
  const auto p = loom::gpu::properties();
  CHECK(p.sm_count > 0);
  CHECK(p.total_memory > 0);
  CHECK(!p.name.empty());
  CHECK(p.cc_major >= 5);
  CHECK(loom::gpu::device_count() >= 1);
}

TEST_CASE("save_npy of a device tensor: no data throws value_error, an empty tensor saves as an empty array",
          "[tensor][io][cuda]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("loom_cuda_npy_" + std::to_string(::getpid()) + ".npy")).string();
  REQUIRE_THROWS_AS(loom::save_npy(path, loom::device_tensor<float, 2>()), loom::value_error);
  loom::device_tensor<float, 1> moved({5});
  const auto taken = std::move(moved);
  REQUIRE_THROWS_AS(loom::save_npy(path, moved), loom::value_error);
  CHECK(!std::filesystem::exists(path));
  loom::save_npy(path, loom::device_tensor<double, 2>({3, 0}));
  CHECK(loom::load_npy<double, 2>(path).extents() == loom::shape<2>{3, 0});
  auto x = loom::full<float, 2, loom::device>({3, 5}, 2.5f);
  loom::save_npy(path, x);
  const auto back = loom::load_npy<float, 2>(path);
  CHECK(back(2, 4) == 2.5f);
  std::filesystem::remove(path);
}
