// SPDX-License-Identifier: Apache-2.0
// The extension's Python module. The ops themselves are torch ops
// (torch.ops.loom.*, registered in rms_swiglu_ops.cpp); this module adds
// loom tensors that Python takes through DLPack (class LoomTensor, from
// dlpack_python.hpp) and what the tests inspect: what the last forward and
// backward saw (data pointers, kernels), and DLPack round trips between loom
// and torch, fp8 included; loom::optim's steps and loom::model's gradients
// and a transformer block's training for the comparisons with torch.optim and
// torch.autograd.
#include <torch/extension.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <loom/model/model.hpp>
#include <loom/optim/optim.hpp>

#include "dlpack_python.hpp"
#include "rms_swiglu.hpp"

namespace {
namespace py = pybind11;

// What keeps the memory of the last export_tensor alive: its use count is the
// number of holders (the LoomTensor and every managed tensor lent from it
// whose deleter has not run).
std::weak_ptr<const void> last_export;

std::optional<loom::dlpack_tensor<float, 2, loom::host>> held;

// A shared loom tensor as a LoomTensor (its transpose when `transposed`),
// remembered as the last export.
template <class Tensor>
loom_python::dlpack_object lend_shared(const std::shared_ptr<Tensor>& t, bool transposed) {
  last_export = t;
  return transposed ? loom_python::dlpack_object(t->t(), t) : loom_python::dlpack_object(t);
}

// A new rows x cols float32 loom tensor, element (i, j) = 1000 i + j (its
// transpose when `transposed`), in host memory or, `on_device`, in the
// current device's memory, as a LoomTensor.
loom_python::dlpack_object export_tensor(std::int64_t rows, std::int64_t cols, bool transposed, bool on_device) {
  auto t = std::make_shared<loom::host_tensor<float, 2>>(loom::shape<2>{rows, cols});
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) (*t)(i, j) = static_cast<float>(1000 * i + j);
  if (on_device) return lend_shared(std::make_shared<loom::device_tensor<float, 2>>(loom::to_device(*t)), transposed);
  return lend_shared(t, transposed);
}

// Takes a float32 rank-2 CPU tensor from a DLPack capsule (versioned or
// legacy), doubles it in place through loom's assignment and holds it until
// release_import(). Returns the data pointer, shape and strides loom sees.
// loom's refusals raise RuntimeError with loom's message (the tensor's
// deleter has run by then).
py::dict import_tensor(const py::capsule& capsule) {
  held = loom_python::from_capsule<float, 2, loom::host>(capsule);
  auto v = held->view();
  v = v * 2.0f;
  py::dict d;
  d["data"] = reinterpret_cast<std::int64_t>(held->data());
  d["shape"] = py::make_tuple(v.extents()[0], v.extents()[1]);
  d["strides"] = py::make_tuple(v.strides()[0], v.strides()[1]);
  return d;
}

// An fp8 vector through loom both ways: the capsule's tensor imported as `F`,
// decoded by a loom assignment into float32, and lent onward unchanged.
// Returns (the same memory as a LoomTensor, the decoded values).
template <class F>
py::tuple fp8_through_loom(const py::capsule& capsule) {
  auto x = loom_python::from_capsule<const F, 1, loom::host>(capsule);
  loom::host_tensor<float, 1> decoded(x.extents());
  decoded = x.view();
  return py::make_tuple(loom_python::dlpack_object(x.view(), std::make_shared<decltype(x)>(x)),
                        loom_python::dlpack_object(std::move(decoded)));
}

// float32 values rounded to the fp8 type `F` by a loom assignment (a new loom
// tensor, as a LoomTensor).
template <class F>
loom_python::dlpack_object fp8_from_float(const py::capsule& capsule) {
  const auto x = loom_python::from_capsule<const float, 1, loom::host>(capsule);
  loom::host_tensor<F, 1> rounded(x.extents());
  rounded = x.view();
  return loom_python::dlpack_object(std::move(rounded));
}

py::tuple fp8_round_trip(const py::capsule& capsule, const std::string& format) {
  if (format == "e4m3") return fp8_through_loom<loom::e4m3>(capsule);
  if (format == "e5m2") return fp8_through_loom<loom::e5m2>(capsule);
  if (format == "e8m0") return fp8_through_loom<loom::e8m0>(capsule);
  throw py::value_error("format is e4m3, e5m2 or e8m0, not " + format);
}

