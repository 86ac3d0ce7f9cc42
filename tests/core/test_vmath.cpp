// SPDX-License-Identifier: Apache-2.0
// loom::vmath (the host's branch-free math) against references computed in
// double (long double for double), in every instruction set this CPU runs
// (core/simd/dispatch.hpp; LOOM_HOST_SIMD caps them, so CI runs the baseline
// alone too): a dense sweep of the float bit patterns, special values, and
// the ops of an expression on the host executor.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "loom_test.hpp"

#include <loom/core/simd/dispatch.hpp>

namespace {
using loom::index_t;
using loom::simd::isa;

constexpr float finf = std::numeric_limits<float>::infinity();
constexpr float fnan = std::numeric_limits<float>::quiet_NaN();

// The instruction sets to test: the baseline up to what the process runs.
std::vector<isa> isas() {
  std::vector<isa> v{isa::baseline};
  if (loom::simd::host_isa() >= isa::avx2) v.push_back(isa::avx2);
  if (loom::simd::host_isa() >= isa::avx512) v.push_back(isa::avx512);
  return v;
}

// Error of y in units in the last place of the reference r rounded to T
// (T's subnormal spacing below its smallest normal); 0 for matching
// specials (NaN with NaN, equal infinities, zeros of r's sign), infinity
// for a mismatch.
template <class T, class R>
double ulp_error(T y, R r) {
  if (std::isnan(r)) return std::isnan(y) ? 0 : finf;
  if (std::isnan(y)) return finf;
  const R big = static_cast<R>(std::numeric_limits<T>::max());
  const int digits = std::numeric_limits<T>::digits;
  // r beyond T's largest value by half an ulp or more rounds to infinity.
  if (std::fabs(r) >= big + std::ldexp(R(1), std::numeric_limits<T>::max_exponent - digits - 1))
    return std::isinf(y) && std::signbit(y) == std::signbit(r) ? 0 : finf;
  if (std::isinf(y)) return finf;
  if (r == 0 && y == 0) return std::signbit(y) == std::signbit(r) ? 0 : finf;
  int e;
  (void)std::frexp(r, &e);
  e = std::max(e - 1, std::numeric_limits<T>::min_exponent - 1);
  const R ulp = std::ldexp(R(1), e - (digits - 1));
  return static_cast<double>(std::fabs(static_cast<R>(y) - r) / ulp);
}

struct float_fn {
  const char* name;
  float (*f)(float);
  double (*ref)(double);
  double bound;  // ulp
};
const float_fn float_fns[] = {
    {"exp", [](float x) { return loom::vmath::exp(x); }, [](double x) { return std::exp(x); }, 1},
    {"expm1", [](float x) { return loom::vmath::expm1(x); }, [](double x) { return std::expm1(x); }, 2},
    {"log", [](float x) { return loom::vmath::log(x); }, [](double x) { return std::log(x); }, 1},
    {"log1p", [](float x) { return loom::vmath::log1p(x); }, [](double x) { return std::log1p(x); }, 2},
    {"tanh", [](float x) { return loom::vmath::tanh(x); }, [](double x) { return std::tanh(x); }, 3},
    {"erf", [](float x) { return loom::vmath::erf(x); }, [](double x) { return std::erf(x); }, 2},
    {"sin", [](float x) { return loom::vmath::sin(x); }, [](double x) { return std::sin(x); }, 1},
    {"cos", [](float x) { return loom::vmath::cos(x); }, [](double x) { return std::cos(x); }, 1},
};

// sin and cos keep their bound below 2^27 pi/2; beyond, |y| <= 1.
bool periodic(const float_fn& f) { return f.name[0] == 's' || f.name[0] == 'c'; }
constexpr float sincos_range = 0x1p27f * 1.5707963f;

// y[i] = f(x[i]) in instruction set i's copy of the host loop.
template <class T, class F>
void run_in(isa i, const std::vector<T>& x, std::vector<T>& y, F f) {
  y.assign(x.size(), std::numeric_limits<T>::quiet_NaN());  // poisoned
  const T* px = x.data();
  T* py = y.data();
  loom::detail::simd::loop(i, 0, static_cast<index_t>(x.size()), [=](index_t k) { py[k] = f(px[k]); });
}
}  // namespace

