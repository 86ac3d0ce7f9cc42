// SPDX-License-Identifier: Apache-2.0
// Random row-reduction layers (softmax, log_softmax, layer_norm, rms_norm and
// row_* compositions) on random shapes and strided, permuted, broadcast views,
// against plain double loops over each row. The including file defines
// LOOM_TEST_SPACE and LOOM_TEST_TAG.
#include <tuple>

#include "random_support.hpp"

using loom_random::index_t;

namespace {
using space_t = LOOM_TEST_SPACE;
constexpr bool on_device = std::is_same_v<space_t, loom::device>;
using row = std::vector<double>;

// A layer: the loom expression from x, y [N, C] and w, b [C]; the reference
// output row (length C, or 1 for reductions) from the rows of x and y.
struct l_softmax {
  static constexpr const char* name = "softmax(x)";
  static constexpr bool reduces = false, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y&, const W&, const B&) { return loom::softmax(x); }
  static row ref(const row& x, const row&, const row&, const row&) {
    double m = -INFINITY, s = 0;
    for (double v : x) m = std::max(m, v);
    for (double v : x) s += std::exp(v - m);
    row o;
    for (double v : x) o.push_back(std::exp(v - m) / s);
    return o;
  }
};
struct l_log_softmax {
  static constexpr const char* name = "log_softmax(x)";
  static constexpr bool reduces = false, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y&, const W&, const B&) { return loom::log_softmax(x); }
  static row ref(const row& x, const row&, const row&, const row&) {
    double m = -INFINITY, s = 0;
    for (double v : x) m = std::max(m, v);
    for (double v : x) s += std::exp(v - m);
    row o;
    for (double v : x) o.push_back(v - m - std::log(s));
    return o;
  }
};
struct l_softmax_bias {
  static constexpr const char* name = "softmax(x, y, 0.7)";
  static constexpr bool reduces = false, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y& y, const W&, const B&) { return loom::softmax(x, y, 0.7); }
  static row ref(const row& x, const row& y, const row&, const row&) {
    row z;
    for (std::size_t j = 0; j < x.size(); ++j) z.push_back(x[j] / 0.7 + y[j]);
    return l_softmax::ref(z, y, y, y);
  }
};
struct l_layer_norm {
  static constexpr const char* name = "layer_norm(x, w, b, 1e-5)";
  static constexpr bool reduces = false, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y&, const W& w, const B& b) { return loom::layer_norm(x, w, b, 1e-5); }
  static row ref(const row& x, const row&, const row& w, const row& b) {
    double mean = 0, var = 0;
    for (double v : x) mean += v;
    mean /= static_cast<double>(x.size());
    for (double v : x) var += (v - mean) * (v - mean);
    var /= static_cast<double>(x.size());
    row o;
    for (std::size_t j = 0; j < x.size(); ++j) o.push_back((x[j] - mean) / std::sqrt(var + 1e-5) * w[j] + b[j]);
    return o;
  }
};
struct l_rms_norm {
  static constexpr const char* name = "rms_norm(x, w, 1e-6)";
  static constexpr bool reduces = false, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y&, const W& w, const B&) { return loom::rms_norm(x, w, 1e-6); }
  static row ref(const row& x, const row&, const row& w, const row&) {
    double ms = 0;
    for (double v : x) ms += v * v;
    ms /= static_cast<double>(x.size());
    row o;
    for (std::size_t j = 0; j < x.size(); ++j) o.push_back(x[j] / std::sqrt(ms + 1e-6) * w[j]);
    return o;
  }
};
struct l_minmax {
  static constexpr const char* name = "(x - row_min(x)) / (row_max(x) - row_min(x) + 1)";
  static constexpr bool reduces = false, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y&, const W&, const B&) {
    return (x - loom::row_min(x)) / (loom::row_max(x) - loom::row_min(x) + 1);
  }
  static row ref(const row& x, const row&, const row&, const row&) {
    const double mn = *std::min_element(x.begin(), x.end()), mx = *std::max_element(x.begin(), x.end());
    row o;
    for (double v : x) o.push_back((v - mn) / (mx - mn + 1));
    return o;
  }
};
struct l_mixed {
  static constexpr const char* name = "x * row_sum(y) - row_mean(x * y) + w";
  static constexpr bool reduces = false, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y& y, const W& w, const B&) {
    return x * loom::row_sum(y) - loom::row_mean(x * y) + w;
  }
  static row ref(const row& x, const row& y, const row& w, const row&) {
    double s = 0, m = 0;
    for (std::size_t j = 0; j < x.size(); ++j) s += y[j], m += x[j] * y[j];
    m /= static_cast<double>(x.size());
    row o;
    for (std::size_t j = 0; j < x.size(); ++j) o.push_back(x[j] * s - m + w[j]);
    return o;
  }
};
struct l_sum_squares {
  static constexpr const char* name = "row_sum(x * x) (into [N, 1])";
  static constexpr bool reduces = true, max_of_empty = false;
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y&, const W&, const B&) { return loom::row_sum(x * x); }
  static row ref(const row& x, const row&, const row&, const row&) {
    double s = 0;
    for (double v : x) s += v * v;
    return {s};
  }
};
struct l_max_abs {
  static constexpr const char* name = "row_max(abs(x - y)) (into [N, 1])";
  static constexpr bool reduces = true, max_of_empty = true;  // row_max of an empty row throws
  template <class X, class Y, class W, class B>
  static auto expr(const X& x, const Y& y, const W&, const B&) { return loom::row_max(loom::abs(x - y)); }
  static row ref(const row& x, const row& y, const row&, const row&) {
    double m = -INFINITY;
    for (std::size_t j = 0; j < x.size(); ++j) m = std::max(m, std::fabs(x[j] - y[j]));
    return {m};
  }
};
using layers = std::tuple<l_softmax, l_log_softmax, l_softmax_bias, l_layer_norm, l_rms_norm, l_minmax, l_mixed,
                          l_sum_squares, l_max_abs>;

