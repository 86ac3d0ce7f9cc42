// SPDX-License-Identifier: Apache-2.0
#pragma once

// cuDNN under convolution on device tensors: the error types, descriptors
// built from loom's geometry, a pool of handles per device, the algorithm
// chosen once per shape (deterministic only) and one checked call per pass.
// cuDNN's convolution API (cudnn_cnn.h): forward, forward with bias and
// ReLU fused, data gradient, filter gradient. Host code only (cuDNN is a
// host library): this header compiles with g++, and everything but the
// calls that take a handle runs without a GPU (descriptors, output extents,
// error strings). Built where CMake found cuDNN 9 (LOOM_HAS_CUDNN).

#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config.hpp"
#include "loom/conv/host.hpp"
#include "loom/core/device.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/stream.hpp"
#include "loom/memory/memory.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! A failed cuDNN call: the message names the call, file:line, cuDNN's status
//! name and cuDNN's own explanation of the latest error
//! (cudnnGetLastErrorString); `status()` gives the code.
//! Example: `try { y = loom::conv2d(x, w); } catch (const loom::cudnn_error& e) { e.status(); }`
class cudnn_error : public error {
 public:
  cudnn_error(cudnnStatus_t status, const std::string& call, const char* file, int line, const std::string& detail)
      : error("loom: " + call + " failed at " + file + ":" + std::to_string(line) + ": " +
              cudnnGetErrorString(status) + (detail.empty() ? "" : " (" + detail + ")")),
        status_(status) {}
  //! cuDNN's status code.
  [[nodiscard]] cudnnStatus_t status() const noexcept { return status_; }

 private:
  cudnnStatus_t status_;
};

//! A cuDNN call that failed with a status of the CUDNN_STATUS_NOT_SUPPORTED
//! family: cuDNN has no engine for this shape, layout or element type (for
//! example no deterministic algorithm). What a caller catches to run the
//! operation another way.
class cudnn_not_supported : public cudnn_error {
 public:
  using cudnn_error::cudnn_error;
};

//! The version of the cuDNN library loaded at run time (91900 for 9.19.0);
//! needs no GPU.
//! Example: `std::printf("cuDNN %zu\n", loom::cudnn_version());`
inline std::size_t cudnn_version() noexcept { return cudnnGetVersion(); }
}  // namespace loom

namespace loom::detail::cudnn {
// cuDNN's explanation of the latest failure on this thread, or "".
inline std::string last_message() {
  std::array<char, 1024> text{};
  cudnnGetLastErrorString(text.data(), text.size());
  return text.data();
}

// Throws the typed error of a failed status: cudnn_not_supported for the
// NOT_SUPPORTED family, cudnn_error otherwise; `detail` (default: cuDNN's
// last error string) follows the status name.
[[noreturn]] inline void raise(cudnnStatus_t status, const std::string& call, const char* file, int line,
                               const std::string& detail) {
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED)
    throw cudnn_not_supported(status, call, file, line, detail);
  throw cudnn_error(status, call, file, line, detail);
}
[[noreturn]] inline void raise(cudnnStatus_t status, const std::string& call, const char* file, int line) {
  raise(status, call, file, line, last_message());
}
}  // namespace loom::detail::cudnn

