// SPDX-License-Identifier: Apache-2.0
#pragma once

// The steps of a loom::model (model/model.hpp): each one assignment of the
// forward into a named tensor, and the backward its kind derives with the
// existing rules: a product's gradients by matmul_backward_into, a layer's by
// loom::grad, cross-entropy's by cross_entropy_backward.

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/grad/grad.hpp"
#include "loom/linalg/matmul.hpp"
#include "loom/linalg/matmul_backward.hpp"
#include "loom/nn/loss.hpp"
#include "loom/ops/activations.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! Whether a step's output stays in its tensor from the forward to the
//! backward (`keep`, the default) or is computed again in the backward, just
//! before the first backward step that reads it (`recompute`: activation
//! checkpointing; the tensor may be overwritten in between).
enum class step_policy { keep, recompute };

namespace detail::model {
//! Where a step's kernel puts the gradient of one operand.
enum class grad_mode : unsigned char {
  none,       //!< the operand needs no gradient
  write,      //!< the first contribution: written into the value's gradient
  accumulate  //!< a later contribution: added to the value's gradient
};

//! One operand of a step: the view it reads, where it comes from (a step's
//! output, a parameter, or neither), and where its gradient goes.
template <class T, std::size_t R, class S>
struct operand {
  using value_type = T;
  static constexpr std::size_t rank = R;
  using space = S;
  static constexpr bool floating = is_floating_v<T>;

  const char* name = "";
  view<const T, R, S> v;
  int producer = -1;  //!< the step that writes v, or -1
  int param = -1;     //!< the parameter v is, or -1
  grad_mode mode = grad_mode::none;
  view<T, R, S> grad;     //!< the value's gradient (mode write or accumulate)
  view<T, R, S> scratch;  //!< the step's result where it cannot write `grad` itself (in the model's arena)
  bool needs_scratch = false;

  //! Where the step's kernel writes this operand's gradient.
  view<T, R, S> target() { return mode == grad_mode::write ? grad : scratch; }
  //! After the step's kernel: a later contribution is added to the gradient.
  void finish() {
    if (mode == grad_mode::accumulate) grad += scratch;
  }
  //! The step's kernel needs a place for a result it does not keep, or for
  //! one it adds afterwards (the model places it in its arena).
  void make_scratch() { needs_scratch = mode != grad_mode::write; }
  std::string origin() const {
    if (producer >= 0) return " (the output of step " + std::to_string(producer) + ")";
    if (param >= 0) return " (parameter " + std::to_string(param) + ")";
    return "";
  }
  std::string describe() const { return "operand " + std::string(name) + " of shape " + shape_string(v.extents()) + origin(); }
};

template <class X>
auto operand_of(const char* name, const X& x) {
  const auto v = as_view(x);
  using V = decltype(v);
  operand<typename V::value_type, V::rank, typename V::space> o;
  o.name = name;
  o.v = view<const typename V::value_type, V::rank, typename V::space>(v);
  return o;
}

[[noreturn]] LOOM_NOINLINE inline void throw_step(std::size_t i, const char* kind, const std::string& what) {
  throw shape_error("loom: model step " + std::to_string(i) + " (" + kind + "): " + what);
}

template <class X>
using operand_t = decltype(operand_of("", std::declval<const X&>()));

//! out = act(matmul(a, b) + bias) [+ residual]: one GEMM with the bias, the
//! activation or the residual in its epilogue (gelu_tanh: the GEMM writes
//! z, one elementwise kernel the output). Backward: matmul_backward_into;
//! the residual's gradient is dy (one copy or add).
template <class A, class B, class Bias, bool HasBias, class Res = A, bool HasRes = false>
struct linear_desc {
  A a;
  B b;
  Bias bias;
  matmul_activation act;
  Res residual{};

  //! The same product with `r` (of the product's shape) added in the
  //! GEMM's epilogue: `loom::linear(h, w, b).plus(x)` is `h w + b + x`.
  //! Without an activation only (value_error when the model is made).
  template <tensor_like R>
  [[nodiscard]] auto plus(const R& r) const {
    static_assert(!HasRes, "loom: model: linear(...).plus(r) takes one residual");
    return linear_desc<A, B, Bias, HasBias, operand_t<R>, true>{a, b, bias, act, operand_of("residual", r)};
  }
};

template <class Out, class A, class B, class Bias, bool HasBias, class Res, bool HasRes>
struct linear_step {
  static constexpr const char* kind = "linear";
  using out_t = Out;
  Out out;
  A a;
  B b;
  Bias bias;  // unused without HasBias
  matmul_activation act;
  Res residual;  // unused without HasRes
  view<typename Out::value_type, Out::rank, typename Out::space> z;  // gelu_tanh's input (in the model's arena)