template <class X, class P>
struct dtypes {
  using x = X;  // x and y
  using p = P;  // w and b
};
using all_dtypes = std::tuple<dtypes<float, float>, dtypes<double, double>, dtypes<loom::half, loom::half>,
                              dtypes<loom::bf16, loom::bf16>, dtypes<loom::bf16, float>>;

// Tolerance of a result stored as T: relative, and absolute in units of the row's scale.
template <class T>
std::pair<double, double> tolerance() {
  if constexpr (std::is_same_v<T, double>)
    return {1e-12, 1e-12};
  else if constexpr (std::is_same_v<T, float>)
    return {2e-5, 2e-5};
  else if constexpr (std::is_same_v<T, loom::half>)
    return {2e-3, 2e-3};
  else
    return {1.6e-2, 1.6e-2};
}

template <class Layer, class Types>
void run_layer_case(std::uint64_t seed, long case_no, loom_random::stats& st) {
  using namespace loom_random;
  using TX = typename Types::x;
  using TP = typename Types::p;
  rng r(seed);
  std::vector<index_t> ext = random_extents(r, 2, 30000);
  if (r.chance(0.1)) ext[1] = r.pick(2049, 3000);  // a block per row on the GPU
  if (ext[0] * ext[1] > 60000) ext[0] = std::max<index_t>(1, 60000 / std::max<index_t>(ext[1], 1));
  const index_t n_rows = ext[0], cols = ext[1];
  operand<TX, 2, space_t> x, y;
  operand<TP, 1, space_t> w, b;
  std::string err = x.build(r, random_layout(r, ext, false), ext, true);
  if (err.empty()) err = y.build(r, random_layout(r, {r.chance(0.2) ? 1 : n_rows, cols}, true), ext, true);
  if (err.empty()) err = w.build(r, random_layout(r, {cols}, true), ext, true);
  if (err.empty()) err = b.build(r, random_layout(r, {cols}, true), ext, true);
  const auto e = Layer::expr(x.v, y.v, w.v, b.v);
  using O = typename loom::detail::node_t<decltype(e)>::value_type;
  const std::vector<index_t> out_ext{n_rows, Layer::reduces ? 1 : cols};
  operand<O, 2, space_t> out;
  if (err.empty()) err = out.build(r, random_layout(r, out_ext, false), out_ext, false);
  auto describe = [&] {
    std::ostringstream s;
    s << "LOOM_RANDOM_SEED=" << base_seed() << " LOOM_RANDOM_CASE=" << case_no << " (" << (on_device ? "device" : "host")
      << ", layers): " << Layer::name << ", x and y " << ref::kind_name(ref::kind_of<TX>()) << ", w and b "
      << ref::kind_name(ref::kind_of<TP>()) << ", output " << ref::kind_name(ref::kind_of<O>()) << " "
      << str(out_ext) << "\n  x: " << x.lay.describe() << "\n  y: " << y.lay.describe()
      << "\n  w: " << w.lay.describe() << "\n  b: " << b.lay.describe() << "\n  out: " << out.lay.describe() << "\n  ";
    return s.str();
  };
  if (!err.empty()) {
    FAIL_CHECK(describe() << err);
    return;
  }
  const index_t n = n_rows * out_ext[1];
  const auto before = launches_in_space<space_t>();
  loom::eval_info info;
  try {
    if (Layer::max_of_empty && cols == 0 && n > 0) {
      CHECK_THROWS_AS(loom::assign(out.v, e), loom::shape_error);
      ++st.cases;
      return;
    }
    info = loom::assign(out.v, e);
  } catch (const std::exception& ex) {
    FAIL_CHECK(describe() << "loom threw: " << ex.what());
    return;
  }
  const auto launched = launches_in_space<space_t>() - before;
  ++st.cases;
  count_path(st, info.path);
  st.row_cached += info.cached_rows > 0;
  const auto want_path = n == 0 ? loom::eval_path::empty : loom::eval_path::rows;
  if (launched != (n > 0 ? 1u : 0u) || info.path != want_path) {
    FAIL_CHECK(describe() << launched << " launches on the " << path_name(info.path) << " path; want "
                          << (n > 0 ? 1 : 0) << " on the " << path_name(want_path) << " path");
    return;
  }
  const auto after = loom::to_host(out.mem);
  std::vector<char> written(static_cast<std::size_t>(after.size()), 0);
  const auto [rel, abs_tol] = tolerance<O>();
  for (index_t i = 0; i < n_rows && n > 0; ++i) {
    row xr, yr, wr, br;
    for (index_t j = 0; j < cols; ++j) {
      const index_t o[2] = {i, j};
      xr.push_back(loom_test::as_double(x.at_output(o, 2)));
      yr.push_back(loom_test::as_double(y.at_output(o, 2)));
      wr.push_back(loom_test::as_double(w.at_output(o, 2)));
      br.push_back(loom_test::as_double(b.at_output(o, 2)));
    }
    const row want = Layer::ref(xr, yr, wr, br);
    double scale = 1;
    for (double v : want) scale = std::max(scale, std::fabs(v));
    for (index_t j = 0; j < out_ext[1]; ++j) {
      const index_t o[2] = {i, j};
      const index_t off = out.lay.offset(o);
      written[static_cast<std::size_t>(off)] = 1;
      const double got = loom_test::as_double(after.data()[off]), w0 = want[static_cast<std::size_t>(j)];
      ++st.elements;
      const bool ok = std::isnan(w0) ? std::isnan(got) : std::fabs(got - w0) <= rel * std::fabs(w0) + abs_tol * scale;
      if (!ok) {
        FAIL_CHECK(describe() << "output element [" << i << ", " << j << "]: got " << got << ", want " << w0
                              << " (row of " << cols << ")");
        return;
      }
    }
  }
  for (index_t i = 0; i < after.size(); ++i)
    if (!written[static_cast<std::size_t>(i)] && !loom_test::same_bits(after.data()[i], out.host.data()[i])) {
      FAIL_CHECK(describe() << "element " << i << " of the output's buffer lies outside the output view but was written");
      return;
    }
}