//! Checks a cuDNN call; throws loom::cudnn_error (loom::cudnn_not_supported
//! for the NOT_SUPPORTED family) naming the call, file:line, the status and
//! cuDNN's message.
#define LOOM_CUDNN_CHECK(call)                                                            \
  do {                                                                                    \
    const cudnnStatus_t loom_cudnn_status_ = (call);                                      \
    if (loom_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                       \
      ::loom::detail::cudnn::raise(loom_cudnn_status_, #call, __FILE__, __LINE__);        \
  } while (0)

namespace loom::detail::cudnn {
using conv::geometry;

// An owned cuDNN descriptor: created on construction, destroyed on every
// path; a failed destroy is counted (release_error_count), not thrown.
template <class Handle>
class owned {
 public:
  using create_fn = cudnnStatus_t (*)(Handle*);
  using destroy_fn = cudnnStatus_t (*)(Handle);
  owned(create_fn create, destroy_fn destroy, const char* create_name, const char* destroy_name)
      : destroy_(destroy), destroy_name_(destroy_name) {
    const cudnnStatus_t st = create(&handle_);
    if (st != CUDNN_STATUS_SUCCESS) raise(st, create_name, __FILE__, __LINE__);
  }
  owned(const owned&) = delete;
  owned& operator=(const owned&) = delete;
  ~owned() {
    const cudnnStatus_t st = destroy_(handle_);
    if (st != CUDNN_STATUS_SUCCESS)
      note_release_error(destroy_name_, __FILE__, __LINE__, cudnnGetErrorString(st), "destroying a descriptor");
  }
  [[nodiscard]] Handle get() const noexcept { return handle_; }

 private:
  Handle handle_ = nullptr;
  destroy_fn destroy_;
  const char* destroy_name_;
};
struct tensor_descriptor : owned<cudnnTensorDescriptor_t> {
  tensor_descriptor()
      : owned(cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor, "cudnnCreateTensorDescriptor",
              "cudnnDestroyTensorDescriptor") {}
};
struct filter_descriptor : owned<cudnnFilterDescriptor_t> {
  filter_descriptor()
      : owned(cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor, "cudnnCreateFilterDescriptor",
              "cudnnDestroyFilterDescriptor") {}
};
struct convolution_descriptor : owned<cudnnConvolutionDescriptor_t> {
  convolution_descriptor()
      : owned(cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor,
              "cudnnCreateConvolutionDescriptor", "cudnnDestroyConvolutionDescriptor") {}
};
struct activation_descriptor : owned<cudnnActivationDescriptor_t> {
  activation_descriptor()
      : owned(cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor,
              "cudnnCreateActivationDescriptor", "cudnnDestroyActivationDescriptor") {}
};

// The element types cuDNN convolves, and what it computes and scales them in.
template <class T>
inline constexpr bool convolvable_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                      std::is_same_v<T, half> || std::is_same_v<T, bf16>;
template <class T>
constexpr cudnnDataType_t data_type() {
  if constexpr (std::is_same_v<T, double>)
    return CUDNN_DATA_DOUBLE;
  else if constexpr (std::is_same_v<T, half>)
    return CUDNN_DATA_HALF;
  else if constexpr (std::is_same_v<T, bf16>)
    return CUDNN_DATA_BFLOAT16;
  else
    return CUDNN_DATA_FLOAT;
}
// float and double convolve with FMA only (no TF32 rounding, as loom's
// float matmul by default); half and bf16 on Tensor Cores, accumulating in float.
template <class T>
constexpr cudnnMathType_t math_type() {
  return std::is_same_v<T, float> || std::is_same_v<T, double> ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}
template <class T>
using scale_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// cuDNN takes 32-bit extents and strides.
inline int to_int(index_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw value_error(std::string("loom: cuDNN takes extents and strides of 32 bits; ") + what + " is " +
                      std::to_string(v));
  return static_cast<int>(v);
}

// Whether cuDNN can read a view as it is: no zero (broadcast) or
// negative stride on an axis of more than one element.
template <class V>
bool describable(const V& v) {
  for (std::size_t a = 0; a != V::rank; ++a)
    if (v.extent(a) > 1 && v.stride(a) < 1) return false;
  return true;
}

// Describes an NC(D)HW-ordered operand (rank 4 or 5) by its extents and
// strides (any order in memory: NCHW, NHWC or a strided view). An axis of
// one element gets a stride past the others, which cuDNN accepts for any layout.
template <std::size_t N>
void describe_tensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, const shape<N>& extents,
                     const shape<N>& strides, const char* what) {
  index_t past = 1;
  for (std::size_t a = 0; a != N; ++a)
    if (extents[a] > 1) past = std::max(past, strides[a] * extents[a]);
  std::array<int, N> dims{}, steps{};
  for (std::size_t a = 0; a != N; ++a) {
    dims[a] = to_int(extents[a], what);
    steps[a] = to_int(extents[a] > 1 ? strides[a] : past, what);
  }
  LOOM_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d, type, static_cast<int>(N), dims.data(), steps.data()));
}

