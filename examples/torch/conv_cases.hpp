// SPDX-License-Identifier: Apache-2.0
#pragma once

// A seeded random sweep of loom's convolution, pooling and batch-norm
// functions on the host executor (float), written for
// examples/torch/check_conv.py, which recomputes every case with PyTorch in
// float64 and compares: conv2d (NCHW and NHWC), conv1d, conv3d and
// conv_transpose2d (stride, padding, dilation, groups including depthwise,
// output padding, a bias; forward and the input, weight and bias gradients), max_pool2d (values,
// indices, gradient), avg_pool2d, adaptive_avg_pool2d and
// batch_norm_training (output, running statistics, the three gradients).
//
// Files: DIR/conv_cases.json, one object per case: {"op": name, "options":
// {...}, "arrays": {name: [offset, [extents]], ...}}, the offsets counting
// float64 values in DIR/conv_cases.bin (native byte order). Inputs and
// loom's results are both arrays: inputs are float values, exact in float64.

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <loom/nn/batch_norm.hpp>
#include <loom/nn/conv.hpp>
#include <loom/nn/conv_transpose.hpp>
#include <loom/nn/pool.hpp>

namespace conv_cases {
using loom::host;
using loom::index_t;

class writer {
 public:
  void begin(const std::string& op, const std::string& options) {
    json_ += (count_++ ? ",\n" : "[\n");
    json_ += R"({"op": ")" + op + R"(", "options": {)" + options + R"(}, "arrays": {)";
    first_array_ = true;
  }
  template <class T, std::size_t R>
  void array(const char* name, const loom::view<T, R, host>& v) {
    json_ += std::string(first_array_ ? "" : ", ") + "\"" + name + "\": [" + std::to_string(values_.size()) + ", [";
    for (std::size_t d = 0; d < R; ++d) json_ += (d ? ", " : "") + std::to_string(v.extent(d));
    json_ += "]]";
    first_array_ = false;
    for (index_t i = 0; i < v.size(); ++i) values_.push_back(static_cast<double>(v.data()[v.offset_of(i)]));
  }
  template <class T, std::size_t R, class S>
  void array(const char* name, const loom::tensor<T, R, S>& t) {
    array(name, t.view());
  }
  // array(name, a) for each pair: arrays("x", x, "y", y, ...).
  void arrays() {}
  template <class A, class... Rest>
  void arrays(const char* name, const A& a, const Rest&... rest) {
    array(name, a);
    arrays(rest...);
  }
  void end() { json_ += "}}"; }

  int save(const std::string& dir) const {
    const auto open = [&](const std::string& name) {
      std::FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
      if (!f) throw loom::value_error("loom: conv_cases: cannot write " + dir + "/" + name);
      return f;
    };
    std::FILE* j = open("conv_cases.json");
    const std::string text = json_ + "\n]\n";
    const bool ok_json = std::fwrite(text.data(), 1, text.size(), j) == text.size();
    std::fclose(j);
    std::FILE* b = open("conv_cases.bin");
    const bool ok_bin = std::fwrite(values_.data(), sizeof(double), values_.size(), b) == values_.size();
    std::fclose(b);
    if (!ok_json || !ok_bin) throw loom::value_error("loom: conv_cases: writing into " + dir + " failed");
    return count_;
  }