struct layer_entry {
  void (*run)(std::uint64_t, long, loom_random::stats&);
};
template <class Types, std::size_t... I>
void add_layers(std::vector<layer_entry>& t, std::index_sequence<I...>) {
  (t.push_back(layer_entry{&run_layer_case<std::tuple_element_t<I, layers>, Types>}), ...);
}
template <std::size_t... D>
std::vector<layer_entry> make_layer_table(std::index_sequence<D...>) {
  std::vector<layer_entry> t;
  (add_layers<std::tuple_element_t<D, all_dtypes>>(t, std::make_index_sequence<std::tuple_size_v<layers>>{}), ...);
  return t;
}
}  // namespace

TEST_CASE("random row-reduction layers on strided views match double references", "[random][rows]" LOOM_TEST_TAG) {
  const auto table = make_layer_table(std::make_index_sequence<std::tuple_size_v<all_dtypes>>{});
  const long n = loom_random::case_count(1500), only = loom_random::only_case();
  loom_random::stats st;
  // Every other round over the table keeps no computed values (each pass
  // computes what it uses), so both forms meet the same references.
  struct values_guard {
    bool saved = loom::detail::rows::row_cache_values();
    ~values_guard() { loom::detail::rows::row_cache_values() = saved; }
  } keep_values;
  for (long k = 0; k < n; ++k) {
    if (only >= 0 && k != only) continue;
    const std::uint64_t seed = loom_random::mix(loom_random::base_seed() ^ 0x1a7e55ull, static_cast<std::uint64_t>(k));
    loom::detail::rows::row_cache_values() = (static_cast<std::size_t>(k) / table.size()) % 2 == 0;
    table[static_cast<std::size_t>(k) % table.size()].run(seed, k, st);
  }
  st.print(on_device ? "layers [cuda]" : "layers");
  CHECK(st.cases == (only >= 0 ? 1 : n));
}

