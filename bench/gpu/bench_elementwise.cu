// SPDX-License-Identifier: Apache-2.0
// Fused elementwise expressions on the GPU against their baselines, in float
// and bf16, over 8192 x 8192 elements, as a share of the device-to-device copy
// bandwidth measured in the same run (the ceiling):
//  - y = gelu(x * w + b) + r   (w, b broadcast rows): a bias + GELU + residual
//  - y = (a * b + c) * 0.5 - sigmoid(a) * c          (the CPU bench's expression)
//  - y = dropout(x + b, 0.1, seed, step) + r          (bias + dropout + residual)
// each as one loom assignment, as an unfused op-by-op chain (each op
// materialized, as an eager library runs it), and as a thrust::transform
// with a hand-written functor (not dropout: its baselines are op by op and
// the copy). PyTorch eager and torch.compile timings of the three
// expressions come from torch_layers.py (its dropout draws its own mask).
// Outputs are checked against a double reference (a sample of
// elements) before timing.
// Usage: bench_elementwise [--quick] [--json FILE]; exits 77 without a GPU.
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include "gpu_bench.cuh"

namespace {
using loom::index_t;
using namespace loom_bench;

constexpr std::uint64_t seed_x = 11, seed_w = 12, seed_b = 13, seed_r = 14;

template <class T>
__host__ __device__ float to_f(T v) {
  return static_cast<float>(v);
}

// The thrust baselines: one thread per element, float math, PyTorch's exact GELU.
template <class T>
struct bias_gelu_residual_fn {
  const T *x, *w, *b, *r;
  unsigned cols;
  __device__ T operator()(unsigned long long i) const {
    const unsigned c = static_cast<unsigned>(i % cols);
    const float h = to_f(x[i]) * to_f(w[c]) + to_f(b[c]);
    return T(0.5f * h * (1.0f + erff(h * 0.70710678f)) + to_f(r[i]));
  }
};
template <class T>
struct six_op_fn {
  const T *a, *b, *c;
  __device__ T operator()(unsigned long long i) const {
    const float av = to_f(a[i]), bv = to_f(b[i]), cv = to_f(c[i]);
    return T((av * bv + cv) * 0.5f - cv / (1.0f + expf(-av)));
  }
};

struct bench_state : bench_common {
  // Checks f's output (a poisoned y, then one call) against ref on a sample of
  // elements (every 997th and the last row), then times f over the sets.
  template <class T, class F, class Ref>
  void measure(const std::string& op, const std::string& shape, const std::string& impl, double bytes, int sets,
               std::vector<loom::device_tensor<T, 2>>& ys, F&& f, Ref&& ref) {
    record r{"gpu_elementwise", op, shape, dtype_name<T>(), impl};
    r.bytes = bytes;
    r.copy_gbps = copy.memcpy_gbps;
    poison(ys[0]);
    f(0);
    const auto yh = loom::to_host(ys[0]);
    const index_t n = yh.size(), cols = yh.extent(1);
    // bf16 op by op rounds every intermediate to bf16, hence the wide bf16 tolerance.
    error_meter m{std::is_same_v<T, float> ? 1e-5 : 5e-2, std::is_same_v<T, float> ? 1e-5 : 2e-2};
    for (index_t i = 0; i < n; i += (i >= n - cols ? 1 : 997)) m.add(to_f(yh.data()[i]), ref(i));
    r.check = m.verdict();
    if (r.check != "ok") failed = true;
    r.ms = time_rotated_ms(sets, timing, f);
    print_row(r);
    emit_json(opt.json_path, r);
  }
};

template <class T>
void bias_gelu_residual(bench_state& st, index_t rows, index_t cols) {
  const std::string op = "gelu(x*w+b)+r", shape = std::to_string(rows) + "x" + std::to_string(cols);
  const double set_bytes = 3.0 * rows * cols * sizeof(T);
  const int sets = rotation_sets(set_bytes);
  std::vector<loom::device_tensor<T, 2>> xs, rs, ys;
  for (int s = 0; s < sets; ++s) {
    xs.emplace_back(loom::shape<2>{rows, cols}), rs.emplace_back(loom::shape<2>{rows, cols});
    ys.emplace_back(loom::shape<2>{rows, cols});
    hash_fill(xs.back(), seed_x + 100 * s), hash_fill(rs.back(), seed_r + 100 * s);
  }
  loom::device_tensor<T, 1> w({cols}), b({cols});
  hash_fill(w, seed_w), hash_fill(b, seed_b);
  const double bytes = set_bytes + 2.0 * cols * sizeof(T);
  auto ref = [&](index_t i) {
    const auto u = static_cast<std::uint64_t>(i), c = static_cast<std::uint64_t>(i % cols);
    const double h = static_cast<double>(hashed<T>(seed_x, u)) * hashed<T>(seed_w, c) + hashed<T>(seed_b, c);
    return 0.5 * h * (1 + std::erf(h / std::sqrt(2.0))) + hashed<T>(seed_r, u);
  };
  st.measure<T>(op, shape, "loom fused", bytes, sets, ys, [&](int s) { ys[s] = loom::gelu(xs[s] * w + b) + rs[s]; },
                ref);
  st.measure<T>(op, shape, "loom op by op", bytes, sets, ys,
                [&](int s) {
                  auto t1 = loom::materialize(xs[s] * w);
                  auto t2 = loom::materialize(t1 + b);
                  auto t3 = loom::materialize(loom::gelu(t2));
                  ys[s] = t3 + rs[s];
                },
                ref);
  st.measure<T>(op, shape, "thrust::transform", bytes, sets, ys,
                [&](int s) {
                  thrust::transform(thrust::cuda::par_nosync.on(loom::current_stream().get()),
                                    thrust::counting_iterator<unsigned long long>(0),
                                    thrust::counting_iterator<unsigned long long>(rows * cols), ys[s].data(),
                                    bias_gelu_residual_fn<T>{xs[s].data(), w.data(), b.data(), rs[s].data(),
                                                             static_cast<unsigned>(cols)});
                  LOOM_CUDA_CHECK(cudaGetLastError());
                },
                ref);
}

template <class T>
void six_op(bench_state& st, index_t rows, index_t cols) {
  const std::string op = "(a*b+c)*0.5-sigmoid(a)*c", shape = std::to_string(rows) + "x" + std::to_string(cols);
  const double set_bytes = 4.0 * rows * cols * sizeof(T);
  const int sets = rotation_sets(set_bytes);
  std::vector<loom::device_tensor<T, 2>> as, bs, cs, ys;
  for (int s = 0; s < sets; ++s) {
    for (auto* v : {&as, &bs, &cs, &ys}) v->emplace_back(loom::shape<2>{rows, cols});
    hash_fill(as.back(), seed_x + 100 * s), hash_fill(bs.back(), seed_w + 100 * s);
    hash_fill(cs.back(), seed_b + 100 * s);
  }
  auto ref = [&](index_t i) {
    const auto u = static_cast<std::uint64_t>(i);
    const double a = hashed<T>(seed_x, u), b = hashed<T>(seed_w, u), c = hashed<T>(seed_b, u);
    return (a * b + c) * 0.5 - c / (1 + std::exp(-a));
  };
  st.measure<T>(op, shape, "loom fused", set_bytes, sets, ys,
                [&](int s) { ys[s] = (as[s] * bs[s] + cs[s]) * 0.5f - loom::sigmoid(as[s]) * cs[s]; }, ref);
  st.measure<T>(op, shape, "loom op by op", set_bytes, sets, ys,
                [&](int s) {
                  auto t1 = loom::materialize(as[s] * bs[s]);
                  auto t2 = loom::materialize(t1 + cs[s]);
                  auto t3 = loom::materialize(t2 * 0.5f);
                  auto t4 = loom::materialize(loom::sigmoid(as[s]));
                  auto t5 = loom::materialize(t4 * cs[s]);
                  ys[s] = t3 - t5;
                },
                ref);
  st.measure<T>(op, shape, "thrust::transform", set_bytes, sets, ys,
                [&](int s) {
                  thrust::transform(thrust::cuda::par_nosync.on(loom::current_stream().get()),
                                    thrust::counting_iterator<unsigned long long>(0),
                                    thrust::counting_iterator<unsigned long long>(rows * cols), ys[s].data(),
                                    six_op_fn<T>{as[s].data(), bs[s].data(), cs[s].data()});
                  LOOM_CUDA_CHECK(cudaGetLastError());
                },
                ref);
}

// The tanh gelu written out over a named subexpression t = x * w + b (t used
// 5 times): the plain expression's shared kernel loads x, w and b once and
// computes t once per vector step (docs/02_expressions.md); the built-in
// gelu(approximate::tanh) is one map over t, the form to match.
template <class T>
void written_out_gelu(bench_state& st, index_t rows, index_t cols) {
  const std::string op = "gelu_tanh(t), t=x*w+b, written out", shape = std::to_string(rows) + "x" + std::to_string(cols);
  const double set_bytes = 2.0 * rows * cols * sizeof(T);
  const int sets = rotation_sets(set_bytes);
  std::vector<loom::device_tensor<T, 2>> xs, ys;
  for (int s = 0; s < sets; ++s) {
    xs.emplace_back(loom::shape<2>{rows, cols}), ys.emplace_back(loom::shape<2>{rows, cols});
    hash_fill(xs.back(), seed_x + 100 * s);
  }
  loom::device_tensor<T, 1> w({cols}), b({cols});
  hash_fill(w, seed_w), hash_fill(b, seed_b);
  const double bytes = set_bytes + 2.0 * cols * sizeof(T);
  auto ref = [&](index_t i) {
    const auto u = static_cast<std::uint64_t>(i), c = static_cast<std::uint64_t>(i % cols);
    const double t = static_cast<double>(hashed<T>(seed_x, u)) * hashed<T>(seed_w, c) + hashed<T>(seed_b, c);
    return 0.5 * t * (1 + std::tanh(0.7978845608028654 * (t + 0.044715 * t * t * t)));
  };
  st.measure<T>(op, shape, "loom written out", bytes, sets, ys,
                [&](int s) {
                  const auto t = xs[s] * w + b;
                  ys[s] = 0.5f * t * (1.f + loom::tanh(0.7978845608f * (t + 0.044715f * t * t * t)));
                },
                ref);
  st.measure<T>(op, shape, "loom gelu(tanh)", bytes, sets, ys,
                [&](int s) { ys[s] = loom::gelu(xs[s] * w + b, loom::approximate::tanh); }, ref);
}

// Whether element i is dropped by dropout(e, p, seed, step): the counters of docs/09_random.md.
bool dropped(std::uint64_t seed, std::uint64_t step, float p, std::uint64_t i) {
  const std::uint64_t blk = i / 4;
  const loom::philox_words w =
      loom::philox4x32_10({{static_cast<std::uint32_t>(blk), static_cast<std::uint32_t>(blk >> 32),
                            static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32)}},
                          static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return (w.w[i % 4] >> 8) * 0x1p-24 < p;
}

template <class T>
void bias_dropout_residual(bench_state& st, index_t rows, index_t cols) {
  const std::string op = "dropout(x+b,0.1)+r", shape = std::to_string(rows) + "x" + std::to_string(cols);
  const double set_bytes = 3.0 * rows * cols * sizeof(T);
  const int sets = rotation_sets(set_bytes);
  std::vector<loom::device_tensor<T, 2>> xs, rs, ys;
  for (int s = 0; s < sets; ++s) {
    xs.emplace_back(loom::shape<2>{rows, cols}), rs.emplace_back(loom::shape<2>{rows, cols});
    ys.emplace_back(loom::shape<2>{rows, cols});
    hash_fill(xs.back(), seed_x + 100 * s), hash_fill(rs.back(), seed_r + 100 * s);
  }
  loom::device_tensor<T, 1> b({cols});
  hash_fill(b, seed_b);
  const double bytes = set_bytes + static_cast<double>(cols) * sizeof(T);
  const float p = 0.1f;
  const std::uint64_t seed = 2026, step = 33;
  const double scale = 1.0f / (1.0f - p);
  auto ref = [&](index_t i) {
    const auto u = static_cast<std::uint64_t>(i), c = static_cast<std::uint64_t>(i % cols);
    const double h = static_cast<double>(hashed<T>(seed_x, u)) + hashed<T>(seed_b, c);
    return (dropped(seed, step, p, u) ? 0.0 : h * scale) + hashed<T>(seed_r, u);
  };
  st.measure<T>(op, shape, "loom fused", bytes, sets, ys,
                [&](int s) { ys[s] = loom::dropout(xs[s] + b, p, seed, step) + rs[s]; }, ref);
  st.measure<T>(op, shape, "loom op by op", bytes, sets, ys,
                [&](int s) {
                  auto biased = loom::materialize(xs[s] + b);
                  auto kept = loom::materialize(loom::dropout(biased, p, seed, step));
                  ys[s] = kept + rs[s];
                },
                ref);
}
}  // namespace

