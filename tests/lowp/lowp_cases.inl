// SPDX-License-Identifier: Apache-2.0
// Low-precision element types and quantization, checked on both executors
// against goldens written by ml_dtypes (tests/data/lowp/make_goldens.py).
// The including file defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "loom_test.hpp"

using loom::index_t;
using loom::range;
using loom::whole;
using space_t = LOOM_TEST_SPACE;

namespace {
constexpr bool on_device = std::is_same_v<space_t, loom::device>;
const std::string lowp_dir = std::string(LOOM_TEST_DATA_DIR) + "/lowp/";

template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space(const loom::host_tensor<T, R>& h) {
  if constexpr (on_device)
    return loom::to_device(h);
  else
    return h;
}
template <class T, std::size_t R>
loom::host_tensor<T, R> on_host(const loom::tensor<T, R, space_t>& t) {
  if constexpr (on_device)
    return loom::to_host(t);
  else
    return t;
}

template <class T>
std::uint8_t code(T v) {
  return loom::detail::bits_of(v);
}
template <class T>
T from_code(std::uint8_t c) {
  return loom::detail::from_bits<T>(c);
}

// The golden file name of each fp8 type (ml_dtypes' names).
template <class T>
std::string golden_name() {
  if constexpr (std::is_same_v<T, loom::e4m3>)
    return "e4m3fn";
  else if constexpr (std::is_same_v<T, loom::e5m2>)
    return "e5m2";
  else
    return "e8m0fnu";
}

// An fp8 tensor poisoned with a code no conversion in these tests gives.
template <class T>
loom::tensor<T, 1, space_t> poisoned_fp8(index_t n) {
  loom::host_tensor<T, 1> h({n});
  for (index_t i = 0; i < n; ++i) h.data()[i] = from_code<T>(0x5a);
  return in_space(h);
}

// Counts elements whose codes differ from the goldens; reports the first.
template <class T>
void require_codes(const loom::host_tensor<T, 1>& got, const loom::host_tensor<std::uint8_t, 1>& want,
                   const std::vector<double>& inputs) {
  REQUIRE(got.size() == want.size());
  index_t bad = 0, first = -1;
  for (index_t i = 0; i < got.size(); ++i)
    if (code(got.data()[i]) != want.data()[i] && bad++ == 0) first = i;
  if (bad) {
    INFO(bad << " of " << got.size() << " codes differ; first at " << first << ": input " << inputs[first] << ", got 0x"
             << std::hex << int(code(got.data()[first])) << ", ml_dtypes 0x" << int(want.data()[first]));
    CHECK(bad == 0);
  } else {
    CHECK(bad == 0);
  }
}
}  // namespace