namespace {
// Restores the row-cache budget when a test ends, also by an exception.
struct budget_guard {
  std::size_t saved = loom::detail::rows::row_cache_budget();
  ~budget_guard() { loom::detail::rows::row_cache_budget() = saved; }
};
// Keeps no computed values in the row cache while it lives.
struct values_off {
  bool saved = loom::detail::rows::row_cache_values();
  values_off() { loom::detail::rows::row_cache_values() = false; }
  ~values_off() { loom::detail::rows::row_cache_values() = saved; }
};

template <class T, std::size_t R>
loom::tensor<T, R, space_t> in_space_copy(const loom::tensor<T, R, loom::host>& h) {
  if constexpr (on_device) {
    return loom::to_device(h);
  } else {
    loom::tensor<T, R, loom::host> c(h.extents());
    loom::assign(c, h);
    return c;
  }
}

template <class T, std::size_t R>
std::vector<double> host_values(const loom::tensor<T, R, space_t>& t) {
  const auto h = loom::to_host(t);
  std::vector<double> v;
  for (index_t i = 0; i < h.size(); ++i) v.push_back(loom_test::as_double(h.data()[i]));
  return v;
}

// Input rows the cache holds: the device caches the rows that several
// passes read; the host reads dense rows in place by pointer and copies
// rows only for trees with an operand read through coordinates.
constexpr int dense_rows(int on_the_device) { return on_device ? on_the_device : 0; }

// Evaluates `make()` into `out` with the row cache on and off: the results
// must be bit-identical (the passes do the same arithmetic in the same order,
// only the memory they read differs). Returns the cached row count.
template <class T, std::size_t R, class Make>
int cached_vs_uncached(loom::tensor<T, R, space_t>& out, const Make& make) {
  budget_guard keep;
  auto off = loom::empty_like(out);
  loom::fill(off, loom_test::poison_value<T>());
  loom::detail::rows::row_cache_budget() = 0;
  loom::assign(off, make());
  const auto info_off = loom::last_eval();
  CHECK(info_off.cached_rows == 0);
  loom::detail::rows::row_cache_budget() = keep.saved;
  loom::fill(out, loom_test::poison_value<T>());
  const auto info_on = loom::assign(out, make());
  const int cached = info_on.cached_rows;
  // The cache never switches the vector form on or off: it would change
  // each lane's order of summation on the device.
  CHECK(info_on.vector_width == info_off.vector_width);
  const auto a = loom::to_host(out), b = loom::to_host(off);
  for (index_t i = 0; i < a.size(); ++i)
    if (!loom_test::same_bits(a.data()[i], b.data()[i])) {
      FAIL_CHECK("element " << i << " differs with the row cache on (" << loom_test::as_double(a.data()[i])
                            << ") and off (" << loom_test::as_double(b.data()[i]) << ")");
      break;
    }
  return cached;
}
}  // namespace

