// SPDX-License-Identifier: Apache-2.0
// DLPack behaviours checked in both spaces. The including file defines
// LOOM_TEST_SPACE (loom::host or loom::device) and LOOM_TEST_TAG.
#include <array>
#include <vector>

#include "loom_test.hpp"
#include "producer.hpp"

using Catch::Matchers::Contains;
using loom::index_t;
using loom::none;
using loom::range;
using loom::whole;
namespace dl = loom::dlpack;
using space_t = LOOM_TEST_SPACE;

#define LOOM_ALL_DTYPES                                                                                        \
  bool, std::int8_t, std::uint8_t, std::int32_t, std::int64_t, loom::half, loom::bf16, float, double, loom::e4m3, \
      loom::e5m2, loom::e8m0

namespace {
constexpr bool on_device = std::is_same_v<space_t, loom::device>;
// The device type a loom tensor of space_t exports as, by the specification's numbering.
constexpr std::int32_t space_device_type = on_device ? 2 : 1;

// Where a tensor of space_t is, as a DLPack producer describes it.
dl::dl_device here() { return {space_device_type, on_device ? loom::gpu::current_device() : 0}; }

template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space(const loom::host_tensor<T, R>& h) {
  if constexpr (on_device)
    return loom::to_device(h);
  else
    return h;
}

template <class T, std::size_t R>
loom::host_tensor<T, R> random_host(const loom::shape<R>& s, std::mt19937_64& g) {
  loom::host_tensor<T, R> h(s);
  loom_test::randomize(h.view(), g);
  return h;
}

// The shape, strides, dtype, device and byte offset that a DLPack consumer
// reads from an export of `expected_extents` / `expected_strides`.
template <class T, std::size_t R>
void check_described(const dl::dl_tensor& t, const void* data, const loom::shape<R>& extents,
                     const loom::shape<R>& strides) {
  const auto [code, bits] = test_dlpack::code_and_bits<T>();
  CHECK(t.data == data);
  CHECK(t.byte_offset == 0);
  CHECK(t.device.device_type == here().device_type);
  CHECK(t.device.device_id == here().device_id);
  CHECK(t.ndim == static_cast<std::int32_t>(R));
  CHECK(t.dtype.code == code);
  CHECK(t.dtype.bits == bits);
  CHECK(t.dtype.lanes == 1);
  for (std::size_t d = 0; d != R; ++d) {
    CHECK(t.shape[d] == extents[d]);
    CHECK(t.strides[d] == strides[d]);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("to_dlpack then from_dlpack shares the tensor's memory for every dtype", "[interop]" LOOM_TEST_TAG,
                   LOOM_ALL_DTYPES) {
  std::mt19937_64 g(loom_test::seed_for("dlpack dtypes"));
  for (const auto s : {loom::shape<2>{1, 1}, loom::shape<2>{7, 33}, loom::shape<2>{257, 3}}) {
    const auto h = random_host<TestType, 2>(s, g);
    const loom::shape<2> row_major{s[1], 1};
    {  // versioned
      auto t = in_space(h);
      const TestType* p = t.data();
      dl::managed_tensor_versioned* m = loom::to_dlpack(std::move(t));
      CHECK(m->version.major == 1);
      CHECK(m->flags == 0);
      check_described<TestType>(m->dl_tensor, p, s, row_major);
      const auto x = loom::from_dlpack<TestType, 2, space_t>(m);
      CHECK(x.data() == p);
      CHECK(x.extents() == s);
      CHECK(x.strides() == row_major);
      CHECK_FALSE(x.read_only());
      const auto back = loom::to_host(x.view());
      for (index_t i = 0; i < h.size(); ++i) REQUIRE(loom_test::same_bits(back.data()[i], h.data()[i]));
    }
    {  // legacy
      auto t = in_space(h);
      const TestType* p = t.data();
      dl::managed_tensor* m = loom::to_dlpack_legacy(std::move(t));
      check_described<TestType>(m->dl_tensor, p, s, row_major);
      const auto x = loom::from_dlpack<TestType, 2, space_t>(m);
      CHECK(x.data() == p);
      CHECK(x.flags() == 0);
      const auto back = loom::to_host(x.view());
      for (index_t i = 0; i < h.size(); ++i) REQUIRE(loom_test::same_bits(back.data()[i], h.data()[i]));
    }
  }
}

TEST_CASE("a strided, reversed and permuted view exports its strides in elements", "[interop]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dlpack strides"));
  const auto h = random_host<float, 3>({5, 7, 3}, g);
  auto t = in_space(h);
  // Rows 4, 2, 0 (stride -42), all 7 columns (3), channels 1..2 (1); then axes (2, 0, 1).
  const auto v = t.slice(range(none, none, -2), whole, range(1, 3)).permute({2, 0, 1});
  const float* first = t.data() + 4 * 21 + 1;
  auto* m = loom::to_dlpack(v, std::move(t));  // the view, owning the tensor
  check_described<float>(m->dl_tensor, first, loom::shape<3>{2, 3, 7}, loom::shape<3>{1, -42, 3});
  const auto x = loom::from_dlpack<float, 3, space_t>(m);
  CHECK(x.data() == first);
  const auto back = loom::to_host(x.view());
  for (index_t a = 0; a < 2; ++a)
    for (index_t b = 0; b < 3; ++b)
      for (index_t c = 0; c < 7; ++c) REQUIRE(back(a, b, c) == h(4 - 2 * b, c, 1 + a));
}

TEST_CASE("from_dlpack applies the byte offset and reads null strides as row-major", "[interop]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dlpack byte offset"));
  const auto h = random_host<double, 1>({3 + 5 * 11}, g);
  auto t = in_space(h);
  for (const bool versioned : {true, false}) {
    test_dlpack::producer p(t.data(), here(), {2, 64, 1}, {5, 11}, {}, 3 * sizeof(double));
    {
      const auto x = versioned ? loom::from_dlpack<double, 2, space_t>(&p.versioned)
                               : loom::from_dlpack<double, 2, space_t>(&p.legacy);
      CHECK(x.data() == t.data() + 3);
      CHECK(x.strides() == loom::shape<2>{11, 1});
      const auto back = loom::to_host(x.view());
      for (index_t i = 0; i < 5; ++i)
        for (index_t j = 0; j < 11; ++j) REQUIRE(back(i, j) == h(3 + i * 11 + j));
      CHECK(p.deletes == 0);
    }
    CHECK(p.deletes == 1);
  }
}