TEMPLATE_TEST_CASE("fp8 codes decode to the values ml_dtypes gives, all 256", "[lowp]" LOOM_TEST_TAG, loom::e4m3,
                   loom::e5m2, loom::e8m0) {
  using T = TestType;
  const auto want = loom::load_npy<float, 1>(lowp_dir + "decode_" + golden_name<T>() + ".npy");
  REQUIRE(want.size() == 256);
  loom::host_tensor<T, 1> codes({256});
  for (int c = 0; c < 256; ++c) codes.data()[c] = from_code<T>(static_cast<std::uint8_t>(c));
  // loom's scalar decoding, then the same through an assignment (read as float).
  auto x = in_space(codes);
  auto y = loom::full<float, 1, space_t>({256}, -7.0f);
  y = x;
  const auto got = on_host(y);
  int bad = 0;
  for (int c = 0; c < 256; ++c) {
    const float w = want.data()[c];
    const float s = loom::detail::fp8::decode(codes.data()[c]), e = got.data()[c];
    // A NaN keeps its code's sign, as ml_dtypes decodes it (e8m0's one NaN has none).
    const bool ok = std::isnan(w) ? (std::isnan(s) && std::isnan(e) && std::signbit(s) == std::signbit(w) &&
                                     std::signbit(e) == std::signbit(w))
                                  : (loom_test::same_bits(s, w) && loom_test::same_bits(e, w));
    if (!ok && bad++ == 0) {
      INFO("code 0x" << std::hex << c << ": scalar " << s << ", assignment " << e << ", ml_dtypes " << w);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("every bf16 value casts to fp8 as ml_dtypes rounds it", "[lowp]" LOOM_TEST_TAG, loom::e4m3,
                   loom::e5m2, loom::e8m0) {
  using T = TestType;
  const auto want = loom::load_npy<std::uint8_t, 1>(lowp_dir + "bf16_to_" + golden_name<T>() + ".npy");
  REQUIRE(want.size() == 65536);
  loom::host_tensor<loom::bf16, 1> in({65536});
  std::vector<double> inputs(65536);
  for (index_t i = 0; i < 65536; ++i) {
    in.data()[i] = loom::detail::from_bits<loom::bf16>(static_cast<std::uint16_t>(i));
    inputs[i] = static_cast<double>(static_cast<float>(in.data()[i]));
  }
  const auto x = in_space(in);
  SECTION("assigned into an fp8 tensor") {
    auto y = poisoned_fp8<T>(65536);
    y = x;
    require_codes(on_host(y), want, inputs);
  }
  SECTION("cast<T> inside an expression, assigned into an fp8 tensor") {
    auto y = poisoned_fp8<T>(65536);
    y = loom::cast<T>(x);
    require_codes(on_host(y), want, inputs);
  }
  SECTION("cast<T> inside an expression, stored as float") {
    auto y = loom::full<float, 1, space_t>({65536}, -7.0f);
    y = loom::cast<T>(x);
    const auto got = on_host(y);
    index_t bad = 0;
    for (index_t i = 0; i < 65536; ++i) {
      const float w = static_cast<float>(from_code<T>(want.data()[i])), g = got.data()[i];
      if (!(std::isnan(w) ? std::isnan(g) : loom_test::same_bits(g, w))) ++bad;
    }
    CHECK(bad == 0);
  }
}

TEMPLATE_TEST_CASE("float and double cast to fp8 as ml_dtypes rounds them: boundaries, subnormals, NaN, inf",
                   "[lowp]" LOOM_TEST_TAG, loom::e4m3, loom::e5m2, loom::e8m0) {
  using T = TestType;
  SECTION("float") {
    const auto in = loom::load_npy<float, 1>(lowp_dir + "f32_inputs.npy");
    const auto want = loom::load_npy<std::uint8_t, 1>(lowp_dir + "f32_to_" + golden_name<T>() + ".npy");
    std::vector<double> inputs(in.data(), in.data() + in.size());
    auto y = poisoned_fp8<T>(in.size());
    y = in_space(in);
    require_codes(on_host(y), want, inputs);
  }
  SECTION("float through cast<T> into an fp8 tensor (overflow, infinity and NaN keep their sign)") {
    const auto in = loom::load_npy<float, 1>(lowp_dir + "f32_inputs.npy");
    const auto want = loom::load_npy<std::uint8_t, 1>(lowp_dir + "f32_to_" + golden_name<T>() + ".npy");
    std::vector<double> inputs(in.data(), in.data() + in.size());
    auto y = poisoned_fp8<T>(in.size());
    y = loom::cast<T>(in_space(in));
    require_codes(on_host(y), want, inputs);
  }
  SECTION("double (rounded once, not through float)") {
    const auto in = loom::load_npy<double, 1>(lowp_dir + "f64_inputs.npy");
    const auto want = loom::load_npy<std::uint8_t, 1>(lowp_dir + "f64_to_" + golden_name<T>() + ".npy");
    std::vector<double> inputs(in.data(), in.data() + in.size());
    auto y = poisoned_fp8<T>(in.size());
    y = in_space(in);
    require_codes(on_host(y), want, inputs);
  }
}

TEMPLATE_TEST_CASE("the saturating fp8 conversion clamps overflow and infinity to the largest finite value", "[lowp]",
                   loom::e4m3, loom::e5m2, loom::e8m0) {
  using T = TestType;
  const auto in = loom::load_npy<float, 1>(lowp_dir + "f32_inputs.npy");
  const auto want = loom::load_npy<std::uint8_t, 1>(lowp_dir + "f32_to_" + golden_name<T>() + ".npy");
  // The largest finite code, from the decoded goldens: the largest finite value's code.
  const auto dec = loom::load_npy<float, 1>(lowp_dir + "decode_" + golden_name<T>() + ".npy");
  int max_code = 0;
  for (int c = 0; c < 128 + (std::is_same_v<T, loom::e8m0> ? 128 : 0); ++c)
    if (std::isfinite(dec.data()[c]) && dec.data()[c] > dec.data()[max_code]) max_code = c;
  const double max_value = dec.data()[max_code];
  index_t bad = 0, clamped = 0;
  for (index_t i = 0; i < in.size(); ++i) {
    const float x = in.data()[i];
    const bool unsigned_format = std::is_same_v<T, loom::e8m0>;
    std::uint8_t expect = want.data()[i];
    const double decoded = static_cast<double>(dec.data()[expect]);
    // ml_dtypes' plain cast overflowed (NaN or inf for a non-NaN input beyond the largest finite value).
    if (!std::isnan(x) && !std::isfinite(decoded) && (unsigned_format ? x > 0 : true) &&
        std::fabs(static_cast<double>(x)) > max_value) {
      expect = static_cast<std::uint8_t>(max_code | (!unsigned_format && std::signbit(x) ? 0x80 : 0));
      ++clamped;
    }
    if (code(loom::detail::to_float8<T>(x, true)) != expect && bad++ == 0) {
      INFO("input " << x << ": got 0x" << std::hex << int(code(loom::detail::to_float8<T>(x, true))) << ", want 0x"
                    << int(expect));
      CHECK(false);
    }
  }
  CHECK(clamped > 10);
  CHECK(bad == 0);
}

TEST_CASE("fp8 tensors are written through strided views and read from odd-sized random data", "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("fp8 strided"));
  const index_t rows = 257, cols = 33;
  loom::host_tensor<float, 2> h({rows, cols});
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::random_value<float>(g, -600, 600);
  const auto x = in_space(h);
  // Every other column of a wider poisoned e4m3 tensor.
  loom::host_tensor<loom::e4m3, 2> big_h({rows, 2 * cols + 1});
  for (index_t i = 0; i < big_h.size(); ++i) big_h.data()[i] = from_code<loom::e4m3>(0x5a);
  auto big = in_space(big_h);
  big.slice(whole, range(1, loom::none, 2)) = x * 0.5f;
  // Read back through a strided view into e5m2: fp8 -> float -> e5m2 in one expression.
  loom::tensor<loom::e5m2, 2, space_t> z({rows, cols});
  z = big.slice(whole, range(1, loom::none, 2)) + 1.0f;
  const auto got = on_host(big);
  const auto gz = on_host(z);
  index_t bad = 0;
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < 2 * cols + 1; ++c) {
      const std::uint8_t b = code(got.data()[r * (2 * cols + 1) + c]);
      if (c % 2 == 0) {
        bad += b != 0x5a;  // untouched
        continue;
      }
      const float v = h.data()[r * cols + c / 2] * 0.5f;
      bad += b != code(loom::detail::to_float8<loom::e4m3>(v, false));
      const float w = static_cast<float>(loom::detail::to_float8<loom::e4m3>(v, false)) + 1.0f;
      bad += code(gz.data()[r * cols + c / 2]) != code(loom::detail::to_float8<loom::e5m2>(w, false));
    }
  CHECK(bad == 0);
}

TEST_CASE("fp8 dtypes have ml_dtypes' names, one byte and DLPack 1.1's codes", "[lowp]" LOOM_TEST_TAG) {
  STATIC_REQUIRE(loom::element<loom::e4m3> && loom::element<const loom::e5m2> && loom::element<loom::e8m0>);
  STATIC_REQUIRE(std::is_same_v<loom::compute_t<loom::e4m3>, float> && loom::is_floating_v<loom::e8m0>);
  CHECK(loom::dtype_name(loom::dtype_of<loom::e4m3>) == "float8_e4m3fn");
  CHECK(loom::dtype_name(loom::dtype_of<loom::e5m2>) == "float8_e5m2");
  CHECK(loom::dtype_name(loom::dtype_of<loom::e8m0>) == "float8_e8m0fnu");
  for (auto d : {loom::dtype::float8_e4m3fn, loom::dtype::float8_e5m2, loom::dtype::float8_e8m0fnu}) {
    CHECK(loom::dtype_size(d) == 1);
    const auto t = loom::dlpack::data_type_of(d);
    CHECK(t.bits == 8);
    CHECK(loom::dlpack::dtype_from(t) == d);
  }
  CHECK(loom::dlpack::data_type_of(loom::dtype::float8_e4m3fn).code == 10);
  CHECK(loom::dlpack::data_type_of(loom::dtype::float8_e5m2).code == 12);
  CHECK(loom::dlpack::data_type_of(loom::dtype::float8_e8m0fnu).code == 14);
}

TEST_CASE("fp8 tensors load from ml_dtypes' .npy files, save and print", "[lowp]" LOOM_TEST_TAG) {
  const auto codes = loom::load_npy<loom::e4m3, 1>(lowp_dir + "codes_e4m3fn.npy");
  REQUIRE(codes.size() == 256);
  int bad = 0;
  for (int c = 0; c < 256; ++c) bad += code(codes.data()[c]) != c;
  CHECK(bad == 0);
  const std::string path = "lowp_roundtrip_" + std::string(on_device ? "cuda" : "host") + ".npy";
  loom::save_npy(path, codes.view());
  const auto back = loom::load_npy<loom::e4m3, 1>(path);
  std::remove(path.c_str());
  for (int c = 0; c < 256; ++c) bad += code(back.data()[c]) != c;
  CHECK(bad == 0);
  loom::host_tensor<loom::e4m3, 1> few({3});
  few.data()[0] = from_code<loom::e4m3>(0x38);  // 1
  few.data()[1] = from_code<loom::e4m3>(0xfe);  // -448
  few.data()[2] = from_code<loom::e4m3>(0x7f);  // NaN
  std::ostringstream os;
  os << few;
  CHECK_THAT(os.str(), Catch::Matchers::Contains("448") && Catch::Matchers::Contains("nan"));
}

namespace {
const index_t qrows = 37, qcols = 96;

// The quantization input of the goldens (bf16 [37, 96]) on the host.
loom::host_tensor<loom::bf16, 2> quant_input() {
  auto x = loom::load_npy<loom::bf16, 2>(lowp_dir + "quant_x.npy");
  REQUIRE(x.extents() == loom::shape<2>{qrows, qcols});
  return x;
}

template <class T, std::size_t R>
loom::tensor<T, R, space_t> poisoned_codes(const loom::shape<R>& s) {
  loom::host_tensor<T, R> h(s);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = from_code<T>(0x5a);
  return in_space(h);
}

// Compares the codes (or float bits) of `got` with the golden file `name`.
template <class T, class G, std::size_t R>
void require_golden(const loom::tensor<T, R, space_t>& got_t, const std::string& name) {
  const auto got = on_host(got_t);
  const auto want = loom::load_npy<G, R>(lowp_dir + name);
  REQUIRE(want.extents() == got.extents());
  index_t bad = 0, first = -1;
  for (index_t i = 0; i < got.size(); ++i) {
    G g;
    static_assert(sizeof(G) == sizeof(T));
    std::memcpy(&g, &got.data()[i], sizeof(G));
    if (!loom_test::same_bits(g, want.data()[i]) && bad++ == 0) first = i;
  }
  INFO(name << ": " << bad << " of " << got.size() << " differ, first at " << first);
  CHECK(bad == 0);
}

template <class F>
void expect_one_launch(F&& f) {
  const auto before = loom::launches();
  f();
  const auto after = loom::launches();
  CHECK((on_device ? after.device - before.device : after.host - before.host) == 1);
}
}  // namespace

TEST_CASE("quantize_tensor writes ml_dtypes' per-tensor scale and e4m3 codes", "[lowp]" LOOM_TEST_TAG) {
  const auto x = in_space(quant_input());
  auto q = poisoned_codes<loom::e4m3>(loom::shape<2>{qrows, qcols});
  auto s = loom::full<float, 1, space_t>({1}, std::numeric_limits<float>::quiet_NaN());
  loom::quantize_tensor(q, s, x);
  require_golden<float, float>(s, "quant_tensor_scale.npy");
  require_golden<loom::e4m3, std::uint8_t>(q, "quant_tensor_q.npy");
  SECTION("a scale of two elements is refused") {
    auto s2 = loom::full<float, 1, space_t>({2}, 0.0f);
    CHECK_THROWS_WITH(loom::quantize_tensor(q, s2, x),
                      "loom: quantize_tensor needs a scale of one element, got shape [2]");
  }
}

TEMPLATE_TEST_CASE("quantize_rows writes ml_dtypes' per-row scales and codes in one row kernel", "[lowp]" LOOM_TEST_TAG,
                   loom::e4m3, loom::e5m2) {
  using T = TestType;
  const auto xh = quant_input();
  const std::string f = golden_name<T>();
  SECTION("contiguous") {
    const auto x = in_space(xh);
    auto q = poisoned_codes<T>(loom::shape<2>{qrows, qcols});
    auto s = loom::full<float, 2, space_t>({qrows, 1}, std::numeric_limits<float>::quiet_NaN());
    expect_one_launch([&] { CHECK(loom::quantize_rows(q, s, x).path == loom::eval_path::rows); });
    require_golden<float, float>(s, "quant_rows_" + f + "_scale.npy");
    require_golden<T, std::uint8_t>(q, "quant_rows_" + f + "_q.npy");
  }
  SECTION("strided input, outputs and scales") {
    // x as every other column of a wider tensor; q and s as views with gaps.
    loom::host_tensor<loom::bf16, 2> wide({qrows, 2 * qcols});
    for (index_t i = 0; i < wide.size(); ++i) wide.data()[i] = loom::bf16(1e30f);
    for (index_t r = 0; r < qrows; ++r)
      for (index_t c = 0; c < qcols; ++c) wide.data()[r * 2 * qcols + 2 * c + 1] = xh.data()[r * qcols + c];
    const auto xw = in_space(wide);
    auto qw = poisoned_codes<T>(loom::shape<2>{qrows, qcols + 5});
    auto sw = loom::full<float, 2, space_t>({qrows, 3}, std::numeric_limits<float>::quiet_NaN());
    loom::quantize_rows(qw.slice(whole, range(2, 2 + qcols)), sw.slice(whole, range(1, 2)),
                        xw.slice(whole, range(1, loom::none, 2)));
    loom::tensor<T, 2, space_t> q({qrows, qcols});
    q = qw.slice(whole, range(2, 2 + qcols));
    loom::tensor<float, 2, space_t> s({qrows, 1});
    s = sw.slice(whole, range(1, 2));
    require_golden<float, float>(s, "quant_rows_" + f + "_scale.npy");
    require_golden<T, std::uint8_t>(q, "quant_rows_" + f + "_q.npy");
    const auto qwh = on_host(qw);
    const auto swh = on_host(sw);
    index_t touched = 0;
    for (index_t r = 0; r < qrows; ++r) {
      for (index_t c : {index_t{0}, index_t{1}, 2 + qcols, 3 + qcols, 4 + qcols})
        touched += code(qwh.data()[r * (qcols + 5) + c]) != 0x5a;
      touched += !std::isnan(swh.data()[r * 3]) + !std::isnan(swh.data()[r * 3 + 2]);
    }
    CHECK(touched == 0);
  }
}

TEST_CASE("quantize_rows at odd sizes matches a reference loop over the scalar conversion", "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("quantize_rows odd"));
  for (const auto& [rows, cols] : {std::pair<index_t, index_t>{1, 1}, {7, 257}, {3, 33}}) {
    loom::host_tensor<float, 2> xh({rows, cols});
    for (index_t i = 0; i < xh.size(); ++i) xh.data()[i] = loom_test::random_value<float>(g, -50, 50);
    auto q = poisoned_codes<loom::e4m3>(loom::shape<2>{rows, cols});
    auto s = loom::full<float, 2, space_t>({rows, 1}, std::numeric_limits<float>::quiet_NaN());
    loom::quantize_rows(q, s, in_space(xh));
    const auto qh = on_host(q);
    const auto sh = on_host(s);
    index_t bad = 0;
    for (index_t r = 0; r < rows; ++r) {
      float amax = 0;
      for (index_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(xh.data()[r * cols + c]));
      const float scale = amax == 0 ? 1.0f : amax / 448.0f;
      bad += !loom_test::same_bits(sh.data()[r], scale);
      for (index_t c = 0; c < cols; ++c) {
        const float v = std::clamp(xh.data()[r * cols + c] / scale, -448.0f, 448.0f);
        bad += code(qh.data()[r * cols + c]) != code(loom::detail::to_float8<loom::e4m3>(v, false));
      }
    }
    INFO(rows << " x " << cols);
    CHECK(bad == 0);
  }
}

TEST_CASE("quantize_blocks writes ml_dtypes' MX (e8m0 over 32) and e4m3-over-16 scales and codes",
          "[lowp]" LOOM_TEST_TAG) {
  const auto x = in_space(quant_input());
  auto q = poisoned_codes<loom::e4m3>(loom::shape<2>{qrows, qcols});
  SECTION("MXFP8: e8m0 scales over blocks of 32") {
    auto s = poisoned_codes<loom::e8m0>(loom::shape<2>{qrows, qcols / 32});
    expect_one_launch([&] { loom::quantize_blocks(q, s, x, 32); });
    require_golden<loom::e8m0, std::uint8_t>(s, "quant_mx32_scale.npy");
    require_golden<loom::e4m3, std::uint8_t>(q, "quant_mx32_q.npy");
  }
  SECTION("e4m3 scales over blocks of 16") {
    auto s = poisoned_codes<loom::e4m3>(loom::shape<2>{qrows, qcols / 16});
    loom::quantize_blocks(q, s, x, 16);
    require_golden<loom::e4m3, std::uint8_t>(s, "quant_b16e4m3_scale.npy");
    require_golden<loom::e4m3, std::uint8_t>(q, "quant_b16e4m3_q.npy");
  }
  SECTION("a block that does not divide the row is refused") {
    auto s = poisoned_codes<loom::e8m0>(loom::shape<2>{qrows, 2});
    CHECK_THROWS_WITH(loom::quantize_blocks(q, s, x, 40),
                      "loom: quantize_blocks of x [37, 96] in blocks of 40 needs q of x's shape and scales of shape "
                      "[37, 2] (the block dividing the last extent), got q [37, 96] and scales [37, 2]");
  }
}

TEST_CASE("dequantize fuses into any expression: per-row and per-block scales", "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("dequantize fused"));
  const index_t rows = 5, cols = 64;
  loom::host_tensor<float, 2> wh({rows, cols}), xh({rows, cols});
  for (index_t i = 0; i < wh.size(); ++i) wh.data()[i] = loom_test::random_value<float>(g, -3, 3);
  for (index_t i = 0; i < xh.size(); ++i) xh.data()[i] = loom_test::random_value<float>(g, -2, 2);
  const auto w = in_space(wh);
  const auto x = in_space(xh);
  auto gelu_ref = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
  SECTION("per-row scales") {
    loom::tensor<loom::e4m3, 2, space_t> q({rows, cols});
    loom::tensor<float, 2, space_t> s({rows, 1});
    loom::quantize_rows(q, s, w);
    auto y = loom::full<float, 2, space_t>({rows, cols}, std::numeric_limits<float>::quiet_NaN());
    expect_one_launch([&] { y = loom::gelu(loom::dequantize(q, s) * x); });
    const auto qh = on_host(q);
    const auto sh = on_host(s);
    const auto yh = on_host(y);
    double worst = 0;
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < cols; ++c) {
        const double dq = static_cast<double>(static_cast<float>(qh.data()[r * cols + c])) * sh.data()[r];
        // (1 + |want|): float gelu loses relative precision where 1 + erf cancels.
        const double want = gelu_ref(dq * xh.data()[r * cols + c]);
        worst = std::max(worst, std::fabs(yh.data()[r * cols + c] - want) / (1 + std::fabs(want)));
        // The round trip is within half an e4m3 step (2^-4 relative) of w, or 2^-9 * scale near zero.
        const double err = std::fabs(dq - wh.data()[r * cols + c]);
        CHECK(err <= std::max(std::fabs(static_cast<double>(wh.data()[r * cols + c])) / 16, sh.data()[r] / 512.0));
      }
    CHECK(worst < 1e-5);
  }
  SECTION("MX block scales read through blocks()") {
    loom::tensor<loom::e4m3, 2, space_t> q({rows, cols});
    loom::tensor<loom::e8m0, 2, space_t> s({rows, cols / 32});
    loom::quantize_blocks(q, s, w, 32);
    auto y = loom::full<float, 2, space_t>({rows, cols}, std::numeric_limits<float>::quiet_NaN());
    expect_one_launch([&] {
      loom::blocks(y, 32) =
          loom::gelu(loom::dequantize(loom::blocks(q, 32), s.view().unsqueeze(-1)) * loom::blocks(x, 32));
    });
    const auto qh = on_host(q);
    const auto sh = on_host(s);
    const auto yh = on_host(y);
    double worst = 0;
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < cols; ++c) {
        const double dq = static_cast<double>(static_cast<float>(qh.data()[r * cols + c])) *
                          static_cast<double>(static_cast<float>(sh.data()[r * (cols / 32) + c / 32]));
        // (1 + |want|): float gelu loses relative precision where 1 + erf cancels.
        const double want = gelu_ref(dq * xh.data()[r * cols + c]);
        worst = std::max(worst, std::fabs(yh.data()[r * cols + c] - want) / (1 + std::fabs(want)));
      }
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("assign_with_row_stat refuses a statistic of the wrong shape", "[lowp]" LOOM_TEST_TAG) {
  auto x = loom::full<float, 2, space_t>({3, 8}, 1.0f);
  auto y = loom::full<float, 2, space_t>({3, 8}, 0.0f);
  auto s = loom::full<float, 2, space_t>({3, 2}, 0.0f);
  CHECK_THROWS_WITH(loom::assign_with_row_stat(y, x * 2, s, loom::row_max(x)),
                    "loom: assign_with_row_stat needs a second output of the first's shape with a last extent of 1 "
                    "([3, 1]), got [3, 8] and [3, 2]");
}

TEST_CASE("fp4 E2M1 codes decode and every bf16 value encodes as ml_dtypes does", "[lowp]" LOOM_TEST_TAG) {
  const auto dec = loom::load_npy<float, 1>(lowp_dir + "decode_e2m1fn.npy");
  REQUIRE(dec.size() == 16);
  int bad = 0;
  for (int c = 0; c < 16; ++c)
    bad += !loom_test::same_bits(loom::detail::fp4::decode(static_cast<std::uint8_t>(c)), dec.data()[c]);
  CHECK(bad == 0);
  const auto want = loom::load_npy<std::uint8_t, 1>(lowp_dir + "bf16_to_e2m1fn.npy");
  REQUIRE(want.size() == 65536);
  index_t wrong = 0, nans = 0;
  for (index_t i = 0; i < 65536; ++i) {
    const float x = static_cast<float>(loom::detail::from_bits<loom::bf16>(static_cast<std::uint16_t>(i)));
    const std::uint8_t got = loom::detail::fp4::encode(x);
    if (std::isnan(x)) {
      nans += got == 0x7;  // no NaN in E2M1: +6, as CUDA's conversion gives
      continue;
    }
    wrong += got != want.data()[i];
  }
  CHECK(wrong == 0);
  CHECK(nans == 254);
}

TEST_CASE("int4 rounds half to even and saturates at -8 and 7", "[lowp]" LOOM_TEST_TAG) {
  // (input, value): NumPy's rint then clip, written out.
  const std::pair<float, int> cases[] = {{0.0f, 0},     {0.5f, 0},
                                         {1.5f, 2},     {2.5f, 2},
                                         {-2.5f, -2},   {-3.5f, -4},
                                         {6.6f, 7},     {7.5f, 7},
                                         {100.0f, 7},   {-8.4f, -8},
                                         {-100.0f, -8}, {0.49f, 0},
                                         {-0.51f, -1},  {std::numeric_limits<float>::quiet_NaN(), 0}};
  for (const auto& [x, v] : cases) {
    INFO(x);
    CHECK(loom::detail::int4::decode(loom::detail::int4::encode(x)) == v);
  }
  for (int c = 0; c < 16; ++c) CHECK(loom::detail::int4::decode(static_cast<std::uint8_t>(c)) == (c < 8 ? c : c - 16));
}

TEST_CASE("int4 codes with power-of-two scales reach -8 and stop at 7; float scales stay in -7..7",
          "[lowp]" LOOM_TEST_TAG) {
  // A block [-7.9, 7.9, 1, ...]: e8m0's scale is 2^(floor(log2 7.9) - 2) = 1,
  // so -7.9 rounds to -8 and 7.9 saturates at 7; a float scale 7.9 / 7 gives +-7.
  loom::host_tensor<float, 2> h({1, 32});
  for (index_t i = 0; i < 32; ++i) h.data()[i] = 1.0f;
  h.data()[0] = -7.9f;
  h.data()[1] = 7.9f;
  const auto x = in_space(h);
  auto q = in_space(loom::host_tensor<loom::int4x2, 2>({1, 16}));
  auto s8 = in_space(loom::host_tensor<loom::e8m0, 2>({1, 1}));
  loom::quantize_packed(q, s8, x, 32);
  std::uint8_t byte = loom::detail::bits_of(on_host(q).data()[0]);
  CHECK(static_cast<float>(on_host(s8).data()[0]) == 1.0f);
  CHECK(loom::detail::int4::decode(static_cast<std::uint8_t>(byte & 0xf)) == -8);
  CHECK(loom::detail::int4::decode(static_cast<std::uint8_t>(byte >> 4)) == 7);
  auto sf = in_space(loom::host_tensor<float, 2>({1, 1}));
  loom::quantize_packed(q, sf, x, 32);
  byte = loom::detail::bits_of(on_host(q).data()[0]);
  CHECK(loom::detail::int4::decode(static_cast<std::uint8_t>(byte & 0xf)) == -7);
  CHECK(loom::detail::int4::decode(static_cast<std::uint8_t>(byte >> 4)) == 7);
}

TEST_CASE("a C++ scalar does not widen fp8: computed in float, rounded to fp8 only where stored as fp8",
          "[lowp]" LOOM_TEST_TAG) {
  loom::host_tensor<loom::e4m3, 1> h({1});
  h.data()[0] = from_code<loom::e4m3>(0x39);  // 1.125
  REQUIRE(static_cast<float>(h.data()[0]) == 1.125f);
  const auto x8 = in_space(h);
  static_assert(std::is_same_v<typename decltype(x8 * 1.1f)::value_type, loom::e4m3>);
  auto f = loom::full<float, 1, space_t>({1}, -7.0f);
  f = x8 * 1.1f;
  CHECK(on_host(f).data()[0] == 1.125f * 1.1f);  // float's precision, not e4m3's
  const auto m = loom::materialize(x8 * 1.1f);
  static_assert(std::is_same_v<typename decltype(m)::value_type, loom::e4m3>);
  CHECK(static_cast<float>(on_host(m).data()[0]) == 1.25f);  // 1.2375 rounded to e4m3
  static_assert(std::is_same_v<typename decltype(loom::cast<float>(x8) * 1.1f)::value_type, float>);
}

TEST_CASE("quantize_packed writes ml_dtypes' NVFP4-style, MXFP4 and per-row int4 data, low nibble first",
          "[lowp]" LOOM_TEST_TAG) {
  const auto x = in_space(quant_input());
  SECTION("fp4 values, e4m3 scales over 16") {
    auto q = poisoned_codes<loom::fp4x2>(loom::shape<2>{qrows, qcols / 2});
    auto s = poisoned_codes<loom::e4m3>(loom::shape<2>{qrows, qcols / 16});
    expect_one_launch([&] { loom::quantize_packed(q, s, x, 16); });
    require_golden<loom::e4m3, std::uint8_t>(s, "quant_nvfp4_scale.npy");
    require_golden<loom::fp4x2, std::uint8_t>(q, "quant_nvfp4_q.npy");
  }
  SECTION("fp4 values, e8m0 scales over 32") {
    auto q = poisoned_codes<loom::fp4x2>(loom::shape<2>{qrows, qcols / 2});
    auto s = poisoned_codes<loom::e8m0>(loom::shape<2>{qrows, qcols / 32});
    loom::quantize_packed(q, s, x, 32);
    require_golden<loom::e8m0, std::uint8_t>(s, "quant_mxfp4_scale.npy");
    require_golden<loom::fp4x2, std::uint8_t>(q, "quant_mxfp4_q.npy");
  }
  SECTION("int4 values, one float scale per row (block = the row)") {
    loom::host_tensor<loom::int4x2, 2> qh({qrows, qcols / 2});
    for (index_t i = 0; i < qh.size(); ++i) qh.data()[i] = loom::int4x2{0x5a};
    auto q = in_space(qh);
    auto s = loom::full<float, 2, space_t>({qrows, 1}, std::numeric_limits<float>::quiet_NaN());
    loom::quantize_packed(q, s, x, qcols);
    require_golden<float, float>(s, "quant_int4_rows_scale.npy");
    require_golden<loom::int4x2, std::uint8_t>(q, "quant_int4_rows_q.npy");
  }
  SECTION("a block that would split a pair, or a packed tensor of the wrong width, is refused") {
    auto q = poisoned_codes<loom::fp4x2>(loom::shape<2>{qrows, qcols / 2});
    auto s = poisoned_codes<loom::e4m3>(loom::shape<2>{qrows, 32});
    CHECK_THROWS_AS(loom::quantize_packed(q, s, x, 3), loom::shape_error);
    auto wide = poisoned_codes<loom::fp4x2>(loom::shape<2>{qrows, qcols});
    auto s16 = poisoned_codes<loom::e4m3>(loom::shape<2>{qrows, qcols / 16});
    CHECK_THROWS_WITH(loom::quantize_packed(wide, s16, x, 16),
                      "loom: quantize_packed of x [37, 96] in blocks of 16 needs an even block dividing the last "
                      "extent, packed of shape [37, 48] and scales of shape [..., K / block], got packed [37, 96] "
                      "and scales [37, 6]");
  }
}

TEST_CASE("packed 4-bit data at odd sizes and strided inputs, dequantized in one fused kernel",
          "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("packed odd"));
  const index_t rows = 3, cols = 66;  // 33 bytes per row
  loom::host_tensor<float, 2> wide({rows, 2 * cols});
  for (index_t i = 0; i < wide.size(); ++i) wide.data()[i] = loom_test::random_value<float>(g, -9, 9);
  const auto wd = in_space(wide);
  const auto x = wd.slice(whole, range(0, loom::none, 2));  // strided: every other column
  loom::tensor<loom::int4x2, 2, space_t> q({rows, cols / 2});
  loom::tensor<float, 2, space_t> s({rows, 1});
  loom::quantize_packed(q.view(), s.view(), x, cols);
  const auto qh = on_host(q);
  const auto sh = on_host(s);
  index_t bad = 0;
  for (index_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (index_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(wide.data()[r * 2 * cols + 2 * c]));
    const float scale = amax / 7.0f;
    bad += !loom_test::same_bits(sh.data()[r], scale);
    for (index_t c = 0; c < cols; ++c) {
      const float v = std::clamp(std::nearbyint(wide.data()[r * 2 * cols + 2 * c] / scale), -8.0f, 7.0f);
      const std::uint8_t byte = qh.data()[r * (cols / 2) + c / 2].bits;
      bad += loom::detail::int4::decode(static_cast<std::uint8_t>(c % 2 ? byte >> 4 : byte)) != static_cast<int>(v);
    }
  }
  CHECK(bad == 0);
  // Dequantized into the even and odd columns of y, with an activation: one kernel.
  auto y = loom::full<float, 2, space_t>({rows, cols}, std::numeric_limits<float>::quiet_NaN());
  expect_one_launch([&] {
    loom::assign_pair(loom::even(y), loom::relu(loom::low(q) * s), loom::odd(y), loom::relu(loom::high(q) * s));
  });
  const auto yh = on_host(y);
  index_t off = 0;
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) {
      const std::uint8_t byte = qh.data()[r * (cols / 2) + c / 2].bits;
      const float want = std::max(
          0.0f, static_cast<float>(loom::detail::int4::decode(static_cast<std::uint8_t>(c % 2 ? byte >> 4 : byte))) *
                    sh.data()[r]);
      off += !loom_test::same_bits(yh.data()[r * cols + c], want);
    }
  CHECK(off == 0);
  CHECK_THROWS_WITH(loom::even(loom::tensor<float, 2, space_t>({2, 5})),
                    "loom: even() and odd() need an even last extent (4-bit values are packed in pairs), got shape "
                    "[2, 5]");
}

TEST_CASE("even and odd columns of one tensor do not overlap; views of the same parity do", "[lowp]" LOOM_TEST_TAG) {
  loom::tensor<float, 2, space_t> y({4, 10});
  const auto v = y.view();
  CHECK_FALSE(loom::may_overlap(loom::even(v), loom::odd(v)));
  CHECK(loom::may_overlap(loom::even(v), v));
  CHECK(loom::may_overlap(loom::even(v), loom::even(v.slice(whole, range(2, 10)))));
  CHECK(loom::may_overlap(loom::odd(v), loom::even(v.slice(whole, range(1, 9)))));
  STATIC_REQUIRE(loom::element<loom::fp4x2> && loom::element<loom::int4x2>);
  CHECK(loom::dtype_name(loom::dtype_of<loom::fp4x2>) == "float4_e2m1fn_x2");
  CHECK(loom::dtype_name(loom::dtype_of<loom::int4x2>) == "int4x2");
  CHECK(loom::dtype_size(loom::dtype_of<loom::int4x2>) == 1);
}

namespace {
// scaled_matmul checked against a double loop over the decoded operands.
template <class A, class B, class D>
void check_scaled_matmul(index_t m, index_t k, index_t n, bool bias_gelu, std::mt19937_64& g) {
  loom::host_tensor<float, 2> xh({m, k}), wh({n, k});
  loom::host_tensor<loom::bf16, 1> bh({n});
  for (index_t i = 0; i < xh.size(); ++i) xh.data()[i] = loom_test::random_value<float>(g, -3, 3);
  for (index_t i = 0; i < wh.size(); ++i) wh.data()[i] = loom_test::random_value<float>(g, -0.5, 0.5);
  for (index_t i = 0; i < n; ++i) bh.data()[i] = loom::bf16(loom_test::random_value<float>(g, -1, 1));
  loom::tensor<A, 2, space_t> x8({m, k});
  loom::tensor<B, 2, space_t> w8({n, k});
  loom::tensor<float, 1, space_t> sx({1}), sw({1}), amax({1});
  loom::quantize_tensor(x8, sx, in_space(xh));
  loom::quantize_tensor(w8, sw, in_space(wh));
  const auto bias = in_space(bh);
  auto y = loom::full<D, 2, space_t>({m, n}, D(std::numeric_limits<float>::quiet_NaN()));
  loom::scaled_matmul_extras<D, space_t> ex;
  ex.alpha = 0.75f;
  ex.amax = amax.view();
  if (bias_gelu) {
    ex.bias = bias.view();
    ex.gelu = true;
  }
  loom::scaled_matmul(y, x8, sx, w8.t(), sw, ex);
  const auto x8h = on_host(x8);
  const auto w8h = on_host(w8);
  const float sxh = on_host(sx).data()[0], swh = on_host(sw).data()[0];
  const auto yh = on_host(y);
  double worst = 0, biggest = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double acc = 0;
      for (index_t l = 0; l < k; ++l)
        acc += static_cast<double>(static_cast<float>(x8h.data()[i * k + l])) *
               static_cast<double>(static_cast<float>(w8h.data()[j * k + l]));
      double v = 0.75 * sxh * swh * acc;
      if (bias_gelu) {
        v += static_cast<double>(static_cast<float>(bh.data()[j]));
        v = 0.5 * v * (1 + std::tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v)));
      }
      const double got = static_cast<double>(static_cast<float>(yh.data()[i * n + j]));
      worst = std::max(worst, std::fabs(got - v) / (1 + std::fabs(v)));
      biggest = std::max(biggest, std::fabs(got));
    }
  CHECK(worst < (std::is_same_v<D, float> ? 1e-5 : 1e-2));
  CHECK(on_host(amax).data()[0] == static_cast<float>(biggest));
}
}  // namespace

