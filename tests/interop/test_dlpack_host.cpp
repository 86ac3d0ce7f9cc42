// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "dlpack_cases.inl"

using Catch::Matchers::Message;

namespace {
// What every import below asks for, and the start of its messages.
const std::string f32_2 = "loom: from_dlpack<float32, 2, host>: ";

// Imports p's versioned tensor as from_dlpack<float, 2, host>, which must
// throw E with `text` and call the deleter once.
template <class E>
void require_rejected(test_dlpack::producer& p, const std::string& text) {
  REQUIRE_THROWS_MATCHES((loom::from_dlpack<float, 2, loom::host>(&p.versioned)), E, Message(text));
  CHECK(p.deletes == 1);
}
}  // namespace

TEST_CASE("from_dlpack names what it cannot take and consumes the tensor anyway", "[interop]") {
  std::vector<float> data(3 * 5 + 1);
  const dl::dl_device cpu{1, 0};
  const dl::dl_data_type f32{2, 32, 1};
  SECTION("null pointer") {
    REQUIRE_THROWS_MATCHES((loom::from_dlpack<float, 2, loom::host>(static_cast<dl::managed_tensor*>(nullptr))),
                           loom::value_error, Message(f32_2 + "got a null pointer"));
  }
  SECTION("another major version: only its deleter is used") {
    test_dlpack::producer p(data.data(), cpu, f32, {3, 5}, {});
    p.versioned.version = {2, 1};
    p.versioned.dl_tensor.ndim = -77;  // a 2.x layout need not have anything readable there
    require_rejected<loom::value_error>(
        p, f32_2 +
               "the DLPack tensor has major version 2.1; loom reads major version 1 (the tensor's deleter has "
               "been called)");
  }
  SECTION("vector lanes") {
    test_dlpack::producer p(data.data(), cpu, {2, 32, 4}, {3, 5}, {});
    require_rejected<loom::dtype_error>(
        p, f32_2 +
               "the DLPack tensor has vector elements (code 2 = kDLFloat, 32 bits, 4 lanes); loom reads scalar "
               "elements (1 lane)");
  }
  SECTION("another loom dtype") {
    test_dlpack::producer p(data.data(), cpu, {0, 32, 1}, {3, 5}, {});
    require_rejected<loom::dtype_error>(p, f32_2 +
                                               "the DLPack tensor holds int32 (code 0 = kDLInt, 32 bits, 1 lane); "
                                               "expected float32 (code 2 = kDLFloat, 32 bits, 1 lane)");
  }
  SECTION("an fp8 dtype where float32 is expected") {
    test_dlpack::producer p(data.data(), cpu, {10, 8, 1}, {3, 5}, {});
    require_rejected<loom::dtype_error>(p, f32_2 +
                                               "the DLPack tensor holds float8_e4m3fn (code 10 = kDLFloat8_e4m3fn, "
                                               "8 bits, 1 lane); expected float32 (code 2 = kDLFloat, 32 bits, 1 "
                                               "lane)");
  }
  SECTION("one fp8 format where another is expected") {
    std::vector<loom::e4m3> codes(3 * 5);
    test_dlpack::producer p(codes.data(), cpu, {12, 8, 1}, {3, 5}, {});
    REQUIRE_THROWS_MATCHES((loom::from_dlpack<loom::e4m3, 2, loom::host>(&p.versioned)), loom::dtype_error,
                           Message("loom: from_dlpack<float8_e4m3fn, 2, host>: the DLPack tensor holds float8_e5m2 "
                                   "(code 12 = kDLFloat8_e5m2, 8 bits, 1 lane); expected float8_e4m3fn (code 10 = "
                                   "kDLFloat8_e4m3fn, 8 bits, 1 lane)"));
    CHECK(p.deletes == 1);
  }
  SECTION("a dtype loom does not have: complex64, int16, fp8 e4m3b11fnuz and e5m2fnuz, fp4, a code past DLPack 1.1") {
    for (const auto& [t, text] :
         {std::pair{dl::dl_data_type{5, 64, 1}, "code 5 = kDLComplex, 64 bits, 1 lane"},
          std::pair{dl::dl_data_type{0, 16, 1}, "code 0 = kDLInt, 16 bits, 1 lane"},
          std::pair{dl::dl_data_type{9, 8, 1}, "code 9 = kDLFloat8_e4m3b11fnuz, 8 bits, 1 lane"},
          std::pair{dl::dl_data_type{13, 8, 1}, "code 13 = kDLFloat8_e5m2fnuz, 8 bits, 1 lane"},
          std::pair{dl::dl_data_type{17, 4, 1}, "code 17 = kDLFloat4_e2m1fn, 4 bits, 1 lane"},
          std::pair{dl::dl_data_type{18, 8, 1}, "code 18, 8 bits, 1 lane"}}) {
      test_dlpack::producer p(data.data(), cpu, t, {3, 5}, {});
      require_rejected<loom::dtype_error>(
          p, f32_2 + "the DLPack tensor holds an element type loom does not have (" + text +
                 "; loom has bool, int8, uint8, int32, int64, float16, bfloat16, float32, float64, "
                 "float8_e4m3fn, float8_e5m2, float8_e8m0fnu); expected float32 (code 2 = kDLFloat, 32 bits, 1 lane)");
    }
  }
  SECTION("rank") {
    test_dlpack::producer p(data.data(), cpu, f32, {3, 1, 5}, {});
    require_rejected<loom::shape_error>(p, f32_2 + "the DLPack tensor has rank 3 (shape [3, 1, 5]); expected rank 2");
  }
  SECTION("read-only into a mutable view") {
    test_dlpack::producer p(data.data(), cpu, f32, {3, 5}, {});
    p.versioned.flags = dl::flag_read_only;
    require_rejected<loom::value_error>(p, f32_2 +
                                               "the DLPack tensor is read-only (flag READ_ONLY); import it with a "
                                               "const element type (from_dlpack<const T, ...>) or ask the producer "
                                               "for a writable copy");
  }
  SECTION("a device type loom does not know") {
    test_dlpack::producer p(data.data(), {4, 0}, f32, {3, 5}, {});  // kDLOpenCL
    require_rejected<loom::value_error>(
        p, f32_2 +
               "the DLPack tensor is on device type 4, which loom does not read; loom reads kDLCPU (1), "
               "kDLCUDAHost (3) and kDLCUDAManaged (13) into host views, kDLCUDA (2) and kDLCUDAManaged (13) "
               "into device views");
  }
  SECTION("CUDA device memory into a host view") {
    test_dlpack::producer p(data.data(), {2, 0}, f32, {3, 5}, {});
    require_rejected<loom::value_error>(p, f32_2 +
                                               "the DLPack tensor is in kDLCUDA (2) memory, which a host view cannot "
                                               "read; import it with Space = loom::device");
  }
  SECTION("host memory into a device view") {
    test_dlpack::producer p(data.data(), cpu, f32, {3, 5}, {});
    REQUIRE_THROWS_MATCHES((loom::from_dlpack<float, 2, loom::device>(&p.versioned)), loom::value_error,
                           Message("loom: from_dlpack<float32, 2, device>: the DLPack tensor is in kDLCPU (1) memory, "
                                   "which a device view cannot read; import it with Space = loom::host"));
    CHECK(p.deletes == 1);
  }
  SECTION("a negative extent") {
    test_dlpack::producer p(data.data(), cpu, f32, {3, -5}, {});
    require_rejected<loom::shape_error>(p, "loom: negative extent in shape [3, -5]");
  }
  SECTION("null shape") {
    test_dlpack::producer p(data.data(), cpu, f32, {3, 5}, {});
    p.versioned.dl_tensor.shape = nullptr;
    require_rejected<loom::value_error>(p, f32_2 + "the DLPack tensor has a null shape pointer");
  }
  SECTION("null data with elements") {
    test_dlpack::producer p(nullptr, cpu, f32, {3, 5}, {});
    require_rejected<loom::value_error>(p, f32_2 + "the DLPack tensor has a null data pointer and 15 elements");
  }
  SECTION("a byte offset that misaligns the elements") {
    test_dlpack::producer p(data.data(), cpu, f32, {3, 5}, {}, 2);
    require_rejected<loom::value_error>(
        p, f32_2 + "the first element (data + byte_offset 2) is not aligned to the 4 bytes of float32");
  }
}

