// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
#include "dlpack_cases.inl"

using Catch::Matchers::Message;

TEST_CASE("from_dlpack refuses device memory of another device and into host views", "[interop][cuda]") {
  loom::device_tensor<float, 2> t({3, 5});
  const int current = loom::gpu::current_device();
  test_dlpack::producer p(t.data(), {2, current + 1}, {2, 32, 1}, {3, 5}, {});
  REQUIRE_THROWS_MATCHES(
      (loom::from_dlpack<float, 2, loom::device>(&p.versioned)), loom::value_error,
      Message("loom: from_dlpack<float32, 2, device>: the DLPack tensor is on CUDA device " +
              std::to_string(current + 1) + ", but the current device is " + std::to_string(current) +
              "; make device " + std::to_string(current + 1) +
              " current first (loom::gpu::set_device, or a stream_guard on a stream of that device)"));
  CHECK(p.deletes == 1);
  test_dlpack::producer q(t.data(), {2, current}, {2, 32, 1}, {3, 5}, {});
  REQUIRE_THROWS_AS((loom::from_dlpack<float, 2, loom::host>(&q.legacy)), loom::value_error);
  CHECK(q.deletes == 1);
}

TEST_CASE("managed memory imports into both spaces and exports as kDLCUDAManaged", "[interop][cuda]") {
  float* data = nullptr;
  LOOM_CUDA_CHECK(cudaMallocManaged(&data, 7 * sizeof(float)));
  for (int i = 0; i < 7; ++i) data[i] = static_cast<float>(i) * 0.5f;
  const int current = loom::gpu::current_device();
  {
    test_dlpack::producer p(data, {13, current}, {2, 32, 1}, {7}, {});
    const auto d = loom::from_dlpack<float, 1, loom::device>(&p.versioned);
    auto* m = loom::to_dlpack(d.view(), d);
    CHECK(m->dl_tensor.device.device_type == 13);
    CHECK(m->dl_tensor.device.device_id == current);
    const auto h = loom::from_dlpack<const float, 1, loom::host>(&p.legacy);
    CHECK(h.view()(6) == 3.0f);
    m->deleter(m);
  }
  LOOM_CUDA_CHECK(cudaFree(data));
}

TEST_CASE("make_ready_for orders the consumer's stream after loom's work, without a host wait", "[interop][cuda]") {
  loom::stream producer, consumer;
  loom::device_tensor<float, 1> t({1 << 20}, producer);
  {
    loom::stream_guard on(producer);
    loom::fill(t, 3.0f);
    CHECK(loom::dlpack::stream_argument() == reinterpret_cast<std::intptr_t>(producer.get()));
    loom::dlpack::make_ready_for(reinterpret_cast<std::intptr_t>(consumer.get()));
  }
  // The consumer reads on its own stream; what it sees is the producer's fill.
  loom::host_tensor<float, 1> h({1 << 20}, loom::host_memory::pinned);
  loom::copy_async(t, h, consumer);
  consumer.synchronize();
  for (loom::index_t i = 0; i < h.size(); i += 4099) REQUIRE(h(i) == 3.0f);
}