TEST_CASE("rows read by several passes are cached on chip, with bit-identical results", "[rows][cache]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("row cache"));
  const index_t n = 5;
  // 1536 floats: 8 cached rows of a block of warps are exactly 48 KiB, which
  // with the kernel's static shared memory needs its limit raised.
  for (index_t cols : {1, 7, 33, 1000, 1536, 4099}) {
    INFO("rows of " << cols);
    loom::tensor<float, 2, loom::host> xh({n, cols}), dyh({n, cols}), zh({n, 9});
    loom::tensor<float, 1, loom::host> wh({cols});
    for (auto* t : {&xh, &dyh}) loom_test::randomize(t->view(), g);
    loom_test::randomize(zh.view(), g);
    loom_test::randomize(wh.view(), g);
    auto x = in_space_copy(xh);
    const auto dy = in_space_copy(dyh), z = in_space_copy(zh);
    const auto w = in_space_copy(wh);
    loom::tensor<float, 2, space_t> y({n, cols});

    // softmax reads x in three passes (max, sum, output): one cached row.
    CHECK(cached_vs_uncached(y, [&] { return loom::softmax(x); }) == dense_rows(1));
    const auto xs = host_values(x), ys = host_values(y);
    for (index_t r = 0; r < n; ++r) {
      double m = -INFINITY, s = 0;
      for (index_t c = 0; c < cols; ++c) m = std::max(m, xs[static_cast<std::size_t>(r * cols + c)]);
      for (index_t c = 0; c < cols; ++c) s += std::exp(xs[static_cast<std::size_t>(r * cols + c)] - m);
      for (index_t c = 0; c < cols; ++c) {
        const double want = std::exp(xs[static_cast<std::size_t>(r * cols + c)] - m) / s;
        REQUIRE(std::fabs(ys[static_cast<std::size_t>(r * cols + c)] - want) <= 1e-5 * want + 1e-7);
      }
    }
    // In place: the row is cached before any of it is written.
    auto yi = loom::empty_like(x);
    loom::assign(yi, x);
    CHECK(loom::assign(yi, loom::softmax(yi)).cached_rows == dense_rows(1));
    CHECK(host_values(yi) == ys);
    // x and dy are both read by several passes; the weight is the same row
    // for every row and stays in place.
    CHECK(cached_vs_uncached(y, [&] { return loom::layer_norm_backward_input(x, w, dy, 1e-5); }) == dense_rows(2));
    CHECK(cached_vs_uncached(y, [&] { return loom::rms_norm(x, w, 1e-6); }) == dense_rows(1));
    // Rows read by one pass each gain nothing and are not cached.
    CHECK(cached_vs_uncached(y, [&] { return x * loom::row_sum(dy); }) == 0);
    // A reduction over rows of another length (z has 9 columns) caches z's
    // row at its own length.
    CHECK(cached_vs_uncached(y, [&] { return x + loom::row_sum(z) * loom::row_max(z); }) == dense_rows(1));
    // Rows at an odd offset (a column slice: no 16-byte aligned rows) are
    // cached too, and run the same scalar form with and without the cache.
    loom::tensor<float, 2, loom::host> wideh({n, cols + 1});
    loom_test::randomize(wideh.view(), g);
    const auto wide = in_space_copy(wideh);
    const auto xo = wide.view().slice(loom::whole, loom::range(1, loom::none));
    CHECK(cached_vs_uncached(y, [&] { return loom::softmax(xo); }) == dense_rows(1));
    // Strided rows (a transposed view) are not cached and stay correct; with
    // one column the transposed view is one contiguous row.
    loom::tensor<float, 2, space_t> yt({cols, n});
    const auto xt = x.t();
    CHECK(cached_vs_uncached(yt, [&] { return loom::softmax(xt); }) == dense_rows(cols == 1 ? 1 : 0));
    // An operand read through coordinates (a transposed view, 32 columns or
    // more) makes the host read every row of the tree that way: then it
    // copies x's row, which three passes read, as the device does.
    loom::tensor<float, 2, loom::host> th({cols, n});
    loom_test::randomize(th.view(), g);
    const auto tt = in_space_copy(th);
    const auto tv = tt.view().t();
    CHECK(cached_vs_uncached(y, [&] { return loom::softmax(x) + tv; }) == (on_device || cols >= 32 ? 1 : 0));
  }
  // Rows that do not fit the budget are read in place.
  loom::tensor<float, 2, loom::host> bigh({3, 30001});
  loom_test::randomize(bigh.view(), g);
  const auto big = in_space_copy(bigh);
  loom::tensor<float, 2, space_t> yb({3, 30001});
  CHECK(cached_vs_uncached(yb, [&] { return loom::softmax(big); }) == 0);
  {
    budget_guard keep;
    loom::detail::rows::row_cache_budget() = std::size_t{1} << 20;
    loom::fill(yb, loom_test::poison_value<float>());
    const int cached = loom::assign(yb, loom::softmax(big)).cached_rows;
#if LOOM_CUDA_COMPILER
    // One block per row: cached when 120 KB fit the device's shared memory.
    int dev = 0;
    REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
    CHECK(cached == (loom::detail::rows::smem_per_block(dev) >= 30001 * 4 ? 1 : 0));
#else
    CHECK(cached == 0);  // dense rows, read in place
#endif
  }
}