TEST_CASE("from_dlpack into a device view without a GPU says there is none", "[interop]") {
  if (loom::gpu::is_available()) return;  // the [cuda] program checks device ids
  std::vector<float> data(15);
  test_dlpack::producer p(data.data(), {2, 0}, {2, 32, 1}, {3, 5}, {});
  REQUIRE_THROWS_MATCHES(
      (loom::from_dlpack<float, 2, loom::device>(&p.versioned)), loom::device_unavailable,
      Message("loom: from_dlpack of CUDA memory needs a GPU, but " + loom::gpu::unavailable_reason()));
  CHECK(p.deletes == 1);
}

TEST_CASE("pinned and managed host memory, rank 0 and empty tensors import", "[interop]") {
  double value = 2.5;
  for (const std::int32_t type : {3, 13}) {  // kDLCUDAHost, kDLCUDAManaged
    test_dlpack::producer p(&value, {type, 0}, {2, 64, 1}, {}, {});
    const auto x = loom::from_dlpack<double, 0, loom::host>(&p.legacy);
    CHECK(x.data() == &value);
    CHECK(x.view().item() == 2.5);
    CHECK(x.device().device_type == type);
  }
  test_dlpack::producer empty(nullptr, {1, 0}, {0, 64, 1}, {0, 7}, {});
  const auto e = loom::from_dlpack<std::int64_t, 2, loom::host>(&empty.versioned);
  CHECK(e.size() == 0);
  CHECK(e.extents() == loom::shape<2>{0, 7});
}