TEST_CASE("the producer's deleter runs once, when the last copy of the import goes", "[interop]" LOOM_TEST_TAG) {
  auto t = in_space(loom::host_tensor<std::int32_t, 2>({3, 4}));
  test_dlpack::producer p(t.data(), here(), {0, 32, 1}, {3, 4}, {4, 1});
  {
    auto a = loom::from_dlpack<std::int32_t, 2, space_t>(&p.versioned);
    auto b = a;
    {
      const auto c = b;
      b.reset();
      CHECK_FALSE(b.holds_tensor());
      CHECK(c.data() == t.data());
    }
    CHECK(p.deletes == 0);
    auto d = std::move(a);
    CHECK(p.deletes == 0);
    CHECK(d.holds_tensor());
  }
  CHECK(p.deletes == 1);
}

TEST_CASE("a failed import has called the deleter once before the exception leaves", "[interop]" LOOM_TEST_TAG) {
  auto t = in_space(loom::host_tensor<float, 2>({3, 4}));
  test_dlpack::producer p(t.data(), here(), {2, 32, 1}, {3, 4}, {4, 1});
  REQUIRE_THROWS_AS((loom::from_dlpack<float, 3, space_t>(&p.versioned)), loom::shape_error);
  CHECK(p.deletes == 1);
  test_dlpack::producer q(t.data(), here(), {2, 32, 1}, {3, 4}, {4, 1});
  REQUIRE_THROWS_AS((loom::from_dlpack<double, 2, space_t>(&q.legacy)), loom::dtype_error);
  CHECK(q.deletes == 1);
}