  template <class F>
  void for_each_operand(F&& f) {
    f(a), f(b);
    if constexpr (HasBias) f(bias);
    if constexpr (HasRes) f(residual);
  }
  //! Its backward reads its own output (relu's gradient at the output).
  bool reads_own_output() const { return act == matmul_activation::relu; }
  //! The buffers it keeps from its forward to its backward: gelu_tanh's input.
  template <class F>
  void for_each_buffer(F&& f) {
    if (act == matmul_activation::gelu_tanh) f(z, out.extents());
  }

  void check(std::size_t i) {
    static_assert(B::rank == 2 && A::rank >= 2,
                  "loom: model: linear(a, b, ...) takes a of rank 2 or more and a weight b of rank 2");
    constexpr std::size_t r = A::rank;
    if (a.v.extent(r - 1) != b.v.extent(0))
      throw_step(i, kind, a.describe() + " and " + b.describe() + ": a's last extent must equal b's first");
    if constexpr (HasBias)
      if (bias.v.extent(0) != b.v.extent(1))
        throw_step(i, kind, bias.describe() + " for " + b.describe() + ": the bias has one value per column of b");
    auto want = a.v.extents();
    want[r - 1] = b.v.extent(1);
    if (out.extents() != want)
      throw_step(i, kind, "its output of shape " + shape_string(out.extents()) + " for a product of shape " +
                              shape_string(want) + " (" + a.describe() + ", " + b.describe() + ")");
    if constexpr (HasRes) {
      if (residual.v.extents() != want)
        throw_step(i, kind, residual.describe() + " for a product of shape " + shape_string(want));
      if (act != matmul_activation::none)
        throw value_error("loom: model step " + std::to_string(i) +
                          " (linear): a residual is added to a product without an activation");
    }
  }

  void forward() {
    if constexpr (HasRes) {
      if constexpr (HasBias)
        out = matmul(a.v, b.v) + bias.v + residual.v;
      else
        out = matmul(a.v, b.v) + residual.v;
    } else if constexpr (HasBias) {
      if (act == matmul_activation::none)
        out = matmul(a.v, b.v) + bias.v;
      else if (act == matmul_activation::relu)
        out = relu(matmul(a.v, b.v) + bias.v);
      else
        z = matmul(a.v, b.v) + bias.v, out = gelu(z, approximate::tanh);
    } else {
      if (act == matmul_activation::none)
        out = matmul(a.v, b.v);
      else if (act == matmul_activation::relu)
        out = relu(matmul(a.v, b.v));
      else
        z = matmul(a.v, b.v), out = gelu(z, approximate::tanh);
    }
  }

  template <class DY>
  void backward(const DY& dy) {
    // Every gradient added to what earlier steps wrote: the GEMMs add in
    // their epilogue (C = D), no scratch.
    const bool adds = (a.mode != grad_mode::write) && (b.mode != grad_mode::write) &&
                      (!HasBias || bias.mode != grad_mode::write) &&
                      (a.mode == grad_mode::accumulate || b.mode == grad_mode::accumulate ||
                       (HasBias && bias.mode == grad_mode::accumulate));
    const auto pick = [&](auto& o) { return adds && o.mode == grad_mode::accumulate ? o.grad : o.target(); };
    const matmul_backward_options o{.activation = act, .accumulate = adds};
    const auto run = [&](auto&& da) {
      const auto db = pick(b);
      if constexpr (HasBias) {
        if (act == matmul_activation::none)
          matmul_backward_into(da, db, pick(bias), a.v, b.v, dy, o);
        else
          matmul_backward_into(da, db, pick(bias), a.v, b.v, dy, act == matmul_activation::relu ? out : z, o);
      } else {
        if (act == matmul_activation::none)
          matmul_backward_into(da, db, skip, a.v, b.v, dy, o);
        else
          matmul_backward_into(da, db, skip, a.v, b.v, dy, act == matmul_activation::relu ? out : z, o);
      }
    };
    if (a.mode == grad_mode::none)
      run(skip);
    else
      run(pick(a));
    if (!adds) {
      a.finish(), b.finish();
      if constexpr (HasBias) bias.finish();
    }
    if constexpr (HasRes) {
      if (residual.mode == grad_mode::write)
        assign(residual.grad, dy);
      else if (residual.mode == grad_mode::accumulate)
        residual.grad += dy;
    }
  }
  //! Scratch for what the step cannot write in place; a, whose gradient the
  //! GEMMs skip when it needs none, takes none.
  void make_scratch() {
    if (a.mode == grad_mode::accumulate) a.make_scratch();
    b.make_scratch();
    if constexpr (HasBias) bias.make_scratch();
  }
};

//! out = layer(in...): one fused kernel. Backward: loom::grad of the layer
//! for every floating operand, in its fewest kernels.
template <class F, class... In>
struct apply_desc {
  F f;
  std::tuple<In...> in;
};

template <class Out, class F, class... In>
struct layer_step {
  static constexpr const char* kind = "layer";
  template <class Fb>
  void for_each_buffer(Fb&&) {}
  using out_t = Out;
  Out out;
  F f;
  std::tuple<In...> in;

