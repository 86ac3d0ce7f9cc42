// SPDX-License-Identifier: Apache-2.0
// Random differentiable layers: loom::grad against central finite
// differences of the reference interpreter (reference.hpp), on random shapes
// and strided, permuted inputs and gradient outputs. Each layer is written
// once as a generic functor of x [N, C], w [C], r [N, 1] and a scalar s: with
// loom's expressions it is the layer that loom differentiates; with the rows
// of reference values below (gref::vec) it is an independent double forward,
// so the finite differences never run loom's code. The including file
// defines LOOM_TEST_SPACE and LOOM_TEST_TAG.
//
// Settings: LOOM_RANDOM_SEED, LOOM_RANDOM_CASES, LOOM_RANDOM_CASE (see
// random_support.hpp). A failure prints the seed, the case number, the layer,
// the shapes and every layout.
#include <cstdint>
#include <numeric>

#include <loom/grad/grad.hpp>

#include "random_support.hpp"

using loom_random::index_t;

// ---------------------------------------------------------------------------
// A row of reference values: C of them (a row of x, w or of a result), or one
// (a row of r, the scalar s, a row reduction), which broadcasts against a row
// as loom's [N, 1] and rank-0 operands do. Every element is computed by the
// reference interpreter's own functions (ref::exp, ref::arith, ...).
namespace loom_random::gref {
struct vec {
  std::vector<ref::rv> e;
};
inline vec lifted(const vec& v) { return v; }
template <class S>
  requires std::is_arithmetic_v<S>
vec lifted(S s) {
  return vec{{ref::lift(s)}};
}
template <class X>
constexpr bool is_vec = std::is_same_v<std::remove_cvref_t<X>, vec>;

inline const ref::rv& at(const vec& v, std::size_t j) { return v.e.size() == 1 ? v.e[0] : v.e[j]; }
template <class F, class... V>
vec zip(F f, const V&... v) {
  const std::size_t n = std::max({v.e.size()...});
  vec out;
  out.e.reserve(n);
  for (std::size_t j = 0; j < n; ++j) out.e.push_back(f(at(v, j)...));
  return out;
}

#define LOOM_GREF_BINARY(op)                                                            \
  template <class A, class B>                                                           \
    requires(is_vec<A> || is_vec<B>)                                                    \
  vec operator op(const A& a, const B& b) {                                             \
    return zip([](const ref::rv& p, const ref::rv& q) { return p op q; }, lifted(a), lifted(b)); \
  }
LOOM_GREF_BINARY(+)
LOOM_GREF_BINARY(-)
LOOM_GREF_BINARY(*)
LOOM_GREF_BINARY(/)
LOOM_GREF_BINARY(<)
LOOM_GREF_BINARY(>)
#undef LOOM_GREF_BINARY
inline vec operator-(const vec& a) {
  return zip([](const ref::rv& p) { return -p; }, a);
}

#define LOOM_GREF_UNARY(fn) \
  inline vec fn(const vec& a) { return zip([](const ref::rv& p) { return ref::fn(p); }, a); }
LOOM_GREF_UNARY(exp)
LOOM_GREF_UNARY(log)
LOOM_GREF_UNARY(sqrt)
LOOM_GREF_UNARY(tanh)
LOOM_GREF_UNARY(sigmoid)
LOOM_GREF_UNARY(gelu)
LOOM_GREF_UNARY(silu)
LOOM_GREF_UNARY(softplus)
LOOM_GREF_UNARY(abs)
LOOM_GREF_UNARY(relu)
#undef LOOM_GREF_UNARY

#define LOOM_GREF_FN2(fn)                                                                           \
  template <class A, class B>                                                                       \
    requires(is_vec<A> || is_vec<B>)                                                                \
  vec fn(const A& a, const B& b) {                                                                  \
    return zip([](const ref::rv& p, const ref::rv& q) { return ref::fn(p, q); }, lifted(a), lifted(b)); \
  }
LOOM_GREF_FN2(pow)
LOOM_GREF_FN2(minimum)
LOOM_GREF_FN2(maximum)
#undef LOOM_GREF_FN2

template <class C, class A, class B>
  requires is_vec<C>
vec where(const C& c, const A& a, const B& b) {
  return zip([](const ref::rv& p, const ref::rv& q, const ref::rv& t) { return ref::where(p, q, t); }, c, lifted(a),
             lifted(b));
}

//! A cast: the reference's, except that a floating cast keeps the value
//! unrounded. loom's rule for a floating cast is the identity (the only
//! useful derivative of a rounding); the rounding itself is a staircase of
//! steps one quantum wide, which finite differences with h ~ 1e-5 would see
//! as noise of quantum / h (ref::cast also leaves every value with an error
//! bound unrounded; this does the same for exact leaves). Integer casts
//! truncate as the reference does: piecewise constant, no gradient.
template <class T>
vec cast(const vec& a) {
  return zip(
      [](const ref::rv& p) {
        ref::rv out = ref::cast<T>(p);
        if constexpr (!std::is_integral_v<T>)
          if (!out.dc) out.v = p.v;
        return out;
      },
      a);
}

//! Row reductions of a row: one value (row_max / row_min of distinct values).
inline vec row_sum(const vec& a) {
  ref::rv s = a.e[0];
  for (std::size_t j = 1; j < a.e.size(); ++j) s = s + a.e[j];
  return vec{{s}};
}
inline vec row_mean(const vec& a) { return row_sum(a) / static_cast<double>(a.e.size()); }
inline vec row_max(const vec& a) {
  ref::rv m = a.e[0];
  for (std::size_t j = 1; j < a.e.size(); ++j) m = ref::maximum(m, a.e[j]);
  return vec{{m}};
}
inline vec row_min(const vec& a) {
  ref::rv m = a.e[0];
  for (std::size_t j = 1; j < a.e.size(); ++j) m = ref::minimum(m, a.e[j]);
  return vec{{m}};
}
//! loom::saved's reference: the value itself.
template <std::size_t K>
vec saved(const vec& a) {
  return a;
}
}  // namespace loom_random::gref