TEST_CASE("from_dlpack given the tensor's name says it in every message", "[interop]" LOOM_TEST_TAG) {
  auto t = in_space(loom::host_tensor<float, 2>({3, 4}));
  test_dlpack::producer p(t.data(), here(), {2, 32, 1}, {3, 4}, {4, 1});
  REQUIRE_THROWS_WITH((loom::from_dlpack<const double, 2, space_t>(&p.versioned, "input w")),
                      Contains(" of input w: the DLPack tensor holds float32"));
  test_dlpack::producer q(t.data(), here(), {2, 32, 1}, {3, 4}, {4, 1});
  REQUIRE_THROWS_WITH((loom::from_dlpack<float, 3, space_t>(&q.legacy, "input x")),
                      Contains(" of input x: the DLPack tensor has rank 2"));
  test_dlpack::producer r(t.data(), here(), {2, 32, 1}, {3, 4}, {4, 1});
  REQUIRE_THROWS_WITH((loom::from_dlpack<float, 3, space_t>(&r.versioned)),
                      Contains(", " + std::string(std::is_same_v<space_t, loom::host> ? "host" : "device") +
                                        ">: the DLPack tensor has rank 2"));
  CHECK(p.deletes + q.deletes + r.deletes == 3);
}

TEST_CASE("read-only tensors import as const elements and views of const export read-only", "[interop]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dlpack read-only"));
  const auto h = random_host<float, 2>({7, 5}, g);
  auto t = in_space(h);
  test_dlpack::producer p(t.data(), here(), {2, 32, 1}, {7, 5}, {5, 1});
  p.versioned.flags = dl::flag_read_only | dl::flag_is_copied;
  {
    const auto x = loom::from_dlpack<const float, 2, space_t>(&p.versioned);
    static_assert(std::is_same_v<decltype(x.view()), loom::view<const float, 2, space_t>>);
    CHECK(x.read_only());
    CHECK(x.flags() == (dl::flag_read_only | dl::flag_is_copied));
    // Exported onward it stays read-only, and keeps the producer's tensor.
    auto* m = loom::to_dlpack(x);
    CHECK(m->flags == dl::flag_read_only);
    const auto y = loom::from_dlpack<const float, 2, space_t>(m);
    CHECK(y.data() == t.data());
  }
  CHECK(p.deletes == 1);
  test_dlpack::producer q(t.data(), here(), {2, 32, 1}, {7, 5}, {5, 1});
  q.versioned.flags = dl::flag_read_only;
  REQUIRE_THROWS_MATCHES((loom::from_dlpack<float, 2, space_t>(&q.versioned)), loom::value_error,
                         Catch::Matchers::Message(std::string("loom: from_dlpack<float32, 2, ") + space_t::name +
                                                  ">: the DLPack tensor is read-only (flag READ_ONLY); import it with "
                                                  "a const element type (from_dlpack<const T, ...>) or ask the "
                                                  "producer for a writable copy"));
  CHECK(q.deletes == 1);
  // A view of const elements of a loom tensor.
  const auto& ct = t;
  auto* m = loom::to_dlpack(ct.view(), nullptr);
  CHECK(m->flags == dl::flag_read_only);
  m->deleter(m);
}

TEST_CASE("a re-exported import keeps the first producer's tensor until both are done", "[interop]" LOOM_TEST_TAG) {
  auto t = in_space(loom::host_tensor<std::uint8_t, 1>({9}));
  test_dlpack::producer p(t.data(), here(), {1, 8, 1}, {9}, {1});
  dl::managed_tensor* m = nullptr;
  {
    const auto x = loom::from_dlpack<std::uint8_t, 1, space_t>(&p.legacy);
    m = loom::to_dlpack_legacy(x.view().slice(range(1, none, 2)), x);
  }
  CHECK(p.deletes == 0);
  CHECK(m->dl_tensor.shape[0] == 4);
  CHECK(m->dl_tensor.strides[0] == 2);
  CHECK(m->dl_tensor.data == t.data() + 1);
  m->deleter(m);
  CHECK(p.deletes == 1);
}

TEST_CASE("an imported view enters expressions like any view", "[interop]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dlpack expression"));
  const auto h = random_host<float, 2>({257, 33}, g);
  auto t = in_space(h);
  const auto x = loom::from_dlpack<const float, 2, space_t>(loom::to_dlpack(t.t(), std::move(t)));
  auto y = loom::empty_like(x.view());
  y = x.view() * 2.0f + 1.0f;
  const auto back = loom::to_host(y);
  for (index_t i = 0; i < 33; ++i)
    for (index_t j = 0; j < 257; ++j) REQUIRE(back(i, j) == static_cast<float>(static_cast<double>(h(j, i)) * 2 + 1));
}
