// SPDX-License-Identifier: Apache-2.0
// loom's side of bench/cpu/vs_torch.py: the host executor on the cases that
// the driver also runs in PyTorch, eager and torch.compile, on the same
// machine, threads, sizes and data. The driver starts this program once and
// talks to it line by line on stdin/stdout, so loom and PyTorch alternate
// call by call while each keeps its data:
//   list              one line per case: "case NAME"
//   copy RUNS         times a parallel copy of the largest case's size;
//                     prints "copy BYTES MS MS ..." (the machine's copy
//                     bandwidth, measured in the same run)
//   case NAME         makes the case's data (the seeded values below), runs
//                     it once (the warm-up), prints one JSON line: its
//                     extents, the bytes that must move and the flops, the
//                     host kernels of one call and the sum of |v| of each
//                     output (the driver compares them with PyTorch's)
//   run RUNS          times RUNS calls of the current case, one after the
//                     other; prints "ms MS ..."
//   quit
// At start it prints one JSON line describing the machine and the build.
// Data: element i of the tensor with seed s is lo + (hi - lo) * u, where u
// is the top 24 bits of splitmix64((s << 40) + i) / 2^24 (computed in double,
// rounded to float), so the driver makes the same values with NumPy.
// Usage: bench_vs_torch_cpu [--quick]   (--quick: tiny sizes, for the CI smoke run)
#include <loom/loom.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../bench_util.hpp"

#ifndef LOOM_BENCH_CXX_FLAGS
#define LOOM_BENCH_CXX_FLAGS "unknown"
#endif