TEST_CASE("vmath float functions stay within their ulp bounds over a sweep of the floats", "[core][vmath]") {
  // Every 1031st bit pattern from a seeded offset: 4.2 million floats of
  // every sign, exponent and mantissa region, subnormals and specials too.
  const std::uint64_t seed = loom_test::seed_for("vmath sweep");
  INFO("seed " << seed);
  const std::uint32_t offset = static_cast<std::uint32_t>(std::mt19937_64(seed)() % 1031);
  std::vector<float> x;
  for (std::uint64_t u = offset; u < (1ull << 32); u += 1031) x.push_back(std::bit_cast<float>(std::uint32_t(u)));
  for (const float_fn& f : float_fns) {
    std::vector<double> ref(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) ref[k] = f.ref(x[k]);
    std::vector<float> y, first;
    for (isa i : isas()) {
      run_in(i, x, y, f.f);
      double worst = 0;
      float worst_x = 0;
      for (std::size_t k = 0; k < x.size(); ++k) {
        if (periodic(f) && !(std::fabs(x[k]) < sincos_range)) {
          if (std::isfinite(x[k])) CHECK(std::fabs(y[k]) <= 1.0f);
          continue;
        }
        const double e = ulp_error(y[k], ref[k]);
        if (e > worst) worst = e, worst_x = x[k];
      }
      std::printf("vmath %-6s %-9s max %.3f ulp (at %a)\n", f.name, loom::simd::name(i), worst, worst_x);
      INFO(f.name << " in " << loom::simd::name(i) << ": " << worst << " ulp at " << worst_x);
      CHECK(worst <= f.bound);
      // Every instruction set gives results within the bound of the first's.
      if (first.empty()) {
        first = y;
      } else {
        double apart = 0;
        for (std::size_t k = 0; k < x.size(); ++k)
          if (!periodic(f) || std::fabs(x[k]) < sincos_range)
            apart = std::max(apart, ulp_error<float, double>(y[k], first[k]));
        CHECK(apart <= f.bound);
      }
    }
  }
}

TEST_CASE("vmath float functions give libm's special values", "[core][vmath]") {
  const float sub = std::numeric_limits<float>::denorm_min(), tiny = std::numeric_limits<float>::min(),
              big = std::numeric_limits<float>::max();
  // Zeros, infinities, NaN, subnormals, and the overflow and underflow edges.
  const std::vector<float> specials{0.0f,        -0.0f,      finf,        -finf,       fnan,        sub,
                                    -sub,        tiny,       -tiny,       big,         -big,        1.0f,
                                    -1.0f,       88.7228f,   88.72284f,   88.7229f,    89.0f,       -87.3365f,
                                    -103.972f,   -103.98f,   -104.0f,     -1e-30f,     1e-30f,      0x1p-24f,
                                    0.921875f,   0.9218749f, 3.925f,      9.01f,       -9.01f,      1e6f,
                                    -0.99999994f, 1e38f,     3.0f,        0.5f,        -0.5f,       20.0f};
  for (const float_fn& f : float_fns)
    for (isa i : isas()) {
      std::vector<float> y;
      run_in(i, specials, y, f.f);
      for (std::size_t k = 0; k < specials.size(); ++k) {
        if (periodic(f) && !(std::fabs(specials[k]) < sincos_range)) {
          CHECK((std::isnan(y[k]) == !std::isfinite(specials[k])));
          continue;
        }
        INFO(f.name << "(" << specials[k] << ") = " << y[k] << " in " << loom::simd::name(i));
        CHECK(ulp_error(y[k], f.ref(specials[k])) <= f.bound);
      }
    }
}

