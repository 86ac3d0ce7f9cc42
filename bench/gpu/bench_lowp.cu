// SPDX-License-Identifier: Apache-2.0
// Low precision on the GPU, as a share of the device-to-device copy bandwidth
// measured in the same run (bytes read + written per second):
//  - per-row fp8 quantization of bf16, quantize_rows (e4m3 values and a float
//    scale per row, one row kernel), 8192 x 8192 (target: >= 90% of copy);
//  - per-block quantization, quantize_blocks (MXFP8: e4m3 values, an e8m0
//    scale per 32), the same data (target: >= 90% of copy);
//  - fp8 GEMM, scaled_matmul (e4m3 x e4m3 -> bf16, per-tensor scales) at
//    8192 x 8192 x 8192, against cuBLASLt called directly with the same
//    operands and scales (target: within 3%) and against the bf16 GEMM of
//    loom::matmul (TFLOP/s);
//  - fp8 GEMM into fp8, scaled_matmul (e4m3 x e4m3 -> e4m3 with D's scale
//    and cuBLASLt's amax of D), the same shape, against cuBLASLt called
//    directly with the same scales (target: within 3%).
// Each result is checked on sampled rows against the host's scalar
// conversion (quantization) or a double dot product over the decoded
// operands (GEMM) before it is timed. CUDA events after warm-up, median of
// many samples; inputs larger than the L2 cache.
// Usage: bench_lowp_gpu [--quick] [--json FILE]; exits 77 without a GPU.
#include <algorithm>
#include <cmath>
#include <exception>
#include <string>

#include <loom/loom.hpp>

#include "direct_gemm.cuh"
#include "gpu_bench.cuh"

