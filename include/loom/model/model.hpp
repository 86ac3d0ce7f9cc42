// SPDX-License-Identifier: Apache-2.0
#pragma once

// loom::model: a forward of several steps, each an assignment into a named
// tensor, and the backward of all parameters derived from it in reverse
// order (docs/13_models.md). Which value flows from which step is found
// once, when the model is made, by the identity of the tensors (the same
// memory, type and layout, or a view into a dense value); a gradient of a
// value used by several steps is written by the first of them in the
// backward and added to by the others. The gradients, scratch tensors and
// kept step buffers live in one arena, planned from their lifetimes.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/model/nn_steps.hpp"
#include "loom/model/plan.hpp"
#include "loom/model/steps.hpp"

namespace loom {
namespace detail::model {
template <class S>
inline constexpr bool is_loss_step = false;
template <class Out, class L, class T>
inline constexpr bool is_loss_step<cross_entropy_step<Out, L, T>> = true;

template <class... P>
struct parameter_list {
  std::tuple<P...> p;
};
template <class... I>
struct input_list {
  std::tuple<I...> i;
};
}  // namespace detail::model

//! The parameters of a loom::model, in order (tensors or views; kept as
//! views, so they must outlive the model): `loom::parameters(w1, b1, w2, b2)`.
template <class... P>
[[nodiscard]] auto parameters(P&&... p) {
  static_assert((!std::is_const_v<std::remove_reference_t<P>> && ...),
                "loom: model: parameters are updated by an optimizer; pass non-const tensors");
  return detail::model::parameter_list<decltype(detail::as_view(p))...>{{detail::as_view(p)...}};
}

//! Inputs of a loom::model whose gradients it computes too (`grad(x)`),
//! after the parameters: `loom::model net(loom::parameters(w), loom::inputs(x), ...)`.
//! An optimizer gets only the parameters (add_parameters_to).
template <class... I>
[[nodiscard]] auto inputs(const I&... x) {
  using namespace detail::model;
  static_assert((is_floating_v<typename decltype(detail::as_view(x))::value_type> && ...),
                "loom: model: inputs(...) with a gradient must be floating tensors");
  return input_list<decltype(detail::as_view(x))...>{{detail::as_view(x)...}};
}

//! What the last backward ran.
struct backward_info {
  int steps = 0;       //!< steps whose backward ran
  int recomputed = 0;  //!< forwards of step_policy::recompute steps run again
  int zeroed = 0;      //!< parameters and inputs no step reaches, their gradients set to 0
  int cleared = 0;     //!< values read in part by a step (a slice, a head of qkv): gradients set to 0 first
  std::uint64_t kernels = 0;  //!< launches of both executors (loom::launches())
};

//! A model: parameters, optionally inputs with a gradient, and steps.
//! `forward()` runs the steps in order; `backward()` derives every
//! parameter's (and input's) gradient (into memory the model owns,
//! `grad(p)`) in reverse order. Every check (shapes within and between
//! steps, operands that overlap a value without being a view into it) is
//! made when the model is made, naming the step and the operand.
//! Example:
//!   loom::model net(loom::parameters(w1, b1, w2, b2),
//!                   loom::step(h) = loom::linear(x, w1, b1, loom::matmul_activation::relu),
//!                   loom::step(logits) = loom::linear(h, w2, b2),
//!                   loom::step(loss) = loom::cross_entropy_loss(logits, labels));
//!   net.forward(); net.backward();  // net.grad(w1) ...
template <class Params, class Inputs, class... Steps>
class model;

template <class... P, class... I, class... S>
class model<detail::model::parameter_list<P...>, detail::model::input_list<I...>, detail::model::planned_step<S>...> {
  static_assert(sizeof...(S) > 0, "loom: model: give at least one step");
  static constexpr std::size_t n_steps = sizeof...(S);
  using last_t = std::tuple_element_t<n_steps - 1, std::tuple<S...>>;
  using space = typename last_t::out_t::space;