TEST_CASE("vmath pow matches C99's powf on special values and its ulp bound on random pairs", "[core][vmath]") {
  const std::vector<float> v{0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f,  -2.0f,  3.0f, -3.0f, 2.5f,
                             -2.5f, finf, -finf, fnan, 1e-45f, -1e-45f, 3e38f, 0x1p24f, 0x1p23f + 1, 127.5f, -149.0f};
  for (isa i : isas()) {
    std::vector<float> x, y, r;
    for (float a : v)
      for (float b : v) x.push_back(a), y.push_back(b);
    r.assign(x.size(), fnan);
    const float *px = x.data(), *py = y.data();
    float* pr = r.data();
    loom::detail::simd::loop(i, 0, static_cast<index_t>(x.size()),
                             [=](index_t k) { pr[k] = loom::vmath::pow(px[k], py[k]); });
    for (std::size_t k = 0; k < x.size(); ++k) {
      INFO("pow(" << x[k] << ", " << y[k] << ") = " << r[k] << " in " << loom::simd::name(i));
      CHECK(ulp_error(r[k], std::pow(static_cast<double>(x[k]), static_cast<double>(y[k]))) <= 1);
    }
    // Random pairs: bases of every magnitude and sign, integer and real exponents.
    std::mt19937_64 g(loom_test::seed_for("vmath pow"));
    std::uniform_real_distribution<double> ex(-60, 60), ey(-12, 12);
    x.clear(), y.clear();
    for (int k = 0; k < 200001; ++k) {
      const double b = std::exp2(ex(g)) * ((g() & 3) == 0 ? -1 : 1);
      x.push_back(static_cast<float>(b));
      y.push_back((g() & 1) ? static_cast<float>(std::round(ey(g))) : static_cast<float>(ey(g)));
    }
    r.assign(x.size(), fnan);
    loom::detail::simd::loop(i, 0, static_cast<index_t>(x.size()),
                             [px = x.data(), py = y.data(), pr = r.data()](index_t k) {
                               pr[k] = loom::vmath::pow(px[k], py[k]);
                             });
    double worst = 0;
    for (std::size_t k = 0; k < x.size(); ++k)
      worst = std::max(worst, ulp_error(r[k], std::pow(static_cast<double>(x[k]), static_cast<double>(y[k]))));
    std::printf("vmath pow    %-9s max %.3f ulp\n", loom::simd::name(i), worst);
    CHECK(worst <= 1);
  }
}

TEST_CASE("vmath double functions stay within their ulp bounds on random doubles", "[core][vmath]") {
  struct double_fn {
    const char* name;
    double (*f)(double);
    long double (*ref)(long double);
    double bound;
  };
  const double_fn fns[] = {
      {"exp", [](double x) { return loom::vmath::exp(x); }, [](long double x) { return std::exp(x); }, 1},
      {"expm1", [](double x) { return loom::vmath::expm1(x); }, [](long double x) { return std::expm1(x); }, 2},
      {"log", [](double x) { return loom::vmath::log(x); }, [](long double x) { return std::log(x); }, 1},
      {"log1p", [](double x) { return loom::vmath::log1p(x); }, [](long double x) { return std::log1p(x); }, 2},
      {"tanh", [](double x) { return loom::vmath::tanh(x); }, [](long double x) { return std::tanh(x); }, 3},
  };
  // Random magnitudes 2^-1074 .. 2^1024 of both signs, values near 0 and 1,
  // and the specials.
  std::mt19937_64 g(loom_test::seed_for("vmath double"));
  std::uniform_real_distribution<double> e(-1080, 1030), s(-800, 800), u(-2, 2);
  std::vector<double> x{0.0, -0.0, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                        std::numeric_limits<double>::quiet_NaN(), 709.78, 709.79, -745.1, -745.2, 1e-300, -1e-300};
  for (int k = 0; k < 300001; ++k) {
    const int kind = static_cast<int>(g() % 3);
    const double v = kind == 0 ? std::exp2(e(g)) : kind == 1 ? s(g) : u(g);
    x.push_back((g() & 1) ? -v : v);
  }
  for (const double_fn& f : fns)
    for (isa i : isas()) {
      std::vector<double> y;
      run_in(i, x, y, f.f);
      double worst = 0;
      double worst_x = 0;
      for (std::size_t k = 0; k < x.size(); ++k) {
        const double err = ulp_error<double, long double>(y[k], f.ref(x[k]));
        if (err > worst) worst = err, worst_x = x[k];
      }
      std::printf("vmath %-6s %-9s double: max %.3f ulp (at %a)\n", f.name, loom::simd::name(i), worst, worst_x);
      INFO(f.name << " double in " << loom::simd::name(i) << ": " << worst << " ulp at " << worst_x);
      CHECK(worst <= f.bound);
    }
}