int main(int argc, char** argv) {
  bench_state st{{options::parse(argc, argv)}};
  if (!loom::gpu::is_available()) return no_gpu("bench_elementwise");
  try {
    if (st.opt.quick) st.timing = {1, 3};
    const auto p = loom::gpu::properties();
    std::printf("bench_elementwise on %s (%d SMs, L2 %d MiB); median of %d samples after %d warm-up\n",
                p.name.c_str(), p.sm_count, p.l2_cache_bytes >> 20, st.timing.runs, st.timing.warmup);
    print_header();
    st.copy = measure_copy("gpu_elementwise", st.opt, st.timing);
    const index_t rows = st.opt.quick ? 257 : 8192, cols = st.opt.quick ? 1023 : 8192;
    bias_gelu_residual<float>(st, rows, cols);
    bias_gelu_residual<loom::bf16>(st, rows, cols);
    six_op<float>(st, rows, cols);
    six_op<loom::bf16>(st, rows, cols);
    bias_dropout_residual<float>(st, rows, cols);
    bias_dropout_residual<loom::bf16>(st, rows, cols);
    written_out_gelu<float>(st, rows, cols);
    written_out_gelu<loom::bf16>(st, rows, cols);
    if (st.failed) {
      std::printf("FAIL: a result differs from its double reference\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {  // loom::error, and thrust's and the standard library's
    std::fprintf(stderr, "bench_elementwise: %s\n", e.what());
    return 1;
  }
}