// The descriptors of one convolution: x [N, C, H, W] and y [N, Cout, oh, ow]
// (NCHW-ordered extents, strides as given; with R = 5 x [N, C, D, H, W], y
// [N, Cout, od, oh, ow] and w [Cout, C / G, kd, kh, kw], NCDHW only), w contiguous in `filter_format`
// (CUDNN_TENSOR_NCHW: [Cout, C / G, kh, kw]; CUDNN_TENSOR_NHWC: [Cout, kh,
// kw, C / G], what cuDNN's channels-last engines take), cross-correlation
// with the geometry's padding, stride, dilation and groups.
struct conv_descriptors {
  tensor_descriptor x, y;
  filter_descriptor w;
  convolution_descriptor conv;
};
template <class T, std::size_t R>
void describe(conv_descriptors& d, const geometry& g, const shape<R>& x_strides, const shape<R>& y_strides,
              cudnnTensorFormat_t filter_format) {
  constexpr cudnnDataType_t type = data_type<T>();
  constexpr cudnnDataType_t compute = std::is_same_v<T, double> ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if constexpr (R == 5) {
    describe_tensor<5>(d.x.get(), type, {g.batch, g.channels, g.depth, g.height, g.width}, x_strides, "input x");
    describe_tensor<5>(d.y.get(), type, {g.batch, g.out_channels, g.out_d, g.out_h, g.out_w}, y_strides,
                       "output y");
    const std::array<int, 5> filter{to_int(g.out_channels, "Cout"), to_int(g.channels / g.groups, "C / groups"),
                                    to_int(g.kernel_d, "kd"), to_int(g.kernel_h, "kh"), to_int(g.kernel_w, "kw")};
    LOOM_CUDNN_CHECK(cudnnSetFilterNdDescriptor(d.w.get(), type, filter_format, 5, filter.data()));
    const std::array<int, 3> pad{to_int(g.pad_d, "padding"), to_int(g.pad_h, "padding"), to_int(g.pad_w, "padding")};
    const std::array<int, 3> stride{to_int(g.stride_d, "stride"), to_int(g.stride_h, "stride"),
                                    to_int(g.stride_w, "stride")};
    const std::array<int, 3> dilation{to_int(g.dilation_d, "dilation"), to_int(g.dilation_h, "dilation"),
                                      to_int(g.dilation_w, "dilation")};
    LOOM_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(d.conv.get(), 3, pad.data(), stride.data(), dilation.data(),
                                                     CUDNN_CROSS_CORRELATION, compute));
  } else {
    describe_tensor<4>(d.x.get(), type, {g.batch, g.channels, g.height, g.width}, x_strides, "input x");
    describe_tensor<4>(d.y.get(), type, {g.batch, g.out_channels, g.out_h, g.out_w}, y_strides, "output y");
    LOOM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w.get(), type, filter_format, to_int(g.out_channels, "Cout"),
                                                to_int(g.channels / g.groups, "C / groups"),
                                                to_int(g.kernel_h, "kh"), to_int(g.kernel_w, "kw")));
    LOOM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d.conv.get(), to_int(g.pad_h, "padding"), to_int(g.pad_w, "padding"), to_int(g.stride_h, "stride"),
        to_int(g.stride_w, "stride"), to_int(g.dilation_h, "dilation"), to_int(g.dilation_w, "dilation"),
        CUDNN_CROSS_CORRELATION, compute));
  }
  LOOM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv.get(), to_int(g.groups, "groups")));
  LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), math_type<T>()));
}

// The output extents cuDNN computes from the descriptors (no device needed).
template <std::size_t R = 4>
shape<R> output_extents(const conv_descriptors& d) {
  std::array<int, R> dims{};
  LOOM_CUDNN_CHECK(
      cudnnGetConvolutionNdForwardOutputDim(d.conv.get(), d.x.get(), d.w.get(), static_cast<int>(R), dims.data()));
  shape<R> out{};
  for (std::size_t a = 0; a != R; ++a) out[a] = dims[a];
  return out;
}

// The three passes of a convolution.
enum class pass : std::int64_t { forward, backward_data, backward_filter };

// A pass's algorithm for one shape: the first deterministic one that
// cuDNN's heuristics rank (cudnnGet*Algorithm_v7), its workspace and math type.
struct plan {
  int algo = 0;
  std::size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
using plan_key = std::array<std::int64_t, 34>;
template <std::size_t R>
plan_key key_of(int device, pass p, cudnnDataType_t type, const geometry& g, const shape<R>& x_strides,
                const shape<R>& y_strides, cudnnTensorFormat_t filter_format) {
  const auto at = [](const shape<R>& s, std::size_t a) { return a < R ? s[a] : std::int64_t{-1}; };
  return {static_cast<std::int64_t>(filter_format), g.depth, g.kernel_d, g.stride_d, g.pad_d, g.dilation_d,
          g.out_d, at(x_strides, 4), at(y_strides, 4),
          device,       static_cast<std::int64_t>(p), static_cast<std::int64_t>(type),
          g.batch,      g.channels,                   g.height,
          g.width,      g.out_channels,               g.kernel_h,
          g.kernel_w,   g.groups,                     g.stride_h,
          g.stride_w,   g.pad_h,                      g.pad_w,
          g.dilation_h, g.dilation_w,                 x_strides[0],
          x_strides[1], x_strides[2],                 x_strides[3],
          y_strides[0], y_strides[1],                 y_strides[2],
          y_strides[3]};
}

// The first entry of cuDNN's ranking that runs and is deterministic.
template <class Perf>
bool first_deterministic(const std::vector<Perf>& ranked, int count, plan& out) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = ranked[static_cast<std::size_t>(i)];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC) {
      out = {static_cast<int>(p.algo), p.memory, p.mathType};
      return true;
    }
  }
  return false;
}