TEST_CASE("scaled_matmul of fp8 operands with per-tensor scales, bias, GELU and the amax of D",
          "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("scaled_matmul"));
  SECTION("e4m3 x e4m3 -> float") { check_scaled_matmul<loom::e4m3, loom::e4m3, float>(7, 64, 48, false, g); }
  SECTION("e4m3 x e4m3 -> bf16 with bias and GELU") {
    check_scaled_matmul<loom::e4m3, loom::e4m3, loom::bf16>(7, 64, 48, true, g);
  }
  SECTION("e5m2 x e4m3 -> float with bias and GELU") {
    check_scaled_matmul<loom::e5m2, loom::e4m3, float>(9, 32, 16, true, g);
  }
  if constexpr (!on_device) {
    SECTION("odd sizes on the host") { check_scaled_matmul<loom::e4m3, loom::e5m2, float>(3, 37, 5, true, g); }
  }
  SECTION("shapes and scales are checked") {
    loom::tensor<loom::e4m3, 2, space_t> a({4, 32}), w({8, 16});
    loom::tensor<float, 1, space_t> s1({1}), s2({2});
    loom::tensor<float, 2, space_t> y({4, 8});
    CHECK_THROWS_WITH(loom::scaled_matmul(y, a, s1, w.t(), s1),
                      "loom: scaled_matmul of shapes [4, 32] and [16, 8] into [4, 8]: the inner extents or the "
                      "output's shape differ");
    loom::tensor<loom::e4m3, 2, space_t> w2({8, 32});
    CHECK_THROWS_WITH(loom::scaled_matmul(y, a, s2, w2.t(), s1),
                      "loom: scaled_matmul needs a_scale of one element, got shape [2]");
  }
}