TEST_CASE("to_dlpack refuses a tensor without data and exports rank 0", "[interop]") {
  loom::host_tensor<float, 2> t({2, 2});
  auto moved = std::move(t);
  REQUIRE_THROWS_MATCHES(
      loom::to_dlpack(std::move(t)), loom::value_error,
      Message("loom: to_dlpack of a view or tensor without data (default-constructed or moved from)"));
  loom::host_tensor<std::int8_t, 0> s(loom::shape<0>{});
  s.data()[0] = -3;
  auto* m = loom::to_dlpack(std::move(s));
  CHECK(m->dl_tensor.ndim == 0);
  const auto x = loom::from_dlpack<std::int8_t, 0, loom::host>(m);
  CHECK(x.view().item() == -3);
}

TEST_CASE("DLPack stream values map to CUDA streams both ways without touching the GPU", "[interop]") {
  const auto fake = reinterpret_cast<cudaStream_t>(std::intptr_t{0x7f00});
  CHECK(dl::stream_argument(loom::stream_ref(nullptr, 0)) == 1);
  CHECK(dl::stream_argument(loom::stream_ref(cudaStreamLegacy, 0)) == 1);
  CHECK(dl::stream_argument(loom::stream_ref(cudaStreamPerThread, 0)) == 2);
  CHECK(dl::stream_argument(loom::stream_ref(fake, 0)) == 0x7f00);
  CHECK(dl::consumer_stream(1) == cudaStreamLegacy);
  CHECK(dl::consumer_stream(2) == cudaStreamPerThread);
  CHECK(dl::consumer_stream(0x7f00) == fake);
  REQUIRE_THROWS_MATCHES(dl::consumer_stream(0), loom::value_error,
                         Message("loom: DLPack stream 0 is not allowed (it is ambiguous); the consumer passes 1 for "
                                 "the legacy default stream, 2 for the per-thread default stream, or the stream's "
                                 "handle"));
  REQUIRE_THROWS_MATCHES(dl::consumer_stream(-1), loom::value_error,
                         Message("loom: DLPack stream -1 names no stream (-1 asks for no synchronization; other "
                                 "negative values are invalid)"));
  REQUIRE_THROWS_AS(dl::consumer_stream(-5), loom::value_error);
  // No synchronization asked for, or the producer's own stream: nothing to do (and no CUDA call).
  dl::make_ready_for(-1, loom::stream_ref(fake, 0));
  dl::make_ready_for(1, loom::stream_ref(nullptr, 0));
  dl::make_ready_for(0x7f00, loom::stream_ref(fake, 0));
  REQUIRE_THROWS_AS(dl::make_ready_for(0, loom::stream_ref(fake, 0)), loom::value_error);
}