namespace {
using space_t = LOOM_TEST_SPACE;
constexpr bool on_device = std::is_same_v<space_t, loom::device>;
using loom_random::gref::vec;

// The layers. Each is called with x [N, C], w [C], r [N, 1] and s (rank 0):
// loom expressions, or reference rows. Names are unqualified, so
// argument-dependent lookup finds loom's functions or gref's. The inputs are
// drawn on disjoint grids (draw_inputs), so every comparison, min/max, abs,
// relu and row_max below is at least 1/128 away from its kink or tie, far
// beyond the finite differences' step. `reduces`: the layer ends in a row
// reduction (output [N, 1]). `tol`: the relative tolerance of loom's
// gradient (below).
#define LOOM_GRAD_LAYER(id, text, reduces_, tol_, ...)                              \
  struct id {                                                                       \
    static constexpr const char* name = text;                                       \
    static constexpr bool reduces = reduces_;                                       \
    static constexpr double tol = tol_;                                             \
    template <class X, class W, class R, class S>                                   \
    auto operator()(const X& x, const W& w, const R& r, const S& s) const {         \
      __VA_ARGS__                                                                   \
    }                                                                               \
  };
LOOM_GRAD_LAYER(g_math, "exp(x * s) * w + log(x * x + r * r + 0.5) - tanh(x - r) * s", false, 1e-6,
                return exp(x * s) * w + log(x * x + r * r + 0.5) - tanh(x - r) * s;)
LOOM_GRAD_LAYER(g_activations, "gelu(x * w) + silu(x + r) * sigmoid(w) - softplus(x * s) + sigmoid(x) * r", false,
                1e-6, return gelu(x * w) + silu(x + r) * sigmoid(w) - softplus(x * s) + sigmoid(x) * r;)
LOOM_GRAD_LAYER(g_where_minmax,
                "where(x > r, x * w, minimum(x, w) * s) + maximum(x, r) * w - abs(x - r) * s + relu(w - x)", false,
                1e-6, return where(x > r, x * w, minimum(x, w) * s) + maximum(x, r) * w - abs(x - r) * s + relu(w - x);)
// Its row reductions are named for loom::saved: half of its cases read them
// from tensors (saves_rows below).
LOOM_GRAD_LAYER(g_softmax, "e / row_sum(e) * w + row_min(x) * r * s, e = exp(x - row_max(x))", false, 1e-6,
                auto e = exp(x - saved<0>(row_max(x)));
                return e / saved<1>(row_sum(e)) * w + saved<2>(row_min(x)) * r * s;)
// Part of this layer computes in float: loom's gradient is as close as
// float's rounding (2^-24 relative) times the few ops' condition allows.
LOOM_GRAD_LAYER(g_casts,
                "cast<double>(tanh(cast<float>(x * w))) * r + cast<float>(x) * s "
                "+ x * cast<double>(cast<int32_t>(r * 4.0))",
                false, 2e-5,
                return cast<double>(tanh(cast<float>(x * w))) * r + cast<float>(x) * s +
                       x * cast<double>(cast<std::int32_t>(r * 4.0));)
LOOM_GRAD_LAYER(g_rows_out, "row_sum(x * w * sigmoid(x + r)) + s * row_max(x) (into [N, 1])", true, 1e-6,
                return row_sum(x * w * sigmoid(x + r)) + s * row_max(x);)
#undef LOOM_GRAD_LAYER
// The layers that name their row reductions loom::saved<0, 1, 2>.
template <class Layer>
inline constexpr bool saves_rows = std::is_same_v<Layer, g_softmax>;

// Every layer, in case order: case k runs layer k % 6. The including file
// sets LOOM_GRAD_PART: part p compiles layers 2p and 2p + 1 (so the parts
// build in parallel); a case of another part is skipped here.
using all_layers = std::tuple<g_math, g_activations, g_where_minmax, g_softmax, g_casts, g_rows_out>;
#ifdef LOOM_GRAD_ONLY  // one layer (to measure its compile time)
constexpr bool compiled(std::size_t i) { return i == LOOM_GRAD_ONLY; }
#else
constexpr bool compiled(std::size_t i) { return i / 2 == LOOM_GRAD_PART; }
#endif

// Inputs on disjoint grids: x = k/16 + 1/128 (distinct within a row), w on
// k/16 + 3/128, r on k/16 + 5/128, s on k/16 + 7/128, all in [-2.5, 2.5]
// (s in [-1.5, 1.5]). Any two differ by at least 1/64 and none is within
// 1/128 of 0, so x > r, minimum(x, w), abs(x - r), relu(w - x), row_max(x),
// the truncation of r * 4 (r * 4 is 1/32 from an integer) are all
// differentiable (or constant) within far more than the step h.
double grid_value(loom_random::rng& g, int offset, int half_range) {
  return static_cast<double>(g.pick(-half_range, half_range - 1)) / 16 + offset / 128.0;
}

// Finite differences: central, with step h = 1e-5 * max(1, |v|) (the exact
// difference of the two perturbed values as the divisor). Their truncation
// error is h^2 |f'''| / 6, below 1e-9 relative for these layers' smooth
// pieces at these magnitudes; their rounding error is about
// 8 eps * sum|dy * y| / h over the rows a perturbation touches (each output
// computed to a few ulps, possibly through a cancelling x - row_mean(x)).
// loom's gradient in double is accurate to a few ulps times the condition
// of the same ops. So the check is
//   |loom - fd| <= tol * (1 + max|fd| over the input) + 64 eps * sum|dy * y| / h,
// tol = 1e-6 for layers in double (the worst error measured over 2000 cases
// is 1e-3 of the allowed error; a wrong rule is off by O(1)), and 2e-5 where
// the layer computes in float (worst measured: 1.2e-2 of it).
constexpr double fd_step = 1e-5;

struct inputs {
  std::vector<vec> x, r;  // rows of x (C values each), of r (1 value each)
  vec w, s;               // the weight row (C values) and the scalar (1 value)
  std::vector<std::vector<double>> dy;
};

// sum_j dy[i][j] * y[i][j] for row i of the reference forward, and
// sum_j |dy[i][j] * y[i][j]|; false in `ok` if an output is "don't care"
// (the reference could not bound it), never the case with these inputs.
template <class Layer>
double row_loss(const Layer& lay, const vec& x, const vec& w, const vec& r, const vec& s,
                const std::vector<double>& dy, double* abs_sum, bool* ok) {
  const vec y = lay(x, w, r, s);
  double l = 0;
  for (std::size_t j = 0; j < dy.size(); ++j) {
    const loom_random::ref::rv& v = loom_random::gref::at(y, j);
    if (v.dc || !std::isfinite(v.v)) *ok = false;
    l += dy[j] * v.v;
    if (abs_sum) *abs_sum += std::fabs(dy[j] * v.v);
  }
  return l;
}

struct fd_result {
  std::vector<double> g;  // d loss / d input element, row-major over the input's logical extents
  double noise = 0;       // the largest rounding error bound of one element's difference
};

// Finite differences of one input element `v` (changed in place and put
// back); `rows` evaluates the loss of the rows the element affects.
template <class Rows>
double central(loom_random::ref::rv& v, const Rows& rows, double* noise) {
  const double v0 = v.v, h = fd_step * std::max(1.0, std::fabs(v0));
  const double up_v = v0 + h, down_v = v0 - h;
  double abs_sum = 0;
  v.v = up_v;
  const double up = rows(&abs_sum);
  v.v = down_v;
  const double down = rows(nullptr);
  v.v = v0;
  *noise = std::max(*noise, 64 * std::numeric_limits<double>::epsilon() * abs_sum / (up_v - down_v));
  return (up - down) / (up_v - down_v);
}

template <class Layer>
std::array<fd_result, 4> finite_differences(const Layer& lay, inputs& in, bool* ok) {
  const std::size_t n = in.x.size(), c = in.w.e.size();
  std::array<fd_result, 4> out;
  auto row = [&](std::size_t i) {
    return [&, i](double* abs_sum) { return row_loss(lay, in.x[i], in.w, in.r[i], in.s, in.dy[i], abs_sum, ok); };
  };
  auto all_rows = [&](double* abs_sum) {
    double l = 0;
    for (std::size_t i = 0; i < n; ++i) l += row(i)(abs_sum);
    return l;
  };
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < c; ++j) out[0].g.push_back(central(in.x[i].e[j], row(i), &out[0].noise));
  for (std::size_t j = 0; j < c; ++j) out[1].g.push_back(central(in.w.e[j], all_rows, &out[1].noise));
  for (std::size_t i = 0; i < n; ++i) out[2].g.push_back(central(in.r[i].e[0], row(i), &out[2].noise));
  out[3].g.push_back(central(in.s.e[0], all_rows, &out[3].noise));
  return out;
}