namespace {
// One fp8 ulp at |v| (e4m3: 3 mantissa bits, normals from 2^-6; e5m2: 2
// mantissa bits, normals from 2^-14), written out here rather than taken
// from loom.
template <class T>
double fp8_ulp(double v) {
  constexpr int mantissa_bits = std::is_same_v<T, loom::e4m3> ? 3 : 2;
  constexpr int min_exponent = std::is_same_v<T, loom::e4m3> ? -6 : -14;
  const int e = v == 0 ? min_exponent : std::max(static_cast<int>(std::floor(std::log2(std::fabs(v)))), min_exponent);
  return std::ldexp(1.0, e - mantissa_bits);
}
template <class T>
constexpr double fp8_max() {
  return std::is_same_v<T, loom::e4m3> ? 448.0 : 57344.0;
}

// scaled_matmul with a C operand (beta, c_scale) and, for an fp8 D, d_scale
// and cuBLASLt's amax, against a double loop over the decoded operands in
// cuBLAS's documented order: t = gelu(alpha sa sb A B + beta sc C + bias),
// amax = max |t|, D = d_scale t. `overflow` picks a d_scale that pushes the
// largest values past the fp8 range (they must saturate).
template <class A, class B, class D>
void check_scaled_matmul_c(index_t m, index_t k, index_t n, bool bias_gelu, bool overflow, std::mt19937_64& g) {
  using C = loom::scaled_matmul_c_t<D>;
  constexpr bool fp8_out = std::is_same_v<D, loom::e4m3> || std::is_same_v<D, loom::e5m2>;
  loom::host_tensor<float, 2> xh({m, k}), wh({n, k});
  loom::host_tensor<C, 2> ch({m, n});
  loom::host_tensor<loom::bf16, 1> bh({n});
  loom::host_tensor<float, 1> sch({1});
  for (index_t i = 0; i < xh.size(); ++i) xh.data()[i] = loom_test::random_value<float>(g, -3, 3);
  for (index_t i = 0; i < wh.size(); ++i) wh.data()[i] = loom_test::random_value<float>(g, -0.5, 0.5);
  for (index_t i = 0; i < ch.size(); ++i) ch.data()[i] = C(loom_test::random_value<float>(g, -2, 2));
  for (index_t i = 0; i < n; ++i) bh.data()[i] = loom::bf16(loom_test::random_value<float>(g, -1, 1));
  sch.data()[0] = loom_test::random_value<float>(g, 0.5, 2);
  loom::tensor<A, 2, space_t> x8({m, k});
  loom::tensor<B, 2, space_t> w8({n, k});
  loom::tensor<float, 1, space_t> sx({1}), sw({1});
  loom::quantize_tensor(x8, sx, in_space(xh));
  loom::quantize_tensor(w8, sw, in_space(wh));
  const auto x8h = on_host(x8);
  const auto w8h = on_host(w8);
  const double sxh = on_host(sx).data()[0], swh = on_host(sw).data()[0];
  const double alpha = 0.75, beta = -0.5, sc = sch.data()[0];
  std::vector<double> want(static_cast<std::size_t>(m * n));
  double want_amax = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double acc = 0;
      for (index_t l = 0; l < k; ++l)
        acc += static_cast<double>(static_cast<float>(x8h.data()[i * k + l])) *
               static_cast<double>(static_cast<float>(w8h.data()[j * k + l]));
      double v = alpha * sxh * swh * acc + beta * sc * static_cast<double>(static_cast<float>(ch.data()[i * n + j]));
      if (bias_gelu) {
        v += static_cast<double>(static_cast<float>(bh.data()[j]));
        v = 0.5 * v * (1 + std::tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v)));
      }
      want[static_cast<std::size_t>(i * n + j)] = v;
      want_amax = std::max(want_amax, std::fabs(v));
    }
  // In range, D's largest value lands at half the fp8 maximum; overflowing, at four times it.
  const float d_scale_value = static_cast<float>((overflow ? 4.0 : 0.5) * (fp8_out ? fp8_max<D>() : 1.0) / want_amax);
  loom::host_tensor<float, 1> dsh({1});
  dsh.data()[0] = d_scale_value;
  const auto c = in_space(ch);
  const auto bias = in_space(bh);
  const auto c_scale = in_space(sch);
  const auto d_scale = in_space(dsh);
  auto amax = loom::full<float, 1, space_t>({1}, std::numeric_limits<float>::quiet_NaN());
  // Poisoned: NaN (code 0x7f is NaN in both fp8 formats), which no in-range result gives.
  auto y = [&] {
    if constexpr (fp8_out) {
      loom::host_tensor<D, 2> nan_h({m, n});
      for (index_t i = 0; i < nan_h.size(); ++i) nan_h.data()[i] = from_code<D>(0x7f);
      return in_space(nan_h);
    } else {
      return loom::full<D, 2, space_t>({m, n}, D(std::numeric_limits<float>::quiet_NaN()));
    }
  }();
  loom::scaled_matmul_extras<D, space_t> ex;
  ex.alpha = static_cast<float>(alpha);
  ex.amax = amax.view();
  ex.c = c.view();
  ex.beta = static_cast<float>(beta);
  ex.c_scale = c_scale.view();
  if (bias_gelu) {
    ex.bias = bias.view();
    ex.gelu = true;
  }
  if constexpr (fp8_out) ex.d_scale = d_scale.view();
  loom::scaled_matmul(y, x8, sx, w8.t(), sw, ex);
  const auto yh = on_host(y);
  const float got_amax = on_host(amax).data()[0];
  double biggest = 0;
  [[maybe_unused]] double worst = 0;
  [[maybe_unused]] index_t off_by_more = 0, saturated = 0, first_off = -1;
  [[maybe_unused]] double first_got = 0, first_want = 0;
  for (index_t i = 0; i < m * n; ++i) {
    const double got = static_cast<double>(static_cast<float>(yh.data()[i]));
    biggest = std::max(biggest, std::fabs(got));
    if constexpr (fp8_out) {
      // Decoded values within one fp8 ulp of d_scale * t, plus float's
      // rounding of the sum (1e-5 of the largest value, which matters where
      // terms cancel near zero): the float sums, in whatever order the
      // device takes, may put a value near a rounding boundary on either
      // side (bit-exact codes would be flaky); a wrong scale, a missing C or
      // bias is many ulps off.
      const double scaled = static_cast<double>(d_scale_value) * want[static_cast<std::size_t>(i)];
      const double expect = std::clamp(scaled, -fp8_max<D>(), fp8_max<D>());
      const double slack = 1e-5 * static_cast<double>(d_scale_value) * want_amax;
      saturated += std::fabs(scaled) > fp8_max<D>() * 1.01;
      if (!(std::fabs(got - expect) <= fp8_ulp<D>(expect) + slack) && off_by_more++ == 0) {
        first_off = i;
        first_got = got;
        first_want = expect;
      }
    } else {
      const double v = want[static_cast<std::size_t>(i)];
      worst = std::max(worst, std::fabs(got - v) / (1 + std::fabs(v)));
    }
  }
  if constexpr (fp8_out) {
    INFO(off_by_more << " off by more than an ulp, first at " << first_off << ": " << first_got << " for "
                     << first_want);
    CHECK(off_by_more == 0);
    CHECK((saturated > 0) == overflow);
    // cuBLAS's amax_D is of t, before d_scale and the conversion.
    CHECK(std::fabs(got_amax - want_amax) <= 1e-5 * want_amax);
  } else {
    CHECK(worst < (std::is_same_v<D, float> ? 1e-5 : 1e-2));
    CHECK(got_amax == static_cast<float>(biggest));  // loom's reduction over the stored D
  }
}
}  // namespace