namespace {
using loom::index_t;
using mat = loom::host_tensor<float, 2>;
using vec = loom::host_tensor<float, 1>;

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills `t` with the seeded values described at the top of this file.
template <class Tensor>
void fill_seeded(Tensor& t, std::uint64_t seed, double lo, double hi) {
  auto* p = t.data();
  for (index_t i = 0; i < t.size(); ++i) {
    const double u = static_cast<double>(splitmix64((seed << 40) + static_cast<std::uint64_t>(i)) >> 40) * 0x1p-24;
    p[i] = static_cast<float>(lo + (hi - lo) * u);
  }
}

// Class labels in [0, classes): the top 24 bits of the same hash, modulo classes.
loom::host_tensor<std::int64_t, 1> seeded_labels(index_t rows, index_t classes, std::uint64_t seed) {
  loom::host_tensor<std::int64_t, 1> t({rows});
  for (index_t i = 0; i < rows; ++i)
    t.data()[i] = static_cast<std::int64_t>((splitmix64((seed << 40) + static_cast<std::uint64_t>(i)) >> 40) %
                                            static_cast<std::uint64_t>(classes));
  return t;
}

mat seeded(index_t r, index_t c, std::uint64_t seed, double lo, double hi) {
  mat t({r, c});
  fill_seeded(t, seed, lo, hi);
  return t;
}
vec seeded(index_t n, std::uint64_t seed, double lo, double hi) {
  vec t({n});
  fill_seeded(t, seed, lo, hi);
  return t;
}

template <class Tensor>
double abs_sum(const Tensor& t) {
  double s = 0;
  for (index_t i = 0; i < t.size(); ++i) s += std::fabs(static_cast<double>(t.data()[i]));
  return s;
}

// A prepared case: what one timed call runs, and what the driver checks.
struct prepared {
  std::function<void()> call;
  std::function<std::vector<double>()> sums;  // sum |v| of each output, in the driver's order
  std::vector<std::pair<std::string, index_t>> dims;  // in the order the report prints them
  double bytes = 0;  // full-size tensors read once and written once (vectors included)
  double flop = 0;   // matrix products only
};

// The extents of every case: full size or --quick.
struct sizes {
  index_t rows, cols;          // elementwise and row layers
  index_t mm;                  // the square matmul
  index_t batch, in, hidden;   // the MLP (classes: 10)
};
constexpr index_t mlp_classes = 10;
constexpr double rms_eps = 1e-6, ln_eps = 1e-5;
constexpr float sgd_lr = 0.01f;

// A user op with its own derivative (as in docs/08_gradients.md):
// swish(x) = x * s with s = sigmoid(beta x); swish' = s + beta x s (1 - s).
struct swish {
  static constexpr bool floating = true;
  float beta = 1.5f;
  template <class T>
  LOOM_HD static T sigmoid_of(T v) {
    return T(1) / (T(1) + loom::math::exp(-v));
  }
  template <class T>
  LOOM_HD T operator()(T x) const {
    return x * sigmoid_of(T(beta) * x);
  }
  template <int I, class T>
  LOOM_HD T derivative(T x) const {
    const T s = sigmoid_of(T(beta) * x);
    return s * (T(1) + T(beta) * x * (T(1) - s));
  }
};

constexpr auto block = loom::layer([](auto x, auto b, auto r, auto w) {
  return loom::rms_norm(loom::gelu(x + b, loom::approximate::tanh) + r, w, rms_eps);
});
constexpr auto silu_gate = loom::layer([](auto a, auto g) { return loom::silu(a) * g; });
constexpr auto user_layer = loom::layer([](auto x, auto w) {
  return loom::map(swish{1.5f}, x) * (x * loom::rsqrt(loom::row_mean(x * x) + rms_eps) * w);
});
constexpr auto gelu_tanh = loom::layer([](auto z) { return loom::gelu(z, loom::approximate::tanh); });

// The data of the elementwise and row cases: x, r, dy full-size; w, b rows.
struct rows_data {
  mat x, r, dy, y, dx, dr;
  vec w, b, dw, db;
  explicit rows_data(const sizes& s)
      : x(seeded(s.rows, s.cols, 1, -2, 2)),
        r(seeded(s.rows, s.cols, 3, -1, 1)),
        dy(seeded(s.rows, s.cols, 5, -1, 1)),
        y({s.rows, s.cols}),
        dx({s.rows, s.cols}),
        dr({s.rows, s.cols}),
        w(seeded(s.cols, 4, 0.5, 1.5)),
        b(seeded(s.cols, 2, -1, 1)),
        dw({s.cols}),
        db({s.cols}) {}
};

prepared rows_case(const sizes& s, int full_size_tensors, int row_vectors) {
  prepared p;
  p.dims = {{"rows", s.rows}, {"cols", s.cols}};
  p.bytes = 4.0 * (static_cast<double>(full_size_tensors) * static_cast<double>(s.rows * s.cols) +
                   static_cast<double>(row_vectors * s.cols));
  return p;
}

// Every case, by name. Each returns its prepared call; the data lives in a
// shared_ptr that the call holds.
using factory = std::function<prepared(const sizes&)>;
// A case over rows_data: `body(d)` is the call; `outputs(d)` lists the
// tensors whose sums the driver checks; the bytes count `full` full-size
// tensors and `vectors` row vectors.
template <class Body, class Outputs>
factory rows_factory(int full, int vectors, Body body, Outputs outputs) {
  return [=](const sizes& s) {
    auto d = std::make_shared<rows_data>(s);
    auto p = rows_case(s, full, vectors);
    p.call = [d, body] { body(*d); };
    p.sums = [d, outputs] { return outputs(*d); };
    return p;
  };
}
// The sums of |v| of the outputs y, then the gradients of the fields `grads`.
template <class... G>
auto sums_of(G... grads) {
  return [=](const rows_data& d) { return std::vector<double>{abs_sum(d.y), abs_sum(d.*grads)...}; };
}

std::vector<std::pair<std::string, factory>> all_cases() {
  std::vector<std::pair<std::string, factory>> c;
  using d_t = rows_data;
  // y = rms_norm(gelu_tanh(x + b) + r) * w
  c.emplace_back("block_fwd", rows_factory(3, 2, [](d_t& d) { d.y = block(d.x, d.b, d.r, d.w); }, sums_of()));
  c.emplace_back("block_fwd_bwd", rows_factory(6, 4,
                                               [](d_t& d) {
                                                 d.y = block(d.x, d.b, d.r, d.w);
                                                 loom::grad(block)(d.x, d.b, d.r, d.w, d.dy).into(d.dx, d.db, d.dr, d.dw);
                                               },
                                               sums_of(&d_t::dx, &d_t::db, &d_t::dr, &d_t::dw)));
  c.emplace_back("gelu_affine_fwd",
                 rows_factory(3, 2, [](d_t& d) { d.y = loom::gelu(d.x * d.w + d.b) + d.r; }, sums_of()));
  // silu(a) * g with a = x, g = r
  c.emplace_back("silu_gate_fwd", rows_factory(3, 0, [](d_t& d) { d.y = silu_gate(d.x, d.r); }, sums_of()));
  c.emplace_back("silu_gate_fwd_bwd", rows_factory(6, 0,
                                                   [](d_t& d) {
                                                     d.y = silu_gate(d.x, d.r);
                                                     loom::grad(silu_gate)(d.x, d.r, d.dy).into(d.dx, d.dr);
                                                   },
                                                   sums_of(&d_t::dx, &d_t::dr)));
  c.emplace_back("softmax_fwd", rows_factory(2, 0, [](d_t& d) { d.y = loom::softmax(d.x); }, sums_of()));
  c.emplace_back("softmax_fwd_bwd", rows_factory(4, 0,
                                                 [](d_t& d) {
                                                   d.y = loom::softmax(d.x);
                                                   d.dx = loom::softmax_backward(d.y, d.dy);
                                                 },
                                                 sums_of(&d_t::dx)));
  c.emplace_back("log_softmax_fwd", rows_factory(2, 0, [](d_t& d) { d.y = loom::log_softmax(d.x); }, sums_of()));
  c.emplace_back("log_softmax_fwd_bwd", rows_factory(4, 0,
                                                     [](d_t& d) {
                                                       d.y = loom::log_softmax(d.x);
                                                       d.dx = loom::log_softmax_backward(d.y, d.dy);
                                                     },
                                                     sums_of(&d_t::dx)));
  c.emplace_back("layer_norm_fwd",
                 rows_factory(2, 2, [](d_t& d) { d.y = loom::layer_norm(d.x, d.w, d.b, ln_eps); }, sums_of()));
  // The built-in backward passes return new tensors: their gradients are
  // moved into d's fields (no copy).
  c.emplace_back("layer_norm_fwd_bwd", rows_factory(4, 4,
                                                    [](d_t& d) {
                                                      d.y = loom::layer_norm(d.x, d.w, d.b, ln_eps);
                                                      auto g = loom::layer_norm_backward(d.x, d.w, d.dy, ln_eps);
                                                      d.dx = std::move(g.dx);
                                                      d.dw = std::move(g.dweight);
                                                      d.db = std::move(g.dbias);
                                                    },
                                                    sums_of(&d_t::dx, &d_t::dw, &d_t::db)));
  c.emplace_back("rms_norm_fwd", rows_factory(2, 1, [](d_t& d) { d.y = loom::rms_norm(d.x, d.w, rms_eps); }, sums_of()));
  c.emplace_back("rms_norm_fwd_bwd", rows_factory(4, 2,
                                                  [](d_t& d) {
                                                    d.y = loom::rms_norm(d.x, d.w, rms_eps);
                                                    auto g = loom::rms_norm_backward(d.x, d.w, d.dy, rms_eps);
                                                    d.dx = std::move(g.dx);
                                                    d.dw = std::move(g.dweight);
                                                  },
                                                  sums_of(&d_t::dx, &d_t::dw)));
  // A user layer with a user op and its derivative: swish(x) * rms-normalized x * w.
  c.emplace_back("user_layer_fwd", rows_factory(2, 1, [](d_t& d) { d.y = user_layer(d.x, d.w); }, sums_of()));
  c.emplace_back("user_layer_fwd_bwd", rows_factory(4, 2,
                                                    [](d_t& d) {
                                                      d.y = user_layer(d.x, d.w);
                                                      loom::grad(user_layer)(d.x, d.w, d.dy).into(d.dx, d.dw);
                                                    },
                                                    sums_of(&d_t::dx, &d_t::dw)));
  // Cross-entropy of logits x [rows, cols] against seeded labels, mean over the rows.
  struct ce_data {
    mat z;
    loom::host_tensor<std::int64_t, 1> t;
    float loss = 0;
    std::optional<mat> dz;
    explicit ce_data(const sizes& s) : z(seeded(s.rows, s.cols, 1, -2, 2)), t(seeded_labels(s.rows, s.cols, 6)) {}
  };
  c.emplace_back("cross_entropy_fwd", [](const sizes& s) {
    auto d = std::make_shared<ce_data>(s);
    auto p = rows_case(s, 1, 0);
    p.call = [d] { d->loss = loom::cross_entropy(d->z, d->t).data()[0]; };
    p.sums = [d] { return std::vector<double>{std::fabs(d->loss)}; };
    return p;
  });
  c.emplace_back("cross_entropy_fwd_bwd", [](const sizes& s) {
    auto d = std::make_shared<ce_data>(s);
    auto p = rows_case(s, 2, 0);
    p.call = [d] {
      d->loss = loom::cross_entropy(d->z, d->t).data()[0];
      d->dz.emplace(loom::cross_entropy_backward(d->z, d->t));
    };
    p.sums = [d] { return std::vector<double>{std::fabs(d->loss), abs_sum(*d->dz)}; };
    return p;
  });
  struct mm_data {
    mat a, b, y;
    vec bias;
    explicit mm_data(index_t n)
        : a(seeded(n, n, 11, -1, 1)), b(seeded(n, n, 12, -0.03, 0.03)), y({n, n}), bias(seeded(n, 13, -1, 1)) {}
  };
  auto mm_case = [](const sizes& s, bool epilogue) {
    auto d = std::make_shared<mm_data>(s.mm);
    prepared p;
    p.dims = {{"n", s.mm}};
    p.bytes = 4.0 * 3 * static_cast<double>(s.mm * s.mm);
    p.flop = 2.0 * static_cast<double>(s.mm) * static_cast<double>(s.mm) * static_cast<double>(s.mm);
    if (epilogue)
      p.call = [d] { d->y = loom::gelu(loom::matmul(d->a, d->b) + d->bias, loom::approximate::tanh); };
    else
      p.call = [d] { d->y = loom::matmul(d->a, d->b); };
    p.sums = [d] { return std::vector<double>{abs_sum(d->y)}; };
    return p;
  };
  c.emplace_back("matmul", [mm_case](const sizes& s) { return mm_case(s, false); });
  c.emplace_back("matmul_bias_gelu", [mm_case](const sizes& s) { return mm_case(s, true); });
  // One SGD step of an MLP in -> hidden -> 10: z1 = x w1 + b1, h = gelu_tanh(z1),
  // z2 = h w2 + b2, mean cross-entropy; backward and update by hand from
  // the layers' gradients (cross_entropy_backward, loom::grad of gelu).
  struct mlp_data {
    mat x, w1, w2, z1, h, z2, dh, dz1, dw1, dw2;
    vec b1, b2;
    loom::host_tensor<std::int64_t, 1> t;
    float loss = 0;
    explicit mlp_data(const sizes& s)
        : x(seeded(s.batch, s.in, 21, -1, 1)),
          w1(seeded(s.in, s.hidden, 22, -0.05, 0.05)),
          w2(seeded(s.hidden, mlp_classes, 23, -0.05, 0.05)),
          z1({s.batch, s.hidden}),
          h({s.batch, s.hidden}),
          z2({s.batch, mlp_classes}),
          dh({s.batch, s.hidden}),
          dz1({s.batch, s.hidden}),
          dw1({s.in, s.hidden}),
          dw2({s.hidden, mlp_classes}),
          b1(seeded(s.hidden, 24, -0.1, 0.1)),
          b2(seeded(mlp_classes, 25, -0.1, 0.1)),
          t(seeded_labels(s.batch, mlp_classes, 26)) {}
  };
  c.emplace_back("mlp_step", [](const sizes& s) {
    auto d = std::make_shared<mlp_data>(s);
    prepared p;
    p.dims = {{"batch", s.batch}, {"in", s.in}, {"hidden", s.hidden}, {"classes", mlp_classes}};
    const double b = static_cast<double>(s.batch), i = static_cast<double>(s.in), h = static_cast<double>(s.hidden),
                 k = static_cast<double>(mlp_classes);
    // Forward 2 products, backward 3 (no gradient of x).
    p.flop = 2 * (b * i * h + b * h * k) + 2 * (2 * b * h * k + b * i * h);
    p.bytes = 4.0 * (b * i + 3 * (i * h + h * k + h + k));  // x read; each parameter read, updated
    p.call = [d] {
      d->z1 = loom::matmul(d->x, d->w1) + d->b1;
      d->h = gelu_tanh(d->z1);
      d->z2 = loom::matmul(d->h, d->w2) + d->b2;
      d->loss = loom::cross_entropy(d->z2, d->t).data()[0];
      const auto dz2 = loom::cross_entropy_backward(d->z2, d->t);
      d->dh = loom::matmul(dz2, d->w2.view().t());
      d->dz1 = loom::grad<0>(gelu_tanh)(d->z1, d->dh);
      const auto db2 = loom::sum(dz2, 0);
      const auto db1 = loom::sum(d->dz1, 0);
      // The products' epilogues cannot read the output they write (w -= lr * matmul(...)
      // throws aliasing_error), so the weight gradients are tensors of their own.
      d->dw2 = loom::matmul(d->h.view().t(), dz2);
      d->dw1 = loom::matmul(d->x.view().t(), d->dz1);
      d->w2 -= sgd_lr * d->dw2;
      d->b2 -= sgd_lr * db2;
      d->w1 -= sgd_lr * d->dw1;
      d->b1 -= sgd_lr * db1;
    };
    p.sums = [d] {
      return std::vector<double>{std::fabs(d->loss), abs_sum(d->w1), abs_sum(d->b1), abs_sum(d->w2), abs_sum(d->b2)};
    };
    return p;
  });
  return c;
}

double ms_of(const std::function<void()>& f) {
  const auto a = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

// A STREAM-like copy: n floats from a to b on the host threads.
struct copy_bench {
  std::vector<float> a, b;
  explicit copy_bench(index_t n) : a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n)) {
    const auto m = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < m; ++i) a[static_cast<std::size_t>(i)] = 1.0f, b[static_cast<std::size_t>(i)] = 0.0f;
  }
  void operator()() {
    const auto m = static_cast<std::int64_t>(a.size());
    const float* src = a.data();
    float* dst = b.data();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < m; ++i) dst[i] = src[i];
  }
  double bytes() const { return 2.0 * 4.0 * static_cast<double>(a.size()); }
};
}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]  (then commands on stdin; see the top of bench_vs_torch_cpu.cpp)\n",
                   argv[0]);
      return 2;
    }
  }
  const sizes s = quick ? sizes{64, 256, 128, 32, 64, 32} : sizes{4096, 4096, 4096, 256, 784, 512};
  const auto cases = all_cases();
  const auto m = loom_bench::describe_machine(LOOM_BENCH_CXX_FLAGS);
  std::printf(
      "{\"machine\": {\"cpu\": \"%s\", \"cores\": %d, \"threads\": %d, \"isa\": \"%s\", \"compiled_for\": \"%s\", "
      "\"compiler\": \"%s\", \"flags\": \"%s\", \"host_simd\": \"%s\", \"host_matmul\": \"%s\"}}\n",
      loom_bench::json_escape(m.cpu).c_str(), m.cores, loom::host_threads(), loom_bench::json_escape(m.isa).c_str(),
      loom_bench::json_escape(m.compiled).c_str(), loom_bench::json_escape(m.compiler).c_str(),
      loom_bench::json_escape(m.flags).c_str(), loom::simd::name(loom::simd::host_isa()),
      loom_bench::json_escape(loom::host_gemm_backend_name()).c_str());
  std::fflush(stdout);

  std::optional<prepared> current;
  std::optional<copy_bench> copy;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd, arg;
    in >> cmd >> arg;
    try {
      if (cmd == "quit") break;
      if (cmd == "list") {
        for (const auto& c : cases) std::printf("case %s\n", c.first.c_str());
        std::printf("end\n");
      } else if (cmd == "copy") {
        if (!copy) copy.emplace(s.rows * s.cols);
        (*copy)();
        std::printf("copy %.0f", copy->bytes());
        for (int i = 0, n = std::stoi(arg); i < n; ++i) std::printf(" %.6g", ms_of(std::ref(*copy)));
        std::printf("\n");
      } else if (cmd == "case") {
        current.reset();
        for (const auto& c : cases)
          if (c.first == arg) current = c.second(s);
        if (!current) throw std::runtime_error("no case named " + arg);
        const auto before = loom::launches().host;
        try {
          current->call();
        } catch (...) {
          current.reset();
          throw;
        }
        const auto kernels = loom::launches().host - before;
        std::printf("{\"case\": \"%s\", \"dims\": {", arg.c_str());
        const char* sep = "";
        for (const auto& [k, v] : current->dims) std::printf("%s\"%s\": %lld", sep, k.c_str(), static_cast<long long>(v)), sep = ", ";
        std::printf("}, \"bytes\": %.0f, \"flop\": %.0f, \"kernels\": %llu, \"sums\": [", current->bytes,
                    current->flop, static_cast<unsigned long long>(kernels));
        sep = "";
        for (const double v : current->sums()) std::printf("%s%.9g", sep, v), sep = ", ";
        std::printf("]}\n");
      } else if (cmd == "run") {
        if (!current) throw std::runtime_error("run before case");
        std::string times = "ms";
        char buf[32];
        for (int i = 0, n = std::stoi(arg); i < n; ++i)
          std::snprintf(buf, sizeof buf, " %.6g", ms_of(current->call)), times += buf;
        std::printf("%s\n", times.c_str());
      } else {
        throw std::runtime_error("unknown command '" + cmd + "'");
      }
    } catch (const std::exception& e) {
      std::printf("error %s\n", e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}