 public:
  model(detail::model::parameter_list<P...> params, detail::model::input_list<I...> in,
        detail::model::planned_step<S>... steps)
      : params_(std::move(params.p)), inputs_(std::move(in.i)), steps_(std::move(steps.s)...), policy_{steps.policy...} {
    plan();
  }
  model(detail::model::parameter_list<P...> params, detail::model::planned_step<S>... steps)
    requires(sizeof...(I) == 0)
      : params_(std::move(params.p)), steps_(std::move(steps.s)...), policy_{steps.policy...} {
    plan();
  }
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  //! Runs every step's forward in order: one assignment each (a linear
  //! step with gelu_tanh two; an attention step its kernels and a copy).
  void forward() {
    for_each_step([](auto& s, std::size_t) { s.forward(); });
  }

  //! The backward of a model whose last step is a loss: every parameter's
  //! gradient of `seed` times the loss.
  void backward(double seed = 1.0) {
    static_assert(is_loss, "loom: model: backward() without a gradient needs a loss (cross_entropy_loss) as the last "
                           "step; otherwise pass the gradient of the last step's output: backward(dy)");
    std::get<n_steps - 1>(steps_).seed = seed;
    run_backward(std::get<n_steps - 1>(steps_).out);
  }

  //! The backward for the gradient `dy` of the last step's output (its shape).
  template <tensor_like DY>
  void backward(const DY& dy) {
    static_assert(!is_loss, "loom: model: the last step is a loss; call backward() (or backward(seed))");
    const auto v = detail::as_view(dy);
    static_assert(std::is_same_v<typename decltype(v)::value_type, typename last_t::out_t::value_type> &&
                      decltype(v)::rank == last_t::out_t::rank,
                  "loom: model: backward(dy): dy has the type and rank of the last step's output");
    if (v.extents() != std::get<n_steps - 1>(steps_).out.extents())
      throw shape_error("loom: model: backward(dy): dy of shape " + shape_string(v.extents()) +
                        " for the last step's output of shape " +
                        shape_string(std::get<n_steps - 1>(steps_).out.extents()));
    run_backward(v);
  }

  //! The gradient of parameter or input `p` (the same tensor or view given
  //! to loom::parameters or loom::inputs), a view of memory the model owns
  //! with p's shape and strides; value_error for another tensor.
  template <tensor_like X>
  auto grad(const X& p) const {
    const auto v = detail::as_view(p);
    using V = decltype(v);
    const auto k = detail::model::key_of(v);
    for (const auto& val : values_)
      if (val.param >= 0 && val.key.same(k))
        return detail::model::grad_view(val, view<const typename V::value_type, V::rank, typename V::space>(v));
    throw value_error("loom: model: grad(p): p of shape " + shape_string(v.extents()) +
                      " is not one of the model's parameters or inputs");
  }

  //! Registers every parameter with its gradient in an optimizer
  //! (`opt.add(p, grad(p))`, in the parameters' order; not the inputs).
  template <class Opt>
  void add_parameters_to(Opt& opt) {
    std::apply([&](auto&... p) { (opt.add(p, grad(p)), ...); }, params_);
  }

  //! What the last backward ran.
  const backward_info& last_backward() const { return info_; }

  //! The most bytes of the model's own memory live at one time: gradients
  //! (a parameter's or an input's from the start; an intermediate value's
  //! from its first contribution to its producer's backward), scratch
  //! tensors (during their step's backward) and kept step buffers (gelu's
  //! input, from the forward to the backward), each rounded up to 256
  //! bytes. Known when the model is made; the steps' outputs (the user's
  //! tensors) and the temporaries of the rules underneath are not in it.
  std::size_t peak_bytes() const { return peak_bytes_; }
  //! The bytes of the one arena that holds those buffers, allocated when
  //! the model is made: buffers live at disjoint times share memory, so it
  //! is peak_bytes() or a little more.
  std::size_t arena_bytes() const { return arena_bytes_; }

 private:
  static constexpr bool is_loss = detail::model::is_loss_step<last_t>;