TEST_CASE("scaled_matmul adds beta * c_scale * C and writes fp8 D with d_scale and the amax before it",
          "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("scaled_matmul C and fp8 D"));
  SECTION("e4m3 x e4m3 + C -> float") {
    check_scaled_matmul_c<loom::e4m3, loom::e4m3, float>(7, 64, 48, false, false, g);
  }
  SECTION("e4m3 x e4m3 + C -> bf16 with bias and GELU") {
    check_scaled_matmul_c<loom::e4m3, loom::e4m3, loom::bf16>(9, 32, 16, true, false, g);
  }
  SECTION("e4m3 x e4m3 + C -> e4m3") {
    check_scaled_matmul_c<loom::e4m3, loom::e4m3, loom::e4m3>(7, 64, 48, false, false, g);
  }
  SECTION("e4m3 x e5m2 + C -> e5m2 with bias and GELU") {
    check_scaled_matmul_c<loom::e4m3, loom::e5m2, loom::e5m2>(9, 32, 32, true, false, g);
  }
  SECTION("e5m2 x e4m3 + C -> e4m3 with bias and GELU") {
    check_scaled_matmul_c<loom::e5m2, loom::e4m3, loom::e4m3>(5, 48, 16, true, false, g);
  }
  if constexpr (!on_device) {
    SECTION("odd sizes on the host") {
      check_scaled_matmul_c<loom::e4m3, loom::e4m3, float>(3, 37, 5, true, false, g);
      check_scaled_matmul_c<loom::e4m3, loom::e4m3, loom::e4m3>(3, 37, 5, true, false, g);
      check_scaled_matmul_c<loom::e5m2, loom::e4m3, loom::e5m2>(3, 37, 5, false, false, g);
    }
    // cuBLAS's documentation does not say what its fp8 epilogue does with
    // values beyond the fp8 range; loom's reference saturates.
    SECTION("fp8 D saturates on the host") {
      check_scaled_matmul_c<loom::e4m3, loom::e4m3, loom::e4m3>(3, 37, 5, false, true, g);
      check_scaled_matmul_c<loom::e4m3, loom::e5m2, loom::e5m2>(3, 37, 5, false, true, g);
    }
  }
  SECTION("in place: c is d") {
    const index_t m = 5, k = 32, n = 16;
    loom::host_tensor<float, 2> xh({m, k}), wh({n, k}), yh0({m, n});
    for (index_t i = 0; i < xh.size(); ++i) xh.data()[i] = loom_test::random_value<float>(g, -3, 3);
    for (index_t i = 0; i < wh.size(); ++i) wh.data()[i] = loom_test::random_value<float>(g, -0.5, 0.5);
    for (index_t i = 0; i < yh0.size(); ++i) yh0.data()[i] = loom_test::random_value<float>(g, -2, 2);
    loom::tensor<loom::e4m3, 2, space_t> x8({m, k}), w8({n, k});
    loom::tensor<float, 1, space_t> sx({1}), sw({1});
    loom::quantize_tensor(x8, sx, in_space(xh));
    loom::quantize_tensor(w8, sw, in_space(wh));
    auto y = in_space(yh0);
    loom::scaled_matmul_extras<float, space_t> ex;
    ex.c = loom::view<const float, 2, space_t>(y.view());
    ex.beta = 2;
    loom::scaled_matmul(y, x8, sx, w8.t(), sw, ex);
    const auto x8h = on_host(x8);
    const auto w8h = on_host(w8);
    const double s = static_cast<double>(on_host(sx).data()[0]) * on_host(sw).data()[0];
    const auto yh = on_host(y);
    double worst = 0;
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double acc = 0;
        for (index_t l = 0; l < k; ++l)
          acc += static_cast<double>(static_cast<float>(x8h.data()[i * k + l])) *
                 static_cast<double>(static_cast<float>(w8h.data()[j * k + l]));
        const double v = s * acc + 2.0 * yh0.data()[i * n + j];
        worst = std::max(worst, std::fabs(yh.data()[i * n + j] - v) / (1 + std::fabs(v)));
      }
    CHECK(worst < 1e-5);
  }
  SECTION("an empty fp8 D runs no product and its amax is 0") {
    loom::tensor<loom::e4m3, 2, space_t> a({0, 32}), w({8, 32});
    loom::tensor<loom::e4m3, 2, space_t> y8({0, 8});
    loom::host_tensor<float, 1> poison({1});
    poison.data()[0] = 7;
    auto amax = in_space(poison);
    const auto one = loom::full<float, 1, space_t>({1}, 1.0f);
    loom::scaled_matmul(y8, a, one, w.t(), one, {.amax = amax.view(), .d_scale = one.view()});
    CHECK(on_host(amax).data()[0] == 0.0f);
  }
  SECTION("C, its scale, d_scale and overlaps are checked") {
    loom::tensor<loom::e4m3, 2, space_t> a({4, 32}), w({8, 32});
    loom::tensor<float, 1, space_t> s1({1}), s2({2});
    loom::tensor<float, 2, space_t> y({4, 8}), c_bad({4, 7}), buf({5, 8});
    loom::tensor<loom::e4m3, 2, space_t> y8({4, 8});
    loom::tensor<loom::bf16, 2, space_t> c16({4, 8});
    CHECK_THROWS_WITH(loom::scaled_matmul(y, a, s1, w.t(), s1, {.c = c_bad.view()}),
                      "loom: scaled_matmul's c has shape [4, 7], expected [4, 8] (the output's)");
    CHECK_THROWS_WITH((loom::scaled_matmul(y, a, s1, w.t(), s1, {.c = y.view(), .c_scale = s2.view()})),
                      "loom: scaled_matmul needs c_scale of one element, got shape [2]");
    CHECK_THROWS_WITH(loom::scaled_matmul(y, a, s1, w.t(), s1, {.c_scale = s1.view()}),
                      "loom: scaled_matmul got c_scale without c");
    CHECK_THROWS_WITH(loom::scaled_matmul(y, a, s1, w.t(), s1, {.d_scale = s1.view()}),
                      "loom: scaled_matmul's d_scale applies to fp8 outputs only (cuBLASLt rejects a D scale for a "
                      "bf16 or float D); fold it into alpha");
    CHECK_THROWS_WITH((loom::scaled_matmul(y8, a, s1, w.t(), s1, {.c = c16.view(), .d_scale = s2.view()})),
                      "loom: scaled_matmul needs d_scale of one element, got shape [2]");
    const auto d_rows = buf.view().slice(range(0, 4), whole);
    const auto c_rows = buf.view().slice(range(1, 5), whole);
    CHECK_THROWS_AS(loom::scaled_matmul(d_rows, a, s1, w.t(), s1, {.c = c_rows}), loom::aliasing_error);
    CHECK_THROWS_WITH(loom::scaled_matmul(d_rows, a, s1, w.t(), s1, {.c = c_rows}),
                      "loom: scaled_matmul's c overlaps the output d; c may only be d itself (same elements and "
                      "strides, in place)");
  }
}