// fn::gelu's derivative as an op.
struct gelu_slope {
  bool tanh_form;
  template <class U>
  U operator()(U v) const {
    return loom::fn::gelu{tanh_form}.template derivative<0>(v);
  }
};

TEMPLATE_TEST_CASE("host assignments of transcendental ops match double references", "[core][vmath]", float,
                   loom::bf16, loom::half) {
  using T = TestType;
  std::mt19937_64 g(loom_test::seed_for("vmath ops"));
  auto x = loom::host_tensor<T, 2>({257, 33});
  auto b = loom::host_tensor<T, 1>({33});
  loom_test::randomize(x.view(), g);
  loom_test::randomize(b.view(), g);
  auto y = loom::host_tensor<T, 2>({257, 33});
  const double tol = std::is_same_v<T, float> ? 4e-6 : 1e-2;  // relative, computed in float either way
  const double tmax = std::is_same_v<T, loom::half> ? 65504.0 : 3.3e38;  // beyond: infinity
  auto check = [&](const char* name, auto&& expr, auto ref) {
    for (index_t k = 0; k < y.size(); ++k) y.data()[k] = loom_test::poison_value<T>();
    y = expr;
    for (index_t r = 0; r < 257; ++r)
      for (index_t c = 0; c < 33; ++c) {
        const double v = static_cast<float>(x.data()[r * 33 + c]), w = static_cast<float>(b.data()[c]);
        const double want = ref(v, w), got = static_cast<float>(y.data()[r * 33 + c]);
        INFO(name << " at (" << r << ", " << c << "): " << got << " against " << want);
        if (std::fabs(want) > tmax)
          REQUIRE(got == std::copysign(std::numeric_limits<double>::infinity(), want));  // overflows T
        else
          REQUIRE(std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want)));
      }
  };
  const double k = std::sqrt(2 / 3.14159265358979323846);
  check("tanh", loom::tanh(x), [](double v, double) { return std::tanh(v); });
  check("exp", loom::exp(x + b), [](double v, double w) { return std::exp(v + w); });
  check("gelu_tanh", loom::gelu(x + b, loom::approximate::tanh), [k](double v, double w) {
    const double u = v + w;
    return 0.5 * u * (1 + std::tanh(k * (u + 0.044715 * u * u * u)));
  });
  check("gelu", loom::gelu(x), [](double v, double) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
  // GELU's derivative (vmath::gelu_derivative for float), both forms.
  check("gelu_tanh'", loom::map(gelu_slope{true}, x + b), [k](double v, double w) {
    const double u = v + w, t = std::tanh(k * (u + 0.044715 * u * u * u));
    return 0.5 * (1 + t) + 0.5 * u * (1 - t * t) * k * (1 + 3 * 0.044715 * u * u);
  });
  check("gelu'", loom::map(gelu_slope{false}, x), [](double v, double) {
    const double phi = std::exp(-0.5 * v * v) / std::sqrt(2 * 3.14159265358979323846);
    return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * phi;
  });
  check("silu", loom::silu(x), [](double v, double) { return v / (1 + std::exp(-v)); });
  check("sigmoid", loom::sigmoid(x * b), [](double v, double w) { return 1 / (1 + std::exp(-v * w)); });
  check("softplus", loom::softplus(x), [](double v, double) { return v > 20 ? v : std::log1p(std::exp(v)); });
  check("log1p", loom::log1p(loom::abs(x)), [](double v, double) { return std::log1p(std::fabs(v)); });
  check("sin", loom::sin(x) * loom::cos(b), [](double v, double w) { return std::sin(v) * std::cos(w); });
  check("pow", loom::pow(loom::abs(x), b), [](double v, double w) { return std::pow(std::fabs(v), w); });
}

TEST_CASE("env_report names the host's SIMD path", "[core][vmath]") {
  const std::string r = loom::env_report();
  CHECK(r.find(std::string("host SIMD: ") + loom::simd::name(loom::simd::host_isa())) != std::string::npos);
}