  template <class F>
  void for_each_step(F&& f) {
    [&]<std::size_t... J>(std::index_sequence<J...>) { (f(std::get<J>(steps_), J), ...); }(std::index_sequence_for<S...>{});
  }
  template <class F>
  void for_each_step_reversed(F&& f) {
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (f(std::get<n_steps - 1 - J>(steps_), n_steps - 1 - J), ...);
    }(std::index_sequence_for<S...>{});
  }
  template <class F>
  void at_step(std::size_t j, F&& f) {
    for_each_step([&](auto& s, std::size_t i) {
      if (i == j) f(s);
    });
  }

  template <class V>
  static auto as_const(const V& v) {
    return view<const typename V::value_type, V::rank, typename V::space>(v);
  }

  static std::string who(const detail::model::value_info& v, std::size_t n_params) {
    if (v.producer >= 0) return "the output of step " + std::to_string(v.producer);
    if (static_cast<std::size_t>(v.param) < n_params) return "parameter " + std::to_string(v.param);
    return "input " + std::to_string(static_cast<std::size_t>(v.param) - n_params);
  }

  // Finds each operand's value, checks every step, marks what needs a
  // gradient, then plans the backward: which steps run, which write and which
  // add to each gradient, what is zeroed.
  void plan() {
    using namespace detail::model;
    const auto leaf = [&](auto& p) {
      value_info val;
      val.key = key_of(p), val.param = static_cast<int>(values_.size()), val.needs_grad = true;
      size_grad(val, as_const(p));
      values_.push_back(std::move(val));
    };
    std::apply([&](auto&... p) { (leaf(p), ...); }, params_);
    n_params_ = values_.size();
    std::apply([&](auto&... x) { (leaf(x), ...); }, inputs_);
    const std::size_t n_leaves = values_.size();
    for (std::size_t i = 0; i != n_leaves; ++i)
      for (std::size_t j = 0; j != i; ++j)
        if (values_[i].key.overlaps(values_[j].key))
          throw aliasing_error("loom: model: " + who(values_[j], n_params_) + " and " + who(values_[i], n_params_) +
                               " overlap");
    for_each_step([&](auto& s, std::size_t i) {
      bool needs = false;
      s.for_each_operand([&](auto& o) {
        const auto k = key_of(o.v);
        for (auto& val : values_) {
          if (!val.key.overlaps(k) && !val.key.same(k)) continue;
          // The value itself, or a view into a dense value of its type (a
          // transpose, a slice, a head of qkv): its gradient is the same view
          // of the value's gradient.
          const bool inside = val.key.dense && val.key.type == k.type && val.key.contains(k);
          if (!val.key.same(k) && !inside)
            throw aliasing_error("loom: model step " + std::to_string(i) + " (" + s.kind + "): operand " + o.name +
                                 " of shape " + shape_string(o.v.extents()) + " overlaps " + who(val, n_params_) +
                                 " without being it or a view into it; pass that tensor or a view of it");
          o.producer = val.producer, o.param = val.param;
          if constexpr (std::remove_cvref_t<decltype(o)>::floating) {
            needs = needs || val.needs_grad;
            if (!val.key.same(k) && !(k.dense && k.lo == val.key.lo && k.hi == val.key.hi)) val.partial = true;
          }
          break;
        }
      });
      s.check(i);
      const auto k = key_of(s.out);
      for (const auto& val : values_)
        if (val.key.overlaps(k))
          throw aliasing_error("loom: model step " + std::to_string(i) + " (" + s.kind + "): its output of shape " +
                               shape_string(s.out.extents()) + " overlaps " + who(val, n_params_) +
                               "; give each step its own output");
      for (const auto& c : constants_)
        if (c.key.overlaps(k))
          throw aliasing_error("loom: model step " + std::to_string(i) + " (" + s.kind + "): its output overlaps " +
                               c.what + ", which reads it before it is written; give the steps in the forward's order");
      s.for_each_operand([&](auto& o) {
        if (o.producer < 0 && o.param < 0)
          constants_.push_back({key_of(o.v), "operand " + std::string(o.name) + " of step " + std::to_string(i)});
      });
      s.for_each_operand([&](auto& o) {
        if (key_of(o.v).overlaps(k))
          throw aliasing_error("loom: model step " + std::to_string(i) + " (" + s.kind + "): its output overlaps its " + o.describe());
      });
      value_info out;
      out.key = k, out.producer = static_cast<int>(i), out.needs_grad = needs;
      values_.push_back(std::move(out));
      step_value_[i] = values_.size() - 1;
    });
    // Backward plan, last step first: a step runs when its output has a
    // gradient (the last step's is given); the first contribution to a
    // gradient writes it, later ones add to it; a value read in part has its
    // gradient zeroed just before its first contribution, and every
    // contribution adds.
    for_each_step_reversed([&](auto& s, std::size_t i) {
      auto& outv = values_[step_value_[i]];
      active_[i] = outv.needs_grad && (i == n_steps - 1 || outv.written);
      if (!active_[i]) return;
      s.for_each_operand([&](auto& o) {
        if constexpr (std::remove_cvref_t<decltype(o)>::floating) {
          auto* val = find(o);
          if (val == nullptr || !val->needs_grad) return;
          if (!val->zero) size_grad(*val, o.v);
          o.mode = val->written || val->partial ? grad_mode::accumulate : grad_mode::write;
          if (!val->written) val->first_contribution = static_cast<int>(i);
          val->written = true;
        }
      });
      s.make_scratch();
    });
    for (std::size_t p = 0; p != n_leaves; ++p)
      if (!values_[p].written) unreached_.push_back(p);
    plan_memory();
  }