TEST_CASE("a NaN in a row gives that row a NaN scale and NaN values; infinities saturate", "[lowp]" LOOM_TEST_TAG) {
  loom::host_tensor<float, 2> xh({3, 5});
  for (index_t i = 0; i < xh.size(); ++i) xh.data()[i] = static_cast<float>(i % 5) - 2.0f;
  xh.data()[1 * 5 + 3] = std::numeric_limits<float>::quiet_NaN();
  auto q = poisoned_codes<loom::e4m3>(loom::shape<2>{3, 5});
  auto s = loom::full<float, 2, space_t>({3, 1}, 0.0f);
  loom::quantize_rows(q, s, in_space(xh));
  const auto qh = on_host(q);
  const auto sh = on_host(s);
  CHECK(sh.data()[0] == 2.0f / 448.0f);
  CHECK(std::isnan(sh.data()[1]));
  index_t nan_codes = 0;
  for (index_t c = 0; c < 5; ++c) nan_codes += (code(qh.data()[5 + c]) & 0x7f) == 0x7f;
  CHECK(nan_codes == 5);
  CHECK(code(qh.data()[0]) == 0xfe);  // -2 / (2 / 448) = -448
  // A fixed scale: an infinite value saturates at the largest finite value.
  loom::host_tensor<float, 1> inf_h({2});
  inf_h.data()[0] = std::numeric_limits<float>::infinity();
  inf_h.data()[1] = -1e30f;
  loom::tensor<loom::e5m2, 1, space_t> q5({2});
  q5 = loom::quantize<loom::e5m2>(in_space(inf_h), 1.0f);
  const auto q5h = on_host(q5);
  CHECK(code(q5h.data()[0]) == 0x7b);
  CHECK(code(q5h.data()[1]) == 0xfb);
}
