// SPDX-License-Identifier: Apache-2.0
// loom::unpack: packed 4-bit tensors read in their logical layout inside
// expressions, against an independent decode (ml_dtypes' table of the 16
// E2M1 codes, a plain two's complement nibble loop for int4). Included after
// lowp_cases.inl (its helpers and LOOM_TEST_SPACE).

namespace {
// The value of code c (0..15) of packed type P, from ml_dtypes' table or the
// two's complement rule written out.
template <class P>
double nibble_value(unsigned c) {
  if constexpr (std::is_same_v<P, loom::fp4x2>) {
    static const auto table = loom::load_npy<float, 1>(lowp_dir + "decode_e2m1fn.npy");
    return table.data()[c];
  } else {
    return c < 8 ? static_cast<double>(c) : static_cast<double>(c) - 16.0;
  }
}
// Logical value k of a row of packed bytes: low nibble first.
template <class P>
double logical_value(const std::uint8_t* row_bytes, index_t stride, index_t k) {
  const unsigned b = row_bytes[(k / 2) * stride];
  return nibble_value<P>(k % 2 == 0 ? b & 0xfu : b >> 4);
}
// Random bytes, every code equally likely.
template <class P, std::size_t R>
loom::host_tensor<P, R> random_packed(const loom::shape<R>& s, std::mt19937_64& g) {
  loom::host_tensor<P, R> h(s);
  for (index_t i = 0; i < h.size(); ++i)
    h.data()[i] = loom::detail::packed_from_byte<P>(static_cast<std::uint8_t>(g()));
  return h;
}
template <class P>
const std::uint8_t* bytes_of(const loom::host_tensor<P, 2>& h) {
  return reinterpret_cast<const std::uint8_t*>(h.data());
}
template <std::size_t R>
loom::tensor<float, R, space_t> poisoned_floats(const loom::shape<R>& s) {
  return loom::full<float, R, space_t>(s, std::numeric_limits<float>::quiet_NaN());
}
}  // namespace

TEMPLATE_TEST_CASE("unpack reads packed 4-bit rows in their logical layout, one kernel, low nibble first",
                   "[lowp]" LOOM_TEST_TAG, loom::fp4x2, loom::int4x2) {
  using P = TestType;
  std::mt19937_64 g(loom_test::seed_for("unpack logical"));
  for (const index_t rows : {1, 7, 37})
    for (const index_t packed_cols : {1, 3, 16, 33, 48}) {
      const index_t cols = 2 * packed_cols;
      INFO(rows << " x " << cols);
      const auto qh = random_packed<P>(loom::shape<2>{rows, packed_cols}, g);
      const auto q = in_space(qh);
      auto y = poisoned_floats(loom::shape<2>{rows, cols});
      CHECK(loom::unpack(q).extents() == loom::shape<2>{rows, cols});
      loom::eval_info info;
      expect_one_launch([&] {
        y = loom::unpack(q);
        info = loom::last_eval();
      });
      CHECK(info.path == loom::eval_path::contiguous);
      // A vector step reads 16 bytes of the packed row: 32 values.
      CHECK(info.vector_width == (on_device ? 32 : 1));
      const auto yh = on_host(y);
      index_t bad = 0;
      for (index_t r = 0; r < rows; ++r)
        for (index_t k = 0; k < cols; ++k)
          bad += yh.data()[r * cols + k] != logical_value<P>(bytes_of(qh) + r * packed_cols, 1, k);
      CHECK(bad == 0);
    }
}

TEST_CASE("unpack's vector forms (load, row_load) agree with its element reads at every start",
          "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("unpack vector forms"));
  const index_t rows = 5, packed_cols = 40, cols = 2 * packed_cols;
  const auto qh = random_packed<loom::fp4x2>(loom::shape<2>{rows, packed_cols}, g);
  loom::detail::bind_info info;
  const auto b = loom::detail::bind_for_read(loom::unpack(qh), loom::shape<2>{rows, cols}, info);
  CHECK(info.contiguous);
  for (index_t k = 0; k < rows * cols; ++k)
    REQUIRE(b.at_linear(k) == logical_value<loom::fp4x2>(bytes_of(qh), 1, k));
  loom_test::check_vector_forms<32>(b, rows * cols, cols);
  loom_test::check_vector_forms<16>(b, rows * cols, cols);
  loom_test::check_vector_forms<1>(b, rows * cols, cols);
}