namespace {
using loom::index_t;
using namespace loom_bench;

struct bench_state : bench_common {
  void measure(const std::string& op, const std::string& shape, const char* dtype, const std::string& impl,
               double bytes, const std::string& check, const std::function<void()>& f) {
    record r{"gpu_lowp", op, shape, dtype, impl};
    r.bytes = bytes;
    r.copy_gbps = copy.memcpy_gbps;
    timed_row(r, check, f);
  }
  // Times f as the row `r` whose result `check` describes; returns the median ms.
  double timed_row(record r, const std::string& check, const std::function<void()>& f) {
    r.check = check;
    if (check != "ok") failed = true;
    r.ms = time_rotated_ms(1, timing, [&](int) { f(); });
    print_row(r);
    emit_json(opt.json_path, r);
    return r.ms;
  }
};

// The first `rows` rows of a per-row or per-block e4m3 quantization of
// hashed bf16 data (seed 7), checked against the host's scalar conversion.
template <class S>
std::string check_quantized(const loom::device_tensor<loom::e4m3, 2>& q, const loom::device_tensor<S, 2>& s,
                            index_t rows, index_t cols, index_t block) {
  const auto qh = loom::to_host(q.view().slice(loom::range(0, rows)));
  const auto sh = loom::to_host(s.view().slice(loom::range(0, rows)));
  const index_t per_row = cols / block;
  for (index_t r = 0; r < rows; ++r)
    for (index_t b = 0; b < per_row; ++b) {
      float amax = 0;
      for (index_t c = b * block; c < (b + 1) * block; ++c)
        amax = std::max(amax, std::fabs(hashed<loom::bf16>(7, static_cast<std::uint64_t>(r * cols + c))));
      const float scale = loom::fn::block_scale<loom::e4m3, S>{}(amax);
      if (static_cast<float>(sh.data()[r * per_row + b]) != scale) return "FAIL (a scale differs)";
      for (index_t c = b * block; c < (b + 1) * block; ++c) {
        const float v =
            std::clamp(hashed<loom::bf16>(7, static_cast<std::uint64_t>(r * cols + c)) / scale, -448.0f, 448.0f);
        if (loom::detail::bits_of(qh.data()[r * cols + c]) !=
            loom::detail::bits_of(loom::detail::to_float8<loom::e4m3>(v, false)))
          return "FAIL (a code differs)";
      }
    }
  return "ok";
}

void quantization(bench_state& st, index_t rows, index_t cols) {
  loom::device_tensor<loom::bf16, 2> x({rows, cols});
  hash_fill(x, 7);
  loom::device_tensor<loom::e4m3, 2> q({rows, cols});
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  {
    loom::device_tensor<float, 2> s({rows, 1});
    loom::quantize_rows(q, s, x);
    st.measure("quantize_rows<e4m3>(x)", shape, "bf16", "loom", 3 * n + 4.0 * static_cast<double>(rows),
               check_quantized(q, s, 8, cols, cols), [&] { loom::quantize_rows(q, s, x); });
  }
  {
    loom::device_tensor<loom::e8m0, 2> s({rows, cols / 32});
    loom::quantize_blocks(q, s, x, 32);
    st.measure("quantize_blocks<e4m3, e8m0>(x, 32)", shape, "bf16", "loom", 3 * n + n / 32,
               check_quantized(q, s, 8, cols, 32), [&] { loom::quantize_blocks(q, s, x, 32); });
  }
}

// e4m3 x e4m3 -> e4m3 with D's scale (half of e4m3's range for the largest
// value) and cuBLASLt's amax, checked on sampled outputs against `y` (the
// bf16 product of the same operands), timed beside cuBLASLt called directly.
void fp8_output_gemm(bench_state& st, const loom::device_tensor<loom::e4m3, 2>& x8,
                     const loom::device_tensor<float, 1>& sx, const loom::device_tensor<loom::e4m3, 2>& w8,
                     const loom::device_tensor<float, 1>& sw, const loom::device_tensor<loom::bf16, 2>& y,
                     const std::string& shape) {
  const index_t m = y.extent(0), n = y.extent(1), k = x8.extent(1);
  const float y_amax = loom::max(loom::abs(y)).item();
  loom::host_tensor<float, 1> dsh({1});
  dsh.data()[0] = 224.0f / y_amax;
  const auto d_scale = loom::to_device(dsh);
  loom::device_tensor<float, 1> amax({1}), amax_direct({1});
  loom::device_tensor<loom::e4m3, 2> y8({m, n}), y8d({m, n});
  loom::scaled_matmul_extras<loom::e4m3, loom::device> ex;
  ex.amax = amax.view();
  ex.d_scale = d_scale.view();
  loom::scaled_matmul(y8, x8, sx, w8.t(), sw, ex);
  const direct_gemm<loom::e4m3, loom::e4m3, loom::e4m3> direct(
      x8.data(), w8.data(), y8d.data(), static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), false, true,
      sx.data(), sw.data(), d_scale.data(), amax_direct.data());
  direct();
  // Within an e4m3 ulp (1/8 relative, plus the subnormal step) of the
  // scaled bf16 result, which itself carries bf16's rounding.
  const auto yh = loom::to_host(y.view().slice(loom::range(0, 2), loom::range(0, 4)));
  const auto y8h = loom::to_host(y8.view().slice(loom::range(0, 2), loom::range(0, 4)));
  const auto y8dh = loom::to_host(y8d.view().slice(loom::range(0, 2), loom::range(0, 4)));
  std::string check = "ok", direct_check = "ok";
  for (index_t i = 0; i < 8; ++i) {
    const float want = dsh.data()[0] * static_cast<float>(yh.data()[i]);
    const float got = static_cast<float>(y8h.data()[i]), got_direct = static_cast<float>(y8dh.data()[i]);
    if (std::fabs(got - want) > 0.13f * std::fabs(want) + 0.02f) check = "FAIL (an output differs)";
    if (loom::detail::bits_of(y8h.data()[i]) != loom::detail::bits_of(y8dh.data()[i]) &&
        std::fabs(got - got_direct) > 0.13f * std::fabs(got) + 0.02f)
      direct_check = "FAIL (differs from loom's)";
  }
  // cuBLASLt's amax is of D before its scale: the bf16 product's amax.
  const float got_amax = loom::to_host(amax).data()[0], direct_amax = loom::to_host(amax_direct).data()[0];
  if (std::fabs(got_amax - y_amax) > 1e-2f * y_amax) check = "FAIL (amax differs)";
  if (std::fabs(got_amax - direct_amax) > 1e-5f * direct_amax) direct_check = "FAIL (amax differs from loom's)";
  const char* op = "scaled_matmul e4m3 -> e4m3, d_scale, amax";
  const double ms = st.timed_row({"gpu_lowp", op, shape, "e4m3", "loom"}, check,
                                 [&] { loom::scaled_matmul(y8, x8, sx, w8.t(), sw, ex); });
  const double direct_ms =
      st.timed_row({"gpu_lowp", op, shape, "e4m3", "cuBLASLt direct"}, direct_check, [&] { direct(); });
  std::printf("  loom / cuBLASLt direct time (fp8 D): %.3fx (target <= 1.03x)\n", ms / direct_ms);
}