loom_python::dlpack_object fp8_rounded(const py::capsule& capsule, const std::string& format) {
  if (format == "e4m3") return fp8_from_float<loom::e4m3>(capsule);
  if (format == "e5m2") return fp8_from_float<loom::e5m2>(capsule);
  if (format == "e8m0") return fp8_from_float<loom::e8m0>(capsule);
  throw py::value_error("format is e4m3, e5m2 or e8m0, not " + format);
}
// Runs len(g) steps of loom's optimizer `name` ("sgd", "adamw", "lion") on
// the float64 vector `w` (a DLPack capsule; updated in place) with the
// gradients of step t in row t of `g` [steps, n]. `o` holds the options
// struct's fields by name (lr, momentum, ...; absent ones keep loom's
// defaults) and max_grad_norm. Returns the launches of the last step.
template <class Opt, class Options>
std::uint64_t run_optimizer(const py::capsule& w, const py::capsule& g, Options o, const py::dict& d) {
  auto wt = loom_python::from_capsule<double, 1, loom::host>(w);
  const auto gt = loom_python::from_capsule<const double, 2, loom::host>(g);
  loom::host_tensor<double, 1> grad(wt.view().extents());
  loom::optim::update_options u;
  if (d.contains("max_grad_norm")) u.max_grad_norm = d["max_grad_norm"].cast<double>();
  Opt opt(o, u);
  opt.add(wt.view(), grad);
  for (loom::index_t t = 0; t < gt.view().extent(0); ++t) {
    grad = gt.view().slice(t);
    opt.step();
  }
  return opt.last_step().kernels;
}

std::uint64_t optimizer_steps(const std::string& name, const py::capsule& w, const py::capsule& g, const py::dict& d) {
  const auto get = [&d](const char* key, double fallback) { return d.contains(key) ? d[key].cast<double>() : fallback; };
  if (name == "sgd") {
    loom::optim::sgd_options o;
    o = {get("lr", o.lr), get("momentum", o.momentum), get("dampening", o.dampening),
         get("weight_decay", o.weight_decay), d.contains("nesterov") && d["nesterov"].cast<bool>()};
    return run_optimizer<loom::optim::sgd<loom::host>>(w, g, o, d);
  }
  if (name == "adamw") {
    loom::optim::adamw_options o;
    o = {get("lr", o.lr), get("beta1", o.beta1), get("beta2", o.beta2), get("eps", o.eps),
         get("weight_decay", o.weight_decay)};
    return run_optimizer<loom::optim::adamw<loom::host>>(w, g, o, d);
  }
  if (name == "lion") {
    loom::optim::lion_options o;
    o = {get("lr", o.lr), get("beta1", o.beta1), get("beta2", o.beta2), get("weight_decay", o.weight_decay)};
    return run_optimizer<loom::optim::lion<loom::host>>(w, g, o, d);
  }
  throw py::value_error("optimizer is sgd, adamw or lion, not " + name);
}

// A float64 loom::model on the CPU tensors `t` (DLPack capsules, read in
// place), its gradients written into the capsules `g`, one per parameter:
// for "mlp", t = (x, labels, w1, b1, w2, b2), h = relu(x w1 + b1), logits =
// h w2 + b2, the mean cross-entropy (returned). The residual block with
// layer norm is checked against finite differences in
// tests/optim/test_model.cpp, where it costs CI less compile time.
double model_gradients(const std::string& name, const py::list& t, const py::list& g) {
  using mat = loom::dlpack_tensor<double, 2, loom::host>;
  using vec = loom::dlpack_tensor<double, 1, loom::host>;
  const auto m = [&](std::size_t i) { return loom_python::from_capsule<double, 2, loom::host>(t[i].cast<py::capsule>()); };
  const auto v = [&](std::size_t i) { return loom_python::from_capsule<double, 1, loom::host>(t[i].cast<py::capsule>()); };
  const auto out = [&](std::size_t i, const auto& grad) {
    constexpr std::size_t rank = std::remove_cvref_t<decltype(grad)>::rank;
    auto dst = loom_python::from_capsule<double, rank, loom::host>(g[i].cast<py::capsule>());
    loom::assign(dst.view(), grad);
  };
  if (name == "mlp") {
    const mat x = m(0);
    const auto labels = loom_python::from_capsule<const std::int64_t, 1, loom::host>(t[1].cast<py::capsule>());
    mat w1 = m(2), w2 = m(4);
    vec b1 = v(3), b2 = v(5);
    auto pw1 = w1.view(), pw2 = w2.view();
    auto pb1 = b1.view(), pb2 = b2.view();
    loom::host_tensor<double, 2> h({x.view().extent(0), pw1.extent(1)}), logits({x.view().extent(0), pw2.extent(1)});
    loom::host_tensor<double, 0> loss(loom::shape<0>{});
    loom::model net(loom::parameters(pw1, pb1, pw2, pb2),
                    loom::step(h) = loom::linear(x.view(), pw1, pb1, loom::matmul_activation::relu),
                    loom::step(logits) = loom::linear(h, pw2, pb2),
                    loom::step(loss) = loom::cross_entropy_loss(logits, labels.view()));
    net.forward();
    net.backward();
    out(0, net.grad(pw1)), out(1, net.grad(pb1)), out(2, net.grad(pw2)), out(3, net.grad(pb2));
    return loss.item();
  }
  throw py::value_error("model is mlp, not " + name);
}