TEST_CASE("unpack under strided outer axes, broadcasting and rank 3", "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("unpack strided"));
  const index_t rows = 7, packed_cols = 33, cols = 2 * packed_cols;
  SECTION("rows and a column range of a wider packed tensor (innermost contiguous)") {
    const auto wide_h = random_packed<loom::int4x2>(loom::shape<2>{2 * rows, packed_cols + 5}, g);
    const auto wide = in_space(wide_h);
    const auto v = wide.slice(range(1, loom::none, 2), range(3, 3 + packed_cols));
    auto y = poisoned_floats(loom::shape<2>{rows, cols});
    expect_one_launch([&] { y = loom::unpack(v); });
    CHECK(loom::last_eval().path == loom::eval_path::general);
    // A row reduction over rows of 33 bytes, 38 apart: not 16-byte aligned,
    // so the row kernel's general form.
    auto m = poisoned_floats(loom::shape<2>{rows, 1});
    expect_one_launch([&] { m = loom::row_max(loom::unpack(v)) + loom::row_sum(loom::unpack(v)); });
    CHECK(loom::last_eval().path == loom::eval_path::rows);
    CHECK(loom::last_eval().vector_width == 1);
    const auto yh = on_host(y);
    const auto mh = on_host(m);
    index_t bad = 0;
    for (index_t r = 0; r < rows; ++r) {
      double most = -100, total = 0;
      for (index_t k = 0; k < cols; ++k) {
        const double want = logical_value<loom::int4x2>(bytes_of(wide_h) + (2 * r + 1) * (packed_cols + 5) + 3, 1, k);
        bad += yh.data()[r * cols + k] != want;
        most = std::max(most, want);
        total += want;
      }
      bad += mh.data()[r] != most + total;  // small integers: exact in float
    }
    CHECK(bad == 0);
  }
  SECTION("one packed row broadcast over the rows of x (periodic), and a rank-3 middle axis") {
    const auto xh = [&] {
      loom::host_tensor<float, 3> h({rows, 3, cols});
      for (index_t i = 0; i < h.size(); ++i) h.data()[i] = loom_test::random_value<float>(g, -2, 2);
      return h;
    }();
    const auto x = in_space(xh);
    const auto rh = random_packed<loom::fp4x2>(loom::shape<2>{1, packed_cols}, g);
    const auto row = in_space(rh);
    const auto mh = random_packed<loom::fp4x2>(loom::shape<2>{rows, packed_cols}, g);
    const auto m = in_space(mh);
    auto y = poisoned_floats(loom::shape<3>{rows, 3, cols});
    expect_one_launch([&] { y = loom::unpack(row) * x; });
    // A period of 66 values: the host's periodic loop; on the device a
    // vector step of 32 would straddle the period's end, so the general path.
    CHECK(loom::last_eval().path == (on_device ? loom::eval_path::general : loom::eval_path::contiguous));
    auto z = poisoned_floats(loom::shape<3>{rows, 3, cols});
    // [rows, 1, K/2] against [rows, 3, K]: broadcast along the middle axis.
    expect_one_launch([&] { z = loom::unpack(m.view().unsqueeze(1)) * x; });
    const auto yh = on_host(y);
    const auto zh = on_host(z);
    index_t bad = 0;
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < 3; ++j)
        for (index_t k = 0; k < cols; ++k) {
          const index_t i = (r * 3 + j) * cols + k;
          const double xv = xh.data()[i];
          bad += yh.data()[i] != static_cast<float>(logical_value<loom::fp4x2>(bytes_of(rh), 1, k) * xv);
          bad += zh.data()[i] !=
                 static_cast<float>(logical_value<loom::fp4x2>(bytes_of(mh) + r * packed_cols, 1, k) * xv);
        }
    CHECK(bad == 0);
  }
}