// The kernels docs/08_gradients.md states for into(dx, dw, dr, ds), which
// follow from the inputs' ranks whatever the extents: x and r (the output's
// rank: x same-shape, r row sums, or same-shape when C == 1) and w (rank 1
// under a rank-2 output: column sums, [1] too) share one row kernel plus
// the kernel adding the partial sums (2); s (rank 0: a whole sum) three.
constexpr int expected_kernels = 2 + 3;

// Writes `vals` (row-major over the logical extents) as an operand's values:
// into its base buffer on the host and in its space.
template <class Op>
void set_values(Op& o, const std::vector<double>& vals) {
  std::array<index_t, 8> c{};
  for (std::size_t i = 0; i < vals.size(); ++i) {
    o.values[i] = vals[i];
    loom_random::unravel(static_cast<index_t>(i), o.lay.logical, c.data());
    o.host.data()[o.lay.offset(c.data())] = vals[i];
  }
  loom::copy(o.host, o.mem);
}

// The logical values of an output operand after the run (row-major), and
// whether every base element outside the view kept its poison.
template <class Op>
std::vector<double> read_back(const Op& o, bool* outside_kept) {
  const auto after = loom::to_host(o.mem);
  std::vector<char> inside(static_cast<std::size_t>(after.size()), 0);
  std::vector<double> v(static_cast<std::size_t>(o.lay.logical_size()));
  std::array<index_t, 8> c{};
  for (std::size_t i = 0; i < v.size(); ++i) {
    loom_random::unravel(static_cast<index_t>(i), o.lay.logical, c.data());
    const index_t off = o.lay.offset(c.data());
    inside[static_cast<std::size_t>(off)] = 1;
    v[i] = after.data()[off];
  }
  for (index_t i = 0; i < after.size(); ++i)
    if (!inside[static_cast<std::size_t>(i)] && !loom_test::same_bits(after.data()[i], o.host.data()[i]))
      *outside_kept = false;
  return v;
}