  // The memory plan: every gradient, scratch tensor and kept step buffer is
  // a buffer with the times it is live, placed in one arena allocated here.
  void plan_memory() {
    using namespace detail::model;
    const int n = static_cast<int>(n_steps);
    const auto backward_time = [&](std::size_t i) { return 2 * n - 1 - static_cast<int>(i); };
    const auto rounded = [](std::size_t b) { return (b + arena_alignment - 1) / arena_alignment * arena_alignment; };
    buffers_.clear();
    for (std::size_t v = 0; v != values_.size(); ++v) {
      auto& val = values_[v];
      if (!val.zero) continue;
      planned_buffer b;
      b.bytes = rounded(static_cast<std::size_t>(val.grad_elements) * val.element_size);
      if (val.producer < 0) {
        b.first = 0, b.last = 2 * n;  // a parameter's or an input's: read after the backward
      } else {
        if (!val.written) continue;
        b.first = backward_time(static_cast<std::size_t>(val.first_contribution));
        b.last = backward_time(static_cast<std::size_t>(val.producer));
      }
      val.grad_buffer = static_cast<int>(buffers_.size());
      buffers_.push_back(b);
    }
    std::vector<std::pair<std::size_t, int>> scratch;  // (step, buffer) of each scratch, in visiting order
    for_each_step([&](auto& s, std::size_t i) {
      if (active_[i])
        s.for_each_operand([&](auto& o) {
          if (!o.needs_scratch) return;
          const int t = backward_time(i);
          buffers_.push_back({rounded(static_cast<std::size_t>(o.v.size()) * sizeof(typename std::remove_cvref_t<decltype(o)>::value_type)), 0, t, t});
        });
      s.for_each_buffer([&](auto& buf, const auto& extents) {
        const std::size_t bytes = static_cast<std::size_t>(shape_size(extents)) * sizeof(typename std::remove_cvref_t<decltype(buf)>::value_type);
        buffers_.push_back({rounded(bytes), 0, static_cast<int>(i), backward_time(i)});
      });
    });
    arena_bytes_ = place_buffers(buffers_);
    peak_bytes_ = live_peak(buffers_);
    arena_ = tensor<std::uint8_t, 1, space>(shape<1>{static_cast<index_t>(arena_bytes_)});
    std::uint8_t* const base = arena_.data();
    for (auto& val : values_)
      if (val.grad_buffer >= 0) val.grad_data = base + buffers_[static_cast<std::size_t>(val.grad_buffer)].offset;
    std::size_t next = 0;
    for (const auto& val : values_) next += val.grad_buffer >= 0 ? 1 : 0;
    for_each_step([&](auto& s, std::size_t i) {
      if (active_[i])
        s.for_each_operand([&](auto& o) {
          using O = std::remove_cvref_t<decltype(o)>;
          if constexpr (O::floating) {
            if (o.mode != grad_mode::none) o.grad = grad_view(*find(o), o.v);
          }
          if (o.needs_scratch)
            o.scratch = view<typename O::value_type, O::rank, typename O::space>(
                reinterpret_cast<typename O::value_type*>(base + buffers_[next++].offset), o.v.extents());
        });
      s.for_each_buffer([&](auto& buf, const auto& extents) {
        using B = std::remove_cvref_t<decltype(buf)>;
        buf = B(reinterpret_cast<typename B::value_type*>(base + buffers_[next++].offset), extents);
      });
    });
  }