  template <class Fn>
  void for_each_operand(Fn&& fn) {
    std::apply([&](auto&... x) { (fn(x), ...); }, in);
  }
  bool reads_own_output() const { return false; }

  void check(std::size_t i) {
    auto e = std::apply([&](auto&... x) { return f(x.v...); }, in);
    std::remove_cvref_t<decltype(e.extents())> ext{};
    try {
      ext = e.extents();
    } catch (const shape_error& err) {
      std::string ops;
      for_each_operand([&](auto& x) { ops += (ops.empty() ? "" : ", ") + x.describe(); });
      throw_step(i, kind, "its operands (" + ops + ") do not broadcast together: " + err.what());
    }
    static_assert(std::tuple_size_v<decltype(ext)> == Out::rank,
                  "loom: model: a layer step's output must have the rank of the layer's value");
    if (out.extents() != ext)
      throw_step(i, kind, "its output of shape " + shape_string(out.extents()) + " for the layer's value of shape " +
                              shape_string(ext));
  }

  void forward() {
    std::apply([&](auto&... x) { out = f(x.v...); }, in);
  }

  template <class DY>
  void backward(const DY& dy) {
    backward_at(dy, floating_positions());
    for_each_operand([](auto& x) { x.finish(); });
  }
  void make_scratch() {
    for_each_operand([](auto& x) {
      if constexpr (std::remove_cvref_t<decltype(x)>::floating) x.make_scratch();
    });
  }

 private:
  static constexpr std::size_t n_floating = ((In::floating ? 1 : 0) + ... + 0);
  static constexpr auto floating_index = [] {
    std::array<std::size_t, n_floating + 1> p{};
    std::size_t k = 0, i = 0;
    ((In::floating ? (p[k++] = i++) : i++), ...);
    return p;
  }();
  template <std::size_t... K>
  static auto floating_positions_of(std::index_sequence<K...>) {
    return std::index_sequence<floating_index[K]...>{};
  }
  static auto floating_positions() { return floating_positions_of(std::make_index_sequence<n_floating>{}); }

  template <class DY, std::size_t... P>
  void backward_at(const DY& dy, std::index_sequence<P...>) {
    if constexpr (sizeof...(P) > 0) {
      auto g = std::apply([&](auto&... x) { return loom::grad<P...>(f)(x.v..., dy); }, in);
      if constexpr (sizeof...(P) == 1)
        ((std::get<P>(in).target() = g), ...);
      else
        g.into(std::get<P>(in).target()...);
    }
  }
};

//! out = cross_entropy(logits, labels): the loss, a 0-d tensor. Backward:
//! cross_entropy_backward for the seed the model gives (1 for a plain
//! loss), written or added into the logits' gradient.
template <class L, class T>
struct cross_entropy_desc {
  L logits;
  T labels;
  cross_entropy_options options;
};

template <class Out, class L, class T>
struct cross_entropy_step {
  static constexpr const char* kind = "cross_entropy";
  template <class Fb>
  void for_each_buffer(Fb&&) {}
  using out_t = Out;
  Out out;
  L logits;
  T labels;
  cross_entropy_options options;
  double seed = 1.0;

  template <class Fn>
  void for_each_operand(Fn&& fn) {
    fn(logits), fn(labels);
  }
  bool reads_own_output() const { return false; }

  void check(std::size_t i) {
    static_assert(Out::rank == 0, "loom: model: the output of a cross_entropy step is a 0-d tensor (the loss)");
    static_assert(L::rank == 2 && T::rank == 1,
                  "loom: model: cross_entropy_loss(logits, labels) takes logits [N, C] and labels [N]");
    if (labels.v.extent(0) != logits.v.extent(0))
      throw_step(i, kind, labels.describe() + " for " + logits.describe() + ": one label per row of the logits");
  }

  // The loss into the step's 0-d tensor as [1, 1] views: one more kernel
  // (cross_entropy returns a tensor of its own).
  void forward() {
    const auto l = cross_entropy(logits.v, labels.v, options);
    out.reshape(shape<2>{1, 1}) = l.view().reshape(shape<2>{1, 1});
  }