TEST_CASE("LOOM_ROW_CACHE_BYTES is a number of bytes", "[rows][cache]" LOOM_TEST_TAG) {
  using loom::detail::rows::parse_row_cache_bytes;
  CHECK(parse_row_cache_bytes(nullptr) == 96 * 1024);
  CHECK(parse_row_cache_bytes("") == 96 * 1024);
  CHECK(parse_row_cache_bytes("0") == 0);
  CHECK(parse_row_cache_bytes("65536") == 65536);
  CHECK_THROWS_WITH(parse_row_cache_bytes("64k"), Catch::Contains("LOOM_ROW_CACHE_BYTES") && Catch::Contains("'64k'"));
  CHECK_THROWS_AS(parse_row_cache_bytes("-1"), loom::value_error);
}

namespace {
// Evaluates `make()` into `out` with computed values kept and recomputed:
// the results must be bit-identical (a kept value is stored in its compute
// type). Returns what the kept run reported.
template <class T, std::size_t R, class Make>
loom::eval_info values_kept_vs_recomputed(loom::tensor<T, R, space_t>& out, const Make& make) {
  auto off = loom::empty_like(out);
  loom::fill(off, loom_test::poison_value<T>());
  loom::eval_info info_off;
  {
    values_off no_values;
    info_off = loom::assign(off, make());
  }
  CHECK(info_off.cached_values == 0);
  loom::fill(out, loom_test::poison_value<T>());
  const auto info_on = loom::assign(out, make());
  CHECK(info_on.vector_width == info_off.vector_width);
  CHECK(info_off.recomputed_values == info_on.cached_values + info_on.recomputed_values);
  const auto a = loom::to_host(out), b = loom::to_host(off);
  for (index_t i = 0; i < a.size(); ++i)
    if (!loom_test::same_bits(a.data()[i], b.data()[i])) {
      FAIL_CHECK("element " << i << " differs with computed values kept (" << loom_test::as_double(a.data()[i])
                            << ") and recomputed (" << loom_test::as_double(b.data()[i]) << ")");
      break;
    }
  return info_on;
}

// Groups of threads that share a block's cache budget for rows of `cols`.
std::size_t cache_groups(index_t cols) {
  if constexpr (on_device) return cols <= 2048 ? 8 : 1;
  return 1;
}
std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }
}  // namespace