TEST_CASE("dequantize(unpack(w4), s) fuses into one kernel with activations, biases and row reductions",
          "[lowp]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("unpack fused"));
  const index_t rows = 37, cols = 96;
  loom::host_tensor<float, 2> wh({rows, cols}), xh({rows, cols});
  loom::host_tensor<float, 1> bh({cols});
  for (index_t i = 0; i < wh.size(); ++i) wh.data()[i] = loom_test::random_value<float>(g, -5, 5);
  for (index_t i = 0; i < xh.size(); ++i) xh.data()[i] = loom_test::random_value<float>(g, -2, 2);
  for (index_t i = 0; i < bh.size(); ++i) bh.data()[i] = loom_test::random_value<float>(g, -1, 1);
  const auto w = in_space(wh);
  const auto x = in_space(xh);
  const auto bias = in_space(bh);
  auto gelu_ref = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
  SECTION("NVFP4-style fp4 weights, per-block scales; a row maximum in a layer") {
    loom::tensor<loom::fp4x2, 2, space_t> w4({rows, cols / 2});
    loom::tensor<loom::e4m3, 2, space_t> s({rows, cols / 16});
    loom::quantize_packed(w4, s, w, 16);
    const auto w4h = on_host(w4);
    const auto sh = on_host(s);
    auto dq = [&](index_t r, index_t k) {
      return logical_value<loom::fp4x2>(bytes_of(w4h) + r * (cols / 2), 1, k) *
             static_cast<double>(static_cast<float>(sh.data()[r * (cols / 16) + k / 16]));
    };
    auto y = poisoned_floats(loom::shape<2>{rows, cols});
    expect_one_launch([&] {
      // Blocks of 8 bytes are blocks of 16 values.
      loom::blocks(y, 16) =
          loom::dequantize(loom::unpack(loom::blocks(w4, 8)), s.view().unsqueeze(-1)) * loom::blocks(x, 16);
    });
    // The same through a layer: the row maximum of |w| per row, one row kernel.
    constexpr auto amax_rows = loom::layer([](auto q, auto scales) {
      return loom::row_max(loom::abs(loom::dequantize(loom::unpack(q), scales)));
    });
    loom::tensor<float, 2, space_t> one_scale({rows, 1});
    loom::tensor<loom::fp4x2, 2, space_t> r4({rows, cols / 2});
    loom::quantize_packed(r4, one_scale, w, cols);
    const auto r4h = on_host(r4);
    const auto osh = on_host(one_scale);
    auto m = poisoned_floats(loom::shape<2>{rows, 1});
    expect_one_launch([&] { m = amax_rows(r4, one_scale); });
    CHECK(loom::last_eval().path == loom::eval_path::rows);
    const auto yh = on_host(y);
    const auto mh = on_host(m);
    index_t bad = 0;
    for (index_t r = 0; r < rows; ++r) {
      double amax = 0;
      for (index_t k = 0; k < cols; ++k) {
        const double want = dq(r, k) * xh.data()[r * cols + k];
        bad += std::fabs(yh.data()[r * cols + k] - want) > 1e-6 * (1 + std::fabs(want));
        amax = std::max(amax, std::fabs(logical_value<loom::fp4x2>(bytes_of(r4h) + r * (cols / 2), 1, k) *
                                        static_cast<double>(osh.data()[r])));
      }
      bad += std::fabs(mh.data()[r] - amax) > 1e-6 * amax;
    }
    CHECK(bad == 0);
  }
  SECTION("int4 weights: gelu(cast<float>(unpack(q)) * s + b), and a softmax over the unpacked rows") {
    loom::tensor<loom::int4x2, 2, space_t> q({rows, cols / 2});
    loom::tensor<float, 2, space_t> s({rows, 1});
    loom::quantize_packed(q, s, w, cols);
    const auto qh = on_host(q);
    const auto sh = on_host(s);
    auto y = poisoned_floats(loom::shape<2>{rows, cols});
    expect_one_launch([&] { y = loom::gelu(loom::cast<float>(loom::unpack(q)) * s + bias); });
    auto p = poisoned_floats(loom::shape<2>{rows, cols});
    expect_one_launch([&] {
      const auto u = loom::dequantize(loom::unpack(q), s);
      p = loom::exp(u - loom::row_max(u)) / loom::row_sum(loom::exp(u - loom::row_max(u)));
    });
    // Rows of 48 bytes, 16-byte aligned: the row kernel's vector form, 32 values a step.
    if (on_device) CHECK(loom::last_eval().vector_width == 32);
    const auto yh = on_host(y);
    const auto ph = on_host(p);
    index_t bad = 0;
    for (index_t r = 0; r < rows; ++r) {
      std::vector<double> u(cols);
      for (index_t k = 0; k < cols; ++k)
        u[k] = logical_value<loom::int4x2>(bytes_of(qh) + r * (cols / 2), 1, k) * sh.data()[r];
      const double umax = *std::max_element(u.begin(), u.end());
      double total = 0;
      for (index_t k = 0; k < cols; ++k) total += std::exp(u[k] - umax);
      for (index_t k = 0; k < cols; ++k) {
        const double want = gelu_ref(u[k] + bh.data()[k]);
        bad += std::fabs(yh.data()[r * cols + k] - want) > 1e-5 * (1 + std::fabs(want));
        const double pw = std::exp(u[k] - umax) / total;
        bad += std::fabs(ph.data()[r * cols + k] - pw) > 1e-5 * pw + 1e-7;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("unpack refuses views that would split bytes and shapes that do not broadcast", "[lowp]" LOOM_TEST_TAG) {
  loom::tensor<loom::fp4x2, 2, space_t> q({4, 6});
  CHECK_THROWS_WITH(loom::unpack(q.view().t()),
                    "loom: unpack() reads the pairs of a packed 4-bit view along its innermost axis, which must be "
                    "contiguous (stride 1, whole bytes); a view of shape [6, 4] with strides [1, 6] (transposed or "
                    "stepped) would split bytes: unpack the whole rows and transpose or slice the result's consumer "
                    "instead");
  CHECK_THROWS_AS(loom::unpack(q.slice(whole, range(0, 6, 2))), loom::shape_error);
  // [4, 6] packed is [4, 12] logical: not [4, 6].
  auto y = poisoned_floats(loom::shape<2>{4, 6});
  CHECK_THROWS_AS(y = loom::unpack(q), loom::shape_error);
  CHECK(std::isnan(on_host(y).data()[0]));
}