 private:
  std::string json_;
  std::vector<double> values_;
  int count_ = 0;
  bool first_array_ = true;
};

template <std::size_t N>
std::string pair(const char* name, const std::array<index_t, N>& v) {
  std::string text = "\"" + std::string(name) + "\": [";
  for (std::size_t a = 0; a < N; ++a) text += (a ? ", " : "") + std::to_string(v[a]);
  return text + "]";
}
inline std::string number(const char* name, double v) {
  char text[64];
  std::snprintf(text, sizeof text, "\"%s\": %.17g", name, v);
  return text;
}

struct generator {
  std::mt19937_64 g{20260601};
  index_t pick(index_t lo, index_t hi) { return std::uniform_int_distribution<index_t>(lo, hi)(g); }
  template <std::size_t R>
  loom::host_tensor<float, R> random(const loom::shape<R>& s) {
    std::uniform_real_distribution<float> d(-1, 1);
    loom::host_tensor<float, R> t(s);
    for (index_t i = 0; i < t.size(); ++i) t.data()[i] = d(g);
    return t;
  }
  // Channels and groups: groups 1, 2 or 3 groups, or depthwise (with a multiplier).
  void channels(index_t& c, index_t& cout, index_t& groups) {
    const index_t mode = pick(0, 3);
    groups = mode == 0 ? 1 : mode == 1 ? pick(2, 3) : pick(1, 4);
    c = groups * (mode >= 2 ? 1 : pick(1, 3));
    cout = groups * (mode == 2 ? 1 : pick(1, 3));
  }
};

// The arrays of one convolution case, after writer::begin: random x, w, b
// (out_channels) and dy of the given shapes, and loom's y, dx, dw and db
// (run(x, w, b, dy) returns them as a tuple).
template <std::size_t R, class Run>
void conv_arrays(generator& r, writer& w, const loom::shape<R>& xs, const loom::shape<R>& ws,
                 const loom::shape<R>& ys, index_t out_channels, Run run) {
  const auto x = r.random(xs), wt = r.random(ws), dy = r.random(ys);
  const auto b = r.random(loom::shape<1>{out_channels});
  const auto [y, dx, dw, db] = run(x, wt, b, dy);
  w.arrays("x", x, "w", wt, "b", b, "dy", dy, "y", y, "dx", dx, "dw", dw, "db", db);
  w.end();
}

inline void conv2d_case(generator& r, writer& w) {
  for (;;) {
    index_t c, cout;
    loom::conv2d_options o;
    r.channels(c, cout, o.groups);
    const loom::shape<4> xs{r.pick(1, 3), c, r.pick(1, 9), r.pick(1, 9)}, ws{cout, c / o.groups, r.pick(1, 4),
                                                                            r.pick(1, 4)};
    for (int a = 0; a < 2; ++a) o.stride[a] = r.pick(1, 3), o.padding[a] = r.pick(0, 2), o.dilation[a] = r.pick(1, 3);
    loom::shape<4> ys;
    try {
      ys = loom::conv2d_output_shape(xs, ws, o);
    } catch (const loom::shape_error&) {
      continue;  // the dilated kernel does not fit: draw again
    }
    // One case in four channels last: x, y and their gradients [N, H, W, C].
    const bool nhwc = r.pick(0, 3) == 0;
    const auto layout = [nhwc](const loom::shape<4>& s) {
      return nhwc ? loom::shape<4>{s[0], s[2], s[3], s[1]} : s;
    };
    if (nhwc) o.layout = loom::conv_layout::nhwc;
    w.begin("conv2d", pair("stride", o.stride) + ", " + pair("padding", o.padding) + ", " +
                          pair("dilation", o.dilation) + ", " + number("groups", double(o.groups)) + ", " +
                          number("nhwc", nhwc));
    conv_arrays(r, w, layout(xs), ws, layout(ys), cout,
                [&](const auto& x, const auto& wt, const auto& b, const auto& dy) {
                  const auto dy_nchw = nhwc ? dy.view().permute({0, 3, 1, 2}) : dy.view();
                  return std::tuple{loom::conv2d(x, wt, b, o), loom::conv2d_backward_input(dy, wt, x.extents(), o),
                                    loom::conv2d_backward_weight(dy, x, ws, o), loom::conv2d_backward_bias(dy_nchw)};
                });
    return;
  }
}

inline void conv1d_case(generator& r, writer& w) {
  for (;;) {
    index_t c, cout;
    loom::conv1d_options o;
    r.channels(c, cout, o.groups);
    const loom::shape<3> xs{r.pick(1, 3), c, r.pick(1, 17)}, ws{cout, c / o.groups, r.pick(1, 5)};
    o.stride = r.pick(1, 3), o.padding = r.pick(0, 3), o.dilation = r.pick(1, 3);
    if ((ws[2] - 1) * o.dilation + 1 > xs[2] + 2 * o.padding) continue;
    const index_t ol = (xs[2] + 2 * o.padding - (ws[2] - 1) * o.dilation - 1) / o.stride + 1;
    w.begin("conv1d", number("stride", double(o.stride)) + ", " + number("padding", double(o.padding)) + ", " +
                          number("dilation", double(o.dilation)) + ", " + number("groups", double(o.groups)));
    conv_arrays(r, w, xs, ws, loom::shape<3>{xs[0], cout, ol}, cout,
                [&](const auto& x, const auto& wt, const auto& b, const auto& dy) {
                  return std::tuple{loom::conv1d(x, wt, b, o), loom::conv1d_backward_input(dy, wt, xs, o),
                                    loom::conv1d_backward_weight(dy, x, ws, o), loom::conv2d_backward_bias(dy)};
                });
    return;
  }
}

inline void conv3d_case(generator& r, writer& w) {
  for (;;) {
    index_t c, cout;
    loom::conv3d_options o;
    r.channels(c, cout, o.groups);
    const loom::shape<5> xs{r.pick(1, 2), c, r.pick(1, 6), r.pick(1, 6), r.pick(1, 6)},
        ws{cout, c / o.groups, r.pick(1, 3), r.pick(1, 3), r.pick(1, 3)};
    for (int a = 0; a < 3; ++a) o.stride[a] = r.pick(1, 3), o.padding[a] = r.pick(0, 2), o.dilation[a] = r.pick(1, 2);
    loom::shape<5> ys;
    try {
      ys = loom::conv3d_output_shape(xs, ws, o);
    } catch (const loom::shape_error&) {
      continue;  // the dilated kernel does not fit: draw again
    }
    w.begin("conv3d", pair("stride", o.stride) + ", " + pair("padding", o.padding) + ", " +
                          pair("dilation", o.dilation) + ", " + number("groups", double(o.groups)));
    conv_arrays(r, w, xs, ws, ys, cout, [&](const auto& x, const auto& wt, const auto& b, const auto& dy) {
      return std::tuple{loom::conv3d(x, wt, b, o), loom::conv3d_backward_input(dy, wt, xs, o),
                        loom::conv3d_backward_weight(dy, x, ws, o), loom::conv2d_backward_bias(dy)};
    });
    return;
  }
}

inline void conv_transpose2d_case(generator& r, writer& w) {
  for (;;) {
    index_t cin, cout;
    loom::conv_transpose2d_options o;
    r.channels(cin, cout, o.groups);
    const loom::shape<4> xs{r.pick(1, 3), cin, r.pick(1, 7), r.pick(1, 7)}, ws{cin, cout / o.groups, r.pick(1, 4),
                                                                              r.pick(1, 4)};
    for (int a = 0; a < 2; ++a) {
      o.stride[a] = r.pick(1, 3), o.padding[a] = r.pick(0, 2), o.dilation[a] = r.pick(1, 2);
      o.output_padding[a] = r.pick(0, o.stride[a] - 1);
    }
    loom::shape<4> ys;
    try {
      ys = loom::conv_transpose2d_output_shape(xs, ws, o);
    } catch (const loom::shape_error&) {
      continue;  // the padding leaves no output: draw again
    }
    w.begin("conv_transpose2d", pair("stride", o.stride) + ", " + pair("padding", o.padding) + ", " +
                                    pair("output_padding", o.output_padding) + ", " + pair("dilation", o.dilation) +
                                    ", " + number("groups", double(o.groups)));
    conv_arrays(r, w, xs, ws, ys, cout, [&](const auto& x, const auto& wt, const auto& b, const auto& dy) {
      return std::tuple{loom::conv_transpose2d(x, wt, b, o), loom::conv_transpose2d_backward_input(dy, wt, xs, o),
                        loom::conv_transpose2d_backward_weight(dy, x, ws, o), loom::conv2d_backward_bias(dy)};
    });
    return;
  }
}

// max_pool2d (max = true, with dilation) or avg_pool2d.
inline void pool_case(generator& r, writer& w, bool max) {
  for (;;) {
    const loom::shape<4> xs{r.pick(1, 2), r.pick(1, 3), r.pick(1, 9), r.pick(1, 9)};
    loom::pool2d_options o;
    for (int a = 0; a < 2; ++a) {
      o.kernel[a] = r.pick(1, 4), o.stride[a] = r.pick(1, 3), o.padding[a] = r.pick(0, o.kernel[a] / 2);
      o.dilation[a] = max ? r.pick(1, 2) : 1;
    }
    o.ceil_mode = r.pick(0, 1) == 1;
    o.count_include_pad = r.pick(0, 1) == 1;
    const auto x = r.random(xs);
    std::string options = pair("kernel", o.kernel) + ", " + pair("stride", o.stride) + ", " +
                          pair("padding", o.padding) + ", " + number("ceil_mode", o.ceil_mode);
    if (max) {
      loom::max_pool2d_result<float> p;
      try {
        p = loom::max_pool2d(x, o);
      } catch (const loom::shape_error&) {
        continue;  // no window fits: draw again
      }
      const auto dy = r.random(p.values.extents());
      w.begin("max_pool2d", options + ", " + pair("dilation", o.dilation));
      w.arrays("x", x, "dy", dy, "y", p.values, "indices", p.indices, "dx",
               loom::max_pool2d_backward(dy, p.indices, xs));
    } else {
      loom::host_tensor<float, 4> y;
      try {
        y = loom::avg_pool2d(x, o);
      } catch (const loom::shape_error&) {
        continue;
      }
      const auto dy = r.random(y.extents());
      w.begin("avg_pool2d", options + ", " + number("count_include_pad", o.count_include_pad));
      w.arrays("x", x, "dy", dy, "y", y, "dx", loom::avg_pool2d_backward(dy, xs, o));
    }
    w.end();
    return;
  }
}

inline void adaptive_case(generator& r, writer& w) {
  const loom::shape<4> xs{r.pick(1, 2), r.pick(1, 3), r.pick(1, 11), r.pick(1, 11)};
  const std::array<index_t, 2> out{r.pick(1, 7), r.pick(1, 7)};
  const auto x = r.random(xs), dy = r.random(loom::shape<4>{xs[0], xs[1], out[0], out[1]});
  w.begin("adaptive_avg_pool2d", pair("output_size", out));
  w.arrays("x", x, "dy", dy, "y", loom::adaptive_avg_pool2d(x, out), "dx",
           loom::adaptive_avg_pool2d_backward(dy, xs));
  w.end();
}

inline void batch_norm_case(generator& r, writer& w) {
  const loom::shape<4> xs{r.pick(1, 4), r.pick(1, 5), r.pick(1, 6), r.pick(1, 6)};
  if (xs[0] * xs[2] * xs[3] < 2) return batch_norm_case(r, w);  // the batch variance needs two values
  const loom::shape<1> cs{xs[1]};
  const auto x = r.random(xs), dy = r.random(xs);
  const auto gamma = r.random(cs), beta = r.random(cs);
  auto running_mean = r.random(cs), running_var = r.random(cs);
  loom::assign(running_var, running_var + 1.5);
  const loom::batch_norm_options o{.eps = r.pick(0, 1) ? 1e-5 : 1e-2, .momentum = r.pick(0, 1) ? 0.1 : 0.7};
  w.begin("batch_norm", number("eps", o.eps) + ", " + number("momentum", o.momentum));
  w.arrays("x", x, "w", gamma, "b", beta, "dy", dy, "running_mean", running_mean, "running_var", running_var);
  const auto res = loom::batch_norm_training(x, gamma, beta, running_mean, running_var, o);
  const auto g = loom::batch_norm_backward(dy, x, gamma, res.mean, res.invstd);
  w.arrays("y", res.y, "new_running_mean", running_mean, "new_running_var", running_var, "dx", g.dx, "dw",
           g.dweight, "db", g.dbias);
  w.end();
}

//! Writes the sweep into dir; returns the number of cases.
inline int write(const std::string& dir) {
  generator r;
  writer w;
  for (int i = 0; i < 200; ++i) conv2d_case(r, w);
  for (int i = 0; i < 100; ++i) conv1d_case(r, w);
  for (int i = 0; i < 120; ++i) conv_transpose2d_case(r, w);
  for (int i = 0; i < 70; ++i) pool_case(r, w, true);
  for (int i = 0; i < 70; ++i) pool_case(r, w, false);
  for (int i = 0; i < 30; ++i) adaptive_case(r, w);
  for (int i = 0; i < 40; ++i) batch_norm_case(r, w);
  for (int i = 0; i < 80; ++i) conv3d_case(r, w);
  return w.save(dir);
}
}  // namespace conv_cases