struct grad_stats {
  long cases = 0, elements = 0, kernels_checked = 0;
  double worst = 0;  // the largest |loom - fd| / allowed seen
  void print() const {
    std::printf("loom random: grad layers (part %d)%s: %ld cases, %ld gradient elements against finite differences, "
                "worst error %.2e of the tolerance\n",
                LOOM_GRAD_PART, on_device ? " [cuda]" : "", cases, elements, worst);
  }
};

template <class Layer>
void run_grad_case(std::uint64_t seed, long case_no, grad_stats& st) {
  using namespace loom_random;
  rng g(seed);
  const double u = g.u01();
  const index_t n = g.pick(1, 9), c = u < 0.6 ? g.pick(1, 9) : (u < 0.9 ? g.pick(10, 23) : g.pick(24, 41));
  const std::vector<index_t> ext{n, c}, out_ext{n, Layer::reduces ? 1 : c};
  operand<double, 2, space_t> x, r, dy, dx, dr;
  operand<double, 1, space_t> w, dw;
  std::string err = x.build(g, random_layout(g, ext, false), ext, true);
  if (err.empty()) err = w.build(g, random_layout(g, {c}, false), ext, true);
  if (err.empty()) err = r.build(g, random_layout(g, {n, 1}, false), ext, true);
  if (err.empty()) err = dy.build(g, random_layout(g, out_ext, false), out_ext, true);
  if (err.empty()) err = dx.build(g, random_layout(g, ext, false), ext, false);
  if (err.empty()) err = dw.build(g, random_layout(g, {c}, false), ext, false);
  if (err.empty()) err = dr.build(g, random_layout(g, {n, 1}, false), ext, false);
  // A layer naming its row reductions: in half of its cases the gradient
  // reads them from [N, 1] tensors the forward's expressions assigned.
  const bool use_saved = saves_rows<Layer> && g.u01() < 0.5;
  auto describe = [&] {
    std::ostringstream s;
    s << "LOOM_RANDOM_SEED=" << base_seed() << " LOOM_RANDOM_CASE=" << case_no << " ("
      << (on_device ? "device" : "host") << ", grad): " << Layer::name
      << (use_saved ? " (row reductions read from saved tensors)" : "") << ", x " << str(ext) << ", output "
      << str(out_ext) << "\n  x: " << x.lay.describe() << "\n  w: " << w.lay.describe()
      << "\n  r: " << r.lay.describe() << "\n  dy: " << dy.lay.describe() << "\n  dx: " << dx.lay.describe()
      << "\n  dw: " << dw.lay.describe() << "\n  dr: " << dr.lay.describe() << "\n  ";
    return s.str();
  };
  if (!err.empty()) {
    FAIL_CHECK(describe() << err);
    return;
  }

  // Values: x distinct within each row, every input on its own grid.
  inputs in;
  std::vector<double> xv, wv, rvals, dyv;
  std::vector<int> pool(80);
  for (index_t i = 0; i < n; ++i) {
    std::iota(pool.begin(), pool.end(), -40);
    std::shuffle(pool.begin(), pool.end(), g.g);
    vec row;
    for (index_t j = 0; j < c; ++j) {
      xv.push_back(pool[static_cast<std::size_t>(j)] / 16.0 + 1 / 128.0);
      row.e.push_back(ref::leaf(xv.back()));
    }
    in.x.push_back(row);
  }
  for (index_t j = 0; j < c; ++j) {
    wv.push_back(grid_value(g, 3, 40));
    in.w.e.push_back(ref::leaf(wv.back()));
  }
  for (index_t i = 0; i < n; ++i) {
    rvals.push_back(grid_value(g, 5, 40));
    in.r.push_back(vec{{ref::leaf(rvals.back())}});
  }
  const double sv = grid_value(g, 7, 24);
  in.s.e.push_back(ref::leaf(sv));
  for (index_t i = 0; i < n; ++i) {
    in.dy.emplace_back();
    for (index_t j = 0; j < out_ext[1]; ++j) {
      dyv.push_back(g.u01() * 2 - 1);
      in.dy.back().push_back(dyv.back());
    }
  }
  set_values(x, xv);
  set_values(w, wv);
  set_values(r, rvals);
  set_values(dy, dyv);
  loom::host_tensor<double, 0> sh(loom::shape<0>{});
  sh.data()[0] = sv;
  loom::tensor<double, 0, space_t> s(loom::shape<0>{}), ds(loom::shape<0>{});
  loom::copy(sh, s);
  sh.data()[0] = loom_test::poison_value<double>();
  loom::copy(sh, ds);

  loom::grad_info info;
  try {
    if constexpr (saves_rows<Layer>) {
      if (use_saved) {
        loom::tensor<double, 2, space_t> mx({n, 1}), sum({n, 1}), mn({n, 1});
        mx = loom::saved_value<0>(Layer{})(x.v, w.v, r.v, s);
        sum = loom::saved_value<1>(Layer{})(x.v, w.v, r.v, s);
        mn = loom::saved_value<2>(Layer{})(x.v, w.v, r.v, s);
        info = loom::grad(Layer{}).with_saved(mx, sum, mn)(x.v, w.v, r.v, s, dy.v).into(dx.v, dw.v, dr.v, ds);
      }
    }
    if (!use_saved) info = loom::grad(Layer{})(x.v, w.v, r.v, s, dy.v).into(dx.v, dw.v, dr.v, ds);
  } catch (const std::exception& ex) {
    FAIL_CHECK(describe() << "loom threw: " << ex.what());
    return;
  }
  ++st.cases;
  // A layer ending in a row reduction too: its adjoint has x's shape.
  ++st.kernels_checked;
  if (info.kernels != expected_kernels) {
    FAIL_CHECK(describe() << info.kernels << " kernels; docs/08_gradients.md gives " << expected_kernels);
    return;
  }

  bool ok = true, outside_kept = true;
  const auto want = finite_differences(Layer{}, in, &ok);
  if (!ok) {
    FAIL_CHECK(describe() << "the reference forward is not finite or not bounded at these inputs");
    return;
  }
  const std::vector<double> got[4] = {read_back(dx, &outside_kept), read_back(dw, &outside_kept),
                                      read_back(dr, &outside_kept), {loom::to_host(ds).data()[0]}};
  if (!outside_kept) {
    FAIL_CHECK(describe() << "a gradient output's buffer was written outside its view");
    return;
  }
  static const char* const names[4] = {"dx", "dw", "dr", "ds"};
  for (int k = 0; k < 4; ++k) {
    double scale = 0;
    for (double v : want[k].g) scale = std::max(scale, std::fabs(v));
    const double allowed = Layer::tol * (1 + scale) + want[k].noise;
    for (std::size_t i = 0; i < want[k].g.size(); ++i) {
      const double gv = got[k][i], wv0 = want[k].g[i], e = std::fabs(gv - wv0);
      ++st.elements;
      if (!(e <= allowed)) {
        FAIL_CHECK(describe() << names[k] << " element " << i << " (row-major): loom " << gv
                              << ", finite differences " << wv0 << ", allowed error " << allowed << " (scale "
                              << scale << ")");
        return;
      }
      st.worst = std::max(st.worst, e / allowed);
    }
  }
}