TEST_CASE("values that several passes use are computed once per row and kept in the row cache",
          "[rows][cache]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("row values"));
  const index_t n = 5;
  for (index_t cols : {1, 7, 33, 1000, 4099}) {
    INFO("rows of " << cols);
    loom::tensor<float, 2, loom::host> xh({n, cols}), dyh({n, cols});
    loom::tensor<float, 1, loom::host> wh({cols}), bh({cols});
    for (auto* t : {&xh, &dyh}) loom_test::randomize(t->view(), g);
    loom_test::randomize(wh.view(), g);
    loom_test::randomize(bh.view(), g);
    const auto x = in_space_copy(xh), dy = in_space_copy(dyh);
    const auto w = in_space_copy(wh), b = in_space_copy(bh);
    loom::tensor<float, 2, space_t> y({n, cols});

    // softmax: e = exp(x - row_max(x)) is computed by the sum's pass and
    // read by the output pass; x's row is still read by two passes.
    auto info = values_kept_vs_recomputed(y, [&] { return loom::softmax(x); });
    CHECK(info.cached_values == 1);
    CHECK(info.cached_rows == dense_rows(1));
    const auto xs = host_values(x), ys = host_values(y);
    for (index_t r = 0; r < n; ++r) {
      double m = -INFINITY, s = 0;
      for (index_t c = 0; c < cols; ++c) m = std::max(m, xs[static_cast<std::size_t>(r * cols + c)]);
      for (index_t c = 0; c < cols; ++c) s += std::exp(xs[static_cast<std::size_t>(r * cols + c)] - m);
      for (index_t c = 0; c < cols; ++c) {
        const double want = std::exp(xs[static_cast<std::size_t>(r * cols + c)] - m) / s;
        REQUIRE(std::fabs(ys[static_cast<std::size_t>(r * cols + c)] - want) <= 1e-5 * want + 1e-7);
      }
    }
    // A user layer over placeholders: the same value, kept the same way.
    constexpr auto my_softmax = loom::layer([](auto z) {
      auto e = exp(z - row_max(z));
      return e / row_sum(e);
    });
    CHECK(values_kept_vs_recomputed(y, [&] { return my_softmax(x); }).cached_values == 1);
    CHECK(host_values(y) == ys);
    // In place: the output pass reads the kept values and x's cached row.
    auto yi = loom::empty_like(x);
    loom::assign(yi, x);
    const auto in_place = loom::assign(yi, loom::softmax(yi));
    CHECK(in_place.cached_values == 1);
    CHECK(host_values(yi) == ys);
    // A strided (transposed) input: the values are kept though the strided
    // row itself is not cached (values alone). With a temperature and a
    // bias the tree has 8 leaf occurrences, more than max_kept_tree_leaves:
    // it runs as written on the device (its vector kernel spilled with e
    // kept on sm_90); the host keeps e (host_max_kept_tree_leaves).
    const auto biased = values_kept_vs_recomputed(y, [&] { return loom::softmax(x, b, 0.7); });
    CHECK(biased.cached_values == (on_device ? 0 : 1));
    CHECK(biased.recomputed_values == 0);
    loom::tensor<float, 2, space_t> yt({cols, n});
    const auto xt = x.view().t();
    const auto strided = values_kept_vs_recomputed(yt, [&] { return loom::softmax(xt); });
    CHECK(strided.cached_values == 1);
    // layer_norm's backward (xhat = (x - mean) * rstd in two passes) has
    // more leaves than max_kept_tree_leaves: nothing kept. One operation
    // (layer_norm's x - mean, log_softmax's x - row_max(x), g = dy * w) is
    // never kept; rms_norm shares nothing.
    for (const auto& one_op : {values_kept_vs_recomputed(y, [&] { return loom::layer_norm_backward_input(x, w, dy, 1e-5); }),
                               values_kept_vs_recomputed(y, [&] { return loom::layer_norm(x, w, b, 1e-5); }),
                               values_kept_vs_recomputed(y, [&] { return loom::log_softmax(x); }),
                               values_kept_vs_recomputed(y, [&] { return loom::rms_norm(x, w, 1e-6); })}) {
      CHECK(one_op.cached_values == 0);
      CHECK(one_op.recomputed_values == 0);
    }
  }
}