// Layer norm as a layer written out (loom::grad of loom::layer_norm, with its
// refined mean, costs about 21 s more of g++ -O1 here).
constexpr auto layer_norm = loom::layer([](auto x, auto w, auto b) {
  auto c = x - row_mean(x);
  return c * rsqrt(row_mean(c * c) + 1e-5) * w + b;
});
constexpr auto causal_attention = loom::attention(loom::causal);

// A float64 transformer (GPT-2) block as a loom::model on the CPU tensors `t`
// (DLPack capsules): t = (x [B T, C], ln1 weight and bias, wqkv [3C, C],
// bqkv, wp [C, C], bp, ln2 weight and bias, wfc [4C, C], bfc, wfp [C, 4C],
// bfp, dy [B T, C]), torch's weight layout read through transposed views.
// ln1 = layer_norm(x); qkv = ln1 wqkv^T + bqkv; causal attention over the
// heads of qkv; mid = atty wp^T + bp + x; ln2 = layer_norm(mid); fc =
// gelu_tanh(ln2 wfc^T + bfc); y = fc wfp^T + bfp + mid. Writes into `out`
// the first forward's y, then the gradients of x and of the 12 parameters
// for dy; then trains the parameters (in place) with loom::optim::adamw (lr,
// eps, weight_decay; betas its defaults) for `steps` steps of forward,
// backward(dy) and update. Returns the kernels of the first backward.
std::uint64_t block_training(const py::list& t, const py::list& out, std::int64_t batch, std::int64_t heads,
                             int steps, double lr, double weight_decay, double eps) {
  using loom::index_t, loom::shape, loom::whole;
  std::vector<loom::dlpack_tensor<double, 2, loom::host>> m;
  std::vector<loom::dlpack_tensor<double, 1, loom::host>> v;
  for (const std::size_t i : {0, 3, 5, 9, 11, 13})
    m.push_back(loom_python::from_capsule<double, 2, loom::host>(t[i].cast<py::capsule>()));
  for (const std::size_t i : {1, 2, 4, 6, 7, 8, 10, 12})
    v.push_back(loom_python::from_capsule<double, 1, loom::host>(t[i].cast<py::capsule>()));
  auto x = m[0].view(), wqkv = m[1].view(), wp = m[2].view(), wfc = m[3].view(), wfp = m[4].view();
  auto g1 = v[0].view(), be1 = v[1].view(), bqkv = v[2].view(), bp = v[3].view(), g2 = v[4].view(),
       be2 = v[5].view(), bfc = v[6].view(), bfp = v[7].view();
  const index_t n = x.extent(0), c = x.extent(1), f = wfc.extent(0), seq = n / batch, hs = c / heads;
  loom::host_tensor<double, 2> ln1({n, c}), qkv({n, 3 * c}), atty({n, c}), mid({n, c}), ln2({n, c}), fc({n, f}),
      y({n, c});
  const auto h = qkv.view().reshape(shape<5>{batch, seq, 3, heads, hs});
  const auto head = [&](index_t i) { return h.slice(whole, whole, i).transpose(1, 2); };  // [B, NH, T, hs]
  loom::model net(loom::parameters(g1, be1, wqkv, bqkv, wp, bp, g2, be2, wfc, bfc, wfp, bfp), loom::inputs(x),
                  loom::step(ln1) = loom::apply(layer_norm, x, g1, be1),
                  loom::step(qkv) = loom::linear(ln1, wqkv.t(), bqkv),
                  loom::step(atty.view().reshape(shape<4>{batch, seq, heads, hs}).transpose(1, 2)) =
                      loom::attend(causal_attention, head(0), head(1), head(2)),
                  loom::step(mid) = loom::linear(atty, wp.t(), bp).plus(x),
                  loom::step(ln2) = loom::apply(layer_norm, mid, g2, be2),
                  loom::step(fc) = loom::linear(ln2, wfc.t(), bfc, loom::matmul_activation::gelu_tanh),
                  loom::step(y) = loom::linear(fc, wfp.t(), bfp).plus(mid));
  const auto dy = m[5].view();
  loom::optim::adamw<loom::host> opt({.lr = lr, .eps = eps, .weight_decay = weight_decay});
  net.add_parameters_to(opt);
  std::uint64_t kernels = 0;
  for (int s = 0; s < steps; ++s) {
    net.forward();
    net.backward(dy);
    if (s == 0) {
      kernels = net.last_backward().kernels;
      std::size_t k = 0;
      const auto put = [&](const auto& value) {
        constexpr std::size_t rank = std::remove_cvref_t<decltype(value)>::rank;
        auto dst = loom_python::from_capsule<double, rank, loom::host>(out[k++].cast<py::capsule>());
        loom::assign(dst.view(), value);
      };
      put(y.view()), put(net.grad(x));
      put(net.grad(g1)), put(net.grad(be1)), put(net.grad(wqkv)), put(net.grad(bqkv)), put(net.grad(wp));
      put(net.grad(bp)), put(net.grad(g2)), put(net.grad(be2)), put(net.grad(wfc)), put(net.grad(bfc));
      put(net.grad(wfp)), put(net.grad(bfp));
    }
    opt.step();
  }
  return kernels;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "loom's RMSNorm + SwiGLU as torch ops (torch.ops.loom.*), loom tensors through DLPack, and test helpers";
  loom_python::bind_dlpack_object(m, "LoomTensor");
  m.def("last_views", &loom_torch::recorded_views, py::arg("op"),
        "data pointers of the loom views the last 'forward' (x, weight, gate, y) or 'backward' (x, weight, gate, "
        "dy, dx, dweight, dgate) ran on");
  m.def("launches", [] {
    const auto n = loom::launches();
    return n.host + n.device;
  }, "kernels loom has launched so far, on both executors");
  m.def("export_tensor", &export_tensor, py::arg("rows"), py::arg("cols"), py::arg("transposed") = false,
        py::arg("on_device") = false,
        "a rows x cols float32 loom tensor, element (i, j) = 1000 i + j, as a LoomTensor");
  m.def("export_holders", [] { return last_export.use_count(); },
        "holders of the last export_tensor's memory: the LoomTensor and each lent managed tensor not yet deleted");
  m.def("import_tensor", &import_tensor);
  m.def("release_import", [] { held.reset(); });
  m.def("fp8_round_trip", &fp8_round_trip, py::arg("capsule"), py::arg("format"));
  m.def("fp8_rounded", &fp8_rounded, py::arg("capsule"), py::arg("format"));
  m.def("optimizer_steps", &optimizer_steps, py::arg("name"), py::arg("w"), py::arg("g"), py::arg("options"),
        "len(g) steps of loom::optim's optimizer `name` on the float64 vector w (in place), gradients by row of g");
  m.def("model_gradients", &model_gradients, py::arg("name"), py::arg("tensors"), py::arg("gradients"),
        "the parameters' gradients of a float64 loom::model ('mlp') into `gradients`; its loss");
  m.def("block_training", &block_training, py::arg("tensors"), py::arg("out"), py::arg("batch"), py::arg("heads"),
        py::arg("steps"), py::arg("lr"), py::arg("weight_decay"), py::arg("eps"),
        "a float64 transformer block as a loom::model: its output and gradients into `out`, then `steps` AdamW "
        "steps on its parameters (in place); the kernels of the first backward");
}