  template <class DY>
  void backward(const DY&) {
    const auto d = cross_entropy_backward(logits.v, labels.v, seed, options);
    if (logits.mode == grad_mode::write)
      logits.grad = d;
    else if (logits.mode == grad_mode::accumulate)
      logits.grad += d;
  }
  void make_scratch() {}
};

//! A step with its policy, as loom::model holds it.
template <class S>
struct planned_step {
  S s;
  step_policy policy;
};

//! `loom::step(out)`: the output of a step; assigning it a step's
//! description (`loom::linear`, `loom::apply`, `loom::cross_entropy_loss`)
//! makes the step.
template <class Out>
struct step_target {
  Out out;
  step_policy policy;
  template <class D>
  auto operator=(D d) const {
    return planned_step<decltype(make_step(*this, std::move(d)))>{make_step(*this, std::move(d)), policy};
  }
};
}  // namespace detail::model

//! A step of a loom::model: `loom::step(h) = loom::linear(x, w, b, matmul_activation::relu);`
//! names the tensor the step writes (kept as a view: it must outlive the
//! model) and its policy (step_policy::keep by default).
template <class X>
[[nodiscard]] auto step(X&& out, step_policy policy = step_policy::keep) {
  static_assert(!std::is_const_v<std::remove_reference_t<X>>, "loom: model: a step writes its output; pass a non-const tensor");
  using V = decltype(detail::as_view(out));
  return detail::model::step_target<V>{detail::as_view(out), policy};
}

//! A product step: `act(matmul(a, b) + bias)`, b a weight [K, N], bias [N].
//! One GEMM with its epilogue in the forward; matmul_backward_into's
//! kernels in the backward.
template <tensor_like A, tensor_like B, tensor_like Bias>
[[nodiscard]] auto linear(const A& a, const B& b, const Bias& bias, matmul_activation act = matmul_activation::none) {
  using namespace detail::model;
  return linear_desc<operand_t<A>, operand_t<B>, operand_t<Bias>, true>{operand_of("a", a), operand_of("b", b),
                                                                      operand_of("bias", bias), act};
}
//! A product step without a bias: `act(matmul(a, b))`.
template <tensor_like A, tensor_like B>
[[nodiscard]] auto linear(const A& a, const B& b, matmul_activation act = matmul_activation::none) {
  using namespace detail::model;
  return linear_desc<operand_t<A>, operand_t<B>, operand_t<B>, false>{operand_of("a", a), operand_of("b", b), {}, act};
}

//! A layer step: `layer(in...)` (a loom::layer, or any callable from
//! expressions to an expression without matmul), one fused kernel; its
//! backward is loom::grad's for every floating operand.
template <class F, tensor_like... In>
[[nodiscard]] auto apply(const F& f, const In&... in) {
  using namespace detail::model;
  static constexpr const char* names[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
  static_assert(sizeof...(In) <= 8, "loom: model: a layer step takes at most 8 tensor operands");
  std::size_t k = 0;
  return apply_desc<F, operand_t<In>...>{f, {operand_of(names[k++], in)...}};
}

//! A loss step: the mean (or, with options, summed) cross-entropy of logits
//! [N, C] and int64 labels [N], into a 0-d tensor; it is a model's last step.
template <tensor_like L, tensor_like T>
[[nodiscard]] auto cross_entropy_loss(const L& logits, const T& labels, const cross_entropy_options& o = {}) {
  using namespace detail::model;
  return cross_entropy_desc<operand_t<L>, operand_t<T>>{operand_of("logits", logits), operand_of("labels", labels), o};
}

namespace detail::model {
template <class Out, class A, class B, class Bias, bool HasBias, class Res, bool HasRes>
auto make_step(step_target<Out> t, linear_desc<A, B, Bias, HasBias, Res, HasRes> d) {
  return linear_step<Out, A, B, Bias, HasBias, Res, HasRes>{
      t.out, std::move(d.a), std::move(d.b), std::move(d.bias), d.act, std::move(d.residual), {}};
}
template <class Out, class F, class... In>
auto make_step(step_target<Out> t, apply_desc<F, In...> d) {
  return layer_step<Out, F, In...>{t.out, d.f, std::move(d.in)};
}
template <class Out, class L, class T>
auto make_step(step_target<Out> t, cross_entropy_desc<L, T> d) {
  return cross_entropy_step<Out, L, T>{t.out, std::move(d.logits), std::move(d.labels), d.options};
}

}  // namespace detail::model
}  // namespace loom