using grad_entry = void (*)(std::uint64_t, long, grad_stats&);
// A class's static member, not the function template's address: nvcc's
// host-side translation cannot resolve `&run_grad_case<L>` here.
template <class Layer>
struct grad_runner {
  static void run(std::uint64_t seed, long case_no, grad_stats& st) { run_grad_case<Layer>(seed, case_no, st); }
};
template <std::size_t I>
grad_entry entry() {
  if constexpr (compiled(I))
    return &grad_runner<std::tuple_element_t<I, all_layers>>::run;
  else
    return nullptr;
}
template <std::size_t... I>
std::vector<grad_entry> make_grad_table(std::index_sequence<I...>) {
  return {entry<I>()...};
}
}  // namespace

TEST_CASE("random differentiable layers: loom::grad matches finite differences of the reference, part " LOOM_GRAD_PART_NAME,
          "[random][grad]" LOOM_TEST_TAG) {
  const auto table = make_grad_table(std::make_index_sequence<std::tuple_size_v<all_layers>>{});
  const long cases = loom_random::case_count(2000), only = loom_random::only_case();
  grad_stats st;
  long expected = 0;
  for (long k = 0; k < cases; ++k) {
    if (only >= 0 && k != only) continue;
    expected += table[static_cast<std::size_t>(k) % table.size()] != nullptr;
    const std::uint64_t seed = loom_random::mix(loom_random::base_seed() ^ 0x96adull, static_cast<std::uint64_t>(k));
    const auto& e = table[static_cast<std::size_t>(k) % table.size()];
    if (e) e(seed, k, st);
  }
  st.print();
  CHECK(st.cases == expected);
}