inline const char* pass_name(pass p) {
  return p == pass::forward ? "forward" : p == pass::backward_data ? "data gradient" : "weight gradient";
}

// The plans chosen so far, for the process: asked once per key.
inline plan choose(cudnnHandle_t h, pass p, const conv_descriptors& d, const plan_key& key, const geometry& g) {
  static std::mutex mu;
  static std::map<plan_key, plan> cache;
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  plan chosen;
  bool found = false;
  int most = 0, count = 0;
  if (p == pass::forward) {
    LOOM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &most));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(static_cast<std::size_t>(most));
    LOOM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), most,
                                                            &count, ranked.data()));
    found = first_deterministic(ranked, count, chosen);
  } else if (p == pass::backward_data) {
    LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &most));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(static_cast<std::size_t>(most));
    LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                                 most, &count, ranked.data()));
    found = first_deterministic(ranked, count, chosen);
  } else {
    LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &most));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(static_cast<std::size_t>(most));
    LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(),
                                                                   d.w.get(), most, &count, ranked.data()));
    found = first_deterministic(ranked, count, chosen);
  }
  if (!found)
    throw cudnn_not_supported(CUDNN_STATUS_NOT_SUPPORTED, "choosing the convolution's algorithm", __FILE__, __LINE__,
                              std::string("cuDNN ranks no deterministic algorithm for the ") + pass_name(p) +
                                  " of input [" + std::to_string(g.batch) + ", " + std::to_string(g.channels) +
                                  ", " + std::to_string(g.height) + ", " + std::to_string(g.width) + "], " +
                                  std::to_string(count) + " ranked");
  const std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, chosen);
  return chosen;
}

// A cuDNN handle of the stream's device, bound to the stream, taken from a
// pool of free handles for the call and given back after it. Handles are
// made on first need and live for the process, like CUDA's primary context.
class handle_lease {
 public:
  explicit handle_lease(stream_ref s) : device_(s.device()) {
    if (device_ < 0 || device_ >= max_devices)
      throw index_error("loom: device " + std::to_string(device_) + " is outside loom's device table");
    {
      const std::lock_guard<std::mutex> lock(pool_mutex());
      auto& free = pool()[static_cast<std::size_t>(device_)];
      if (!free.empty()) {
        handle_ = free.back();
        free.pop_back();
      }
    }
    if (!handle_) {
      int prev = 0;
      LOOM_CUDA_CHECK(cudaGetDevice(&prev));
      if (prev != device_) LOOM_CUDA_CHECK(cudaSetDevice(device_));
      const cudnnStatus_t st = cudnnCreate(&handle_);
      if (prev != device_) LOOM_CUDA_RELEASE(cudaSetDevice(prev));
      if (st != CUDNN_STATUS_SUCCESS) {
        handle_ = nullptr;
        raise(st, "cudnnCreate(&handle)", __FILE__, __LINE__);
      }
    }
    const cudnnStatus_t st = cudnnSetStream(handle_, s.get());
    if (st != CUDNN_STATUS_SUCCESS) {
      give_back();
      raise(st, "cudnnSetStream(handle, stream)", __FILE__, __LINE__);
    }
  }
  handle_lease(const handle_lease&) = delete;
  handle_lease& operator=(const handle_lease&) = delete;
  ~handle_lease() { give_back(); }
  [[nodiscard]] cudnnHandle_t get() const noexcept { return handle_; }

 private:
  static std::mutex& pool_mutex() {
    static std::mutex mu;
    return mu;
  }
  static std::array<std::vector<cudnnHandle_t>, max_devices>& pool() {
    static auto* const handles = new std::array<std::vector<cudnnHandle_t>, max_devices>;
    return *handles;
  }
  void give_back() noexcept {
    try {
      const std::lock_guard<std::mutex> lock(pool_mutex());
      pool()[static_cast<std::size_t>(device_)].push_back(handle_);
    } catch (...) {
      // A handle that cannot be kept is left to the process's end.
    }
  }
  cudnnHandle_t handle_ = nullptr;
  int device_ = 0;
};