void gemm(bench_state& st, index_t m, index_t n, index_t k) {
  loom::device_tensor<loom::bf16, 2> xb({m, k}), wb({n, k});
  hash_fill(xb, 11);
  hash_fill(wb, 12);
  loom::device_tensor<loom::e4m3, 2> x8({m, k}), w8({n, k});
  loom::device_tensor<float, 1> sx({1}), sw({1});
  loom::quantize_tensor(x8, sx, xb);
  loom::quantize_tensor(w8, sw, wb);
  loom::device_tensor<loom::bf16, 2> y({m, n});
  loom::scaled_matmul(y, x8, sx, w8.t(), sw);
  // Sampled outputs against a double dot product over the decoded operands.
  const auto x8h = loom::to_host(x8.view().slice(loom::range(0, 2)));
  const auto w8h = loom::to_host(w8.view().slice(loom::range(0, 4)));
  const float sxh = loom::to_host(sx).data()[0], swh = loom::to_host(sw).data()[0];
  const auto yh = loom::to_host(y.view().slice(loom::range(0, 2), loom::range(0, 4)));
  std::string check = "ok";
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 4; ++j) {
      double acc = 0;
      for (index_t l = 0; l < k; ++l)
        acc += static_cast<double>(static_cast<float>(x8h.data()[i * k + l])) *
               static_cast<double>(static_cast<float>(w8h.data()[j * k + l]));
      const double want = acc * sxh * swh, got = static_cast<float>(yh.data()[i * 4 + j]);
      if (std::fabs(got - want) > 1e-2 * (1 + std::fabs(want))) check = "FAIL (an output differs)";
    }
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double ms8 = st.timed_row({"gpu_lowp", "scaled_matmul e4m3 -> bf16", shape, "e4m3", "loom"}, check,
                                  [&] { loom::scaled_matmul(y, x8, sx, w8.t(), sw); });
  loom::device_tensor<loom::bf16, 2> yd({m, n});
  const direct_gemm<loom::e4m3, loom::e4m3, loom::bf16> direct(x8.data(), w8.data(), yd.data(), static_cast<int>(m),
                                                               static_cast<int>(n), static_cast<int>(k), false, true,
                                                               sx.data(), sw.data());
  direct();
  const auto ydh = loom::to_host(yd.view().slice(loom::range(0, 2), loom::range(0, 4)));
  std::string direct_check = "ok";
  for (index_t i = 0; i < 8; ++i)
    if (std::fabs(static_cast<float>(ydh.data()[i]) - static_cast<float>(yh.data()[i])) >
        1e-2f * (1 + std::fabs(static_cast<float>(yh.data()[i]))))
      direct_check = "FAIL (differs from loom's)";
  const double direct_ms = st.timed_row({"gpu_lowp", "scaled_matmul e4m3 -> bf16", shape, "e4m3", "cuBLASLt direct"},
                                        direct_check, [&] { direct(); });
  std::printf("  loom / cuBLASLt direct time: %.3fx (target <= 1.03x)\n", ms8 / direct_ms);
  const double ms_bf16 = st.timed_row({"gpu_lowp", "matmul bf16 -> bf16", shape, "bf16", "loom"}, "ok",
                                      [&] { y = loom::matmul(xb, wb.t()); });
  std::printf("  fp8 %.1f TFLOP/s, bf16 %.1f TFLOP/s (%.2fx)\n", flops / (ms8 * 1e9), flops / (ms_bf16 * 1e9),
              ms_bf16 / ms8);
  fp8_output_gemm(st, x8, sx, w8, sw, y, shape);
}
}  // namespace

int main(int argc, char** argv) {
  bench_state st{{options::parse(argc, argv)}};
  if (!loom::gpu::is_available()) return no_gpu("bench_lowp_gpu");
  try {
    if (st.opt.quick) st.timing = {1, 3};
    const auto p = loom::gpu::properties();
    std::printf("bench_lowp_gpu on %s (%d SMs); median of %d samples after %d warm-up\n", p.name.c_str(), p.sm_count,
                st.timing.runs, st.timing.warmup);
    print_header();
    st.copy = measure_copy("gpu_lowp", st.opt, st.timing);
    quantization(st, st.opt.quick ? 256 : 8192, st.opt.quick ? 1024 : 8192);
    gemm(st, st.opt.quick ? 256 : 8192, st.opt.quick ? 256 : 8192, st.opt.quick ? 256 : 8192);
    if (st.failed) {
      std::printf("FAIL: a result differs from its reference\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_lowp_gpu: %s\n", e.what());
    return 1;
  }
}