TEST_CASE("kept values fall back to recomputing at the cache budget's edge", "[rows][cache]" LOOM_TEST_TAG) {
  std::mt19937_64 g(loom_test::seed_for("row values budget"));
  const index_t n = 3;
  for (index_t cols : {7, 1000, 4099}) {
    INFO("rows of " << cols);
    loom::tensor<float, 2, loom::host> xh({n, cols});
    loom_test::randomize(xh.view(), g);
    const auto x = in_space_copy(xh);
    loom::tensor<float, 2, space_t> y({n, cols});
    budget_guard keep;
    const std::size_t row = round16(static_cast<std::size_t>(cols) * sizeof(float));
    const std::size_t groups = cache_groups(cols);
    // x's row and e's row fit exactly: both kept (the host reads x's dense
    // row in place and keeps e alone).
    loom::detail::rows::row_cache_budget() = 2 * row * groups;
    auto info = values_kept_vs_recomputed(y, [&] { return loom::softmax(x); });
    CHECK(info.cached_rows == dense_rows(1));
    CHECK(info.cached_values == 1);
    // One byte less: x's row alone (reading memory once counts first), e
    // computed again in the output pass; the host still keeps e alone.
    loom::detail::rows::row_cache_budget() = 2 * row * groups - 1;
    info = values_kept_vs_recomputed(y, [&] { return loom::softmax(x); });
    CHECK(info.cached_rows == dense_rows(1));
    CHECK(info.cached_values == (on_device ? 0 : 1));
    CHECK(info.recomputed_values == (on_device ? 1 : 0));
    // Strided rows are never cached; e alone fits exactly, then not.
    loom::tensor<float, 2, loom::host> wideh({n, 2 * cols});
    loom_test::randomize(wideh.view(), g);
    const auto wide = in_space_copy(wideh);
    const auto xs = wide.view().slice(loom::whole, loom::range(0, loom::none, 2));
    loom::detail::rows::row_cache_budget() = row * groups;
    info = values_kept_vs_recomputed(y, [&] { return loom::softmax(xs); });
    CHECK(info.cached_rows == 0);
    CHECK(info.cached_values == 1);
    loom::detail::rows::row_cache_budget() = row * groups - 1;
    info = values_kept_vs_recomputed(y, [&] { return loom::softmax(xs); });
    CHECK(info.cached_values == 0);
    CHECK(info.recomputed_values == 1);
  }
}

TEST_CASE("LOOM_ROW_CACHE_VALUES is 0 or 1", "[rows][cache]" LOOM_TEST_TAG) {
  using loom::detail::rows::parse_row_cache_values;
  CHECK(parse_row_cache_values(nullptr));
  CHECK(parse_row_cache_values(""));
  CHECK(parse_row_cache_values("1"));
  CHECK_FALSE(parse_row_cache_values("0"));
  CHECK_THROWS_AS(parse_row_cache_values("yes"), loom::value_error);
}