  template <class O>
  detail::model::value_info* find(const O& o) {
    if (o.param >= 0) return &values_[static_cast<std::size_t>(o.param)];
    if (o.producer >= 0) return &values_[step_value_[static_cast<std::size_t>(o.producer)]];
    return nullptr;
  }

  // Runs step j's forward again (policy recompute) unless it ran since the
  // backward began, its recomputed operands first.
  void ensure(std::size_t j, std::vector<bool>& fresh) {
    if (policy_[j] != step_policy::recompute || fresh[j]) return;
    at_step(j, [&](auto& s) {
      s.for_each_operand([&](auto& o) {
        if (o.producer >= 0) ensure(static_cast<std::size_t>(o.producer), fresh);
      });
      s.forward();
    });
    fresh[j] = true;
    ++info_.recomputed;
  }

  template <class DY>
  void run_backward(const DY& dy_last) {
    const auto before = launches();
    info_ = {};
    for (const auto p : unreached_) values_[p].zero(values_[p]), ++info_.zeroed;
    std::vector<bool> fresh(n_steps, false);
    for_each_step_reversed([&](auto& s, std::size_t i) {
      if (!active_[i]) return;
      s.for_each_operand([&](auto& o) {
        if (o.producer >= 0) ensure(static_cast<std::size_t>(o.producer), fresh);
      });
      if (s.reads_own_output()) ensure(i, fresh);
      for (const auto& val : values_)
        if (val.partial && val.first_contribution == static_cast<int>(i)) val.zero(val), ++info_.cleared;
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s)>, last_t>) {
        if (i == n_steps - 1) {
          s.backward(dy_last);
          ++info_.steps;
          return;
        }
      }
      s.backward(as_const(detail::model::grad_view(values_[step_value_[i]], as_const(s.out))));
      ++info_.steps;
    });
    const auto after = launches();
    info_.kernels = (after.host - before.host) + (after.device - before.device);
  }

  std::tuple<P...> params_;
  std::tuple<I...> inputs_;
  std::tuple<S...> steps_;
  std::array<step_policy, n_steps> policy_;
  std::vector<detail::model::value_info> values_;
  std::size_t n_params_ = 0;
  std::array<std::size_t, n_steps> step_value_{};
  std::array<bool, n_steps> active_{};
  std::vector<std::size_t> unreached_;
  std::vector<detail::model::planned_buffer> buffers_;
  tensor<std::uint8_t, 1, space> arena_;
  std::size_t arena_bytes_ = 0, peak_bytes_ = 0;
  struct constant_operand {
    detail::model::value_key key;
    std::string what;
  };
  std::vector<constant_operand> constants_;  // operands that are neither parameters nor outputs (planning)
  backward_info info_;
};

template <class... P, class... I, class... S>
model(detail::model::parameter_list<P...>, detail::model::input_list<I...>, detail::model::planned_step<S>...)
    -> model<detail::model::parameter_list<P...>, detail::model::input_list<I...>, detail::model::planned_step<S>...>;
template <class... P, class... S>
model(detail::model::parameter_list<P...>, detail::model::planned_step<S>...)
    -> model<detail::model::parameter_list<P...>, detail::model::input_list<>, detail::model::planned_step<S>...>;
}  // namespace loom