// One pass on the current stream: descriptors for the geometry and the
// NCHW-ordered strides of x and y, the cached plan, a workspace from the
// stream-ordered pool (returned in stream order), then `run(handle, d, plan,
// workspace)`. One counted device launch.
template <class T, std::size_t R, class Run>
void run_pass(pass p, const geometry& g, const shape<R>& x_strides, const shape<R>& y_strides,
              cudnnTensorFormat_t filter_format, Run&& run) {
  gpu::require_device("a convolution on device tensors");
  const stream_ref s = current_stream();
  const handle_lease h(s);
  conv_descriptors d;
  describe<T>(d, g, x_strides, y_strides, filter_format);
  const plan chosen =
      choose(h.get(), p, d, key_of(s.device(), p, data_type<T>(), g, x_strides, y_strides, filter_format), g);
  LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), chosen.math));
  const scratch<device> workspace(chosen.workspace, s);
  run(h.get(), d, chosen, workspace.p);
  count_device_launch();
}

// y = conv(x, w), or relu(conv(x, w) + bias) in one cuDNN call
// (cudnnConvolutionBiasActivationForward) when `bias` (contiguous [Cout]) is
// given. x and y are NCHW-ordered views of any strides; w is contiguous in
// `filter_format`.
template <class T, std::size_t R>
void forward(const view<const T, R, device>& x, const T* w, cudnnTensorFormat_t filter_format, const T* bias,
             const geometry& g, const view<T, R, device>& y) {
  run_pass<T>(pass::forward, g, x.strides(), y.strides(), filter_format,
              [&](cudnnHandle_t h, const conv_descriptors& d, const plan& chosen, void* workspace) {
                const scale_t<T> one = 1, zero = 0;
                const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(chosen.algo);
                if (!bias) {
                  LOOM_CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x.get(), x.data(), d.w.get(), w,
                                                           d.conv.get(), algo, workspace, chosen.workspace, &zero,
                                                           d.y.get(), y.data()));
                  return;
                }
                tensor_descriptor b;
                shape<R> b_extents{}, b_strides{};
                for (std::size_t a = 0; a != R; ++a) b_extents[a] = 1, b_strides[a] = 1;
                b_extents[1] = g.out_channels;
                b_strides[0] = g.out_channels;
                describe_tensor<R>(b.get(), data_type<T>(), b_extents, b_strides, "bias");
                activation_descriptor act;
                LOOM_CUDNN_CHECK(cudnnSetActivationDescriptor(act.get(), CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
                // z = y with alpha2 = 0: no residual is added (cuDNN reads z only when alpha2 is not 0).
                LOOM_CUDNN_CHECK(cudnnConvolutionBiasActivationForward(
                    h, &one, d.x.get(), x.data(), d.w.get(), w, d.conv.get(), algo, workspace,
                    chosen.workspace, &zero, d.y.get(), y.data(), b.get(), bias, act.get(), d.y.get(), y.data()));
              });
}

// dx = the data gradient of conv from dy and w (dx and dy NCHW-ordered, any
// strides; w contiguous in `filter_format`).
template <class T, std::size_t R>
void backward_data(const view<const T, R, device>& dy, const T* w, cudnnTensorFormat_t filter_format,
                   const geometry& g, const view<T, R, device>& dx) {
  run_pass<T>(pass::backward_data, g, dx.strides(), dy.strides(), filter_format,
              [&](cudnnHandle_t h, const conv_descriptors& d, const plan& chosen, void* workspace) {
                const scale_t<T> one = 1, zero = 0;
                LOOM_CUDNN_CHECK(cudnnConvolutionBackwardData(
                    h, &one, d.w.get(), w, d.y.get(), dy.data(), d.conv.get(),
                    static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.algo), workspace, chosen.workspace, &zero,
                    d.x.get(), dx.data()));
              });
}

// dw (contiguous in `filter_format`) = the weight gradient of conv from dy and x.
template <class T, std::size_t R>
void backward_filter(const view<const T, R, device>& dy, const view<const T, R, device>& x, const geometry& g,
                     cudnnTensorFormat_t filter_format, T* dw) {
  run_pass<T>(pass::backward_filter, g, x.strides(), dy.strides(), filter_format,
              [&](cudnnHandle_t h, const conv_descriptors& d, const plan& chosen, void* workspace) {
                const scale_t<T> one = 1, zero = 0;
                LOOM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
                    h, &one, d.x.get(), x.data(), d.y.get(), dy.data(), d.conv.get(),
                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.algo), workspace, chosen.workspace, &zero,
                    d.w.get(), dw));
              });
}
}  // namespace loom::detail::cudnn
