// SPDX-License-Identifier: Apache-2.0
#pragma once

// loom::model: a forward of several steps, each an assignment into a named
// tensor, and the backward of all parameters derived from it in reverse
// order (docs/13_models.md). Which value flows from which step is found
// once, when the model is made, by the identity of the tensors (the same
// memory, type and layout); a gradient of a value used by several steps is
// written by the first of them in the backward and added to by the others.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/model/steps.hpp"

namespace loom {
namespace detail::model {
//! The identity of a tensor's elements: where they start, their type, their
//! layout, and the bytes they span (for overlaps).
struct value_key {
  const void* data = nullptr;
  const void* type = nullptr;
  std::size_t rank = 0;
  std::array<index_t, max_rank> extents{}, strides{};
  std::uintptr_t lo = 0, hi = 0;  // [lo, hi): the bytes the elements span

  bool same(const value_key& o) const {
    return data == o.data && type == o.type && rank == o.rank && extents == o.extents && strides == o.strides;
  }
  bool overlaps(const value_key& o) const { return lo < o.hi && o.lo < hi; }
};

template <class T>
inline constexpr char type_tag = 0;

template <class V>
value_key key_of(const V& v) {
  using T = typename V::value_type;
  value_key k;
  k.data = v.data();
  k.type = &type_tag<T>;
  k.rank = V::rank;
  std::intptr_t first = 0, last = 0;
  bool empty = false;
  for (std::size_t d = 0; d != V::rank; ++d) {
    k.extents[d] = v.extent(d), k.strides[d] = v.stride(d);
    if (v.extent(d) == 0) empty = true;
    const std::intptr_t span = static_cast<std::intptr_t>(v.extent(d) - 1) * v.stride(d);
    (span < 0 ? first : last) += span;
  }
  const auto base = reinterpret_cast<std::intptr_t>(v.data());
  k.lo = static_cast<std::uintptr_t>(base + first * static_cast<std::intptr_t>(sizeof(T)));
  k.hi = empty ? k.lo : static_cast<std::uintptr_t>(base + (last + 1) * static_cast<std::intptr_t>(sizeof(T)));
  return k;
}

//! A value the model knows: a parameter or a step's output.
struct value_info {
  value_key key;
  int producer = -1;  // the step that writes it, or -1 for a parameter
  int param = -1;
  bool needs_grad = false;
  bool written = false;          // a backward step writes its gradient (planning)
  std::shared_ptr<void> grad;    // its gradient: a tensor of its type and shape
};

template <class S>
inline constexpr bool is_loss_step = false;
template <class Out, class L, class T>
inline constexpr bool is_loss_step<cross_entropy_step<Out, L, T>> = true;

template <class... P>
struct parameter_list {
  std::tuple<P...> p;
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

//! What the last backward ran.
struct backward_info {
  int steps = 0;       //!< steps whose backward ran
  int recomputed = 0;  //!< forwards of step_policy::recompute steps run again
  int zeroed = 0;      //!< parameters no step reaches, their gradients set to 0
  std::uint64_t kernels = 0;  //!< launches of both executors (loom::launches())
};

//! A model: parameters and steps. `forward()` runs the steps in order;
//! `backward()` derives every parameter's gradient (into tensors the model
//! owns, `grad(p)`) in reverse order. Every check (shapes within and
//! between steps, operands that overlap a value without being it) is made
//! when the model is made, naming the step and the operand.
//! Example:
//!   loom::model net(loom::parameters(w1, b1, w2, b2),
//!                   loom::step(h) = loom::linear(x, w1, b1, loom::matmul_activation::relu),
//!                   loom::step(logits) = loom::linear(h, w2, b2),
//!                   loom::step(loss) = loom::cross_entropy_loss(logits, labels));
//!   net.forward(); net.backward();  // net.grad(w1) ...
template <class Params, class... Steps>
class model;

template <class... P, class... S>
class model<detail::model::parameter_list<P...>, detail::model::planned_step<S>...> {
  static_assert(sizeof...(S) > 0, "loom: model: give at least one step");
  static constexpr std::size_t n_steps = sizeof...(S);
  using last_t = std::tuple_element_t<n_steps - 1, std::tuple<S...>>;

 public:
  model(detail::model::parameter_list<P...> params, detail::model::planned_step<S>... steps)
      : params_(std::move(params.p)), steps_(std::move(steps.s)...), policy_{steps.policy...} {
    plan();
  }
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  //! Runs every step's forward in order: one assignment each (a linear
  //! step with gelu_tanh two).
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

  //! The gradient of parameter `p` (the same tensor or view given to
  //! loom::parameters), a tensor the model owns; value_error for another.
  template <tensor_like X>
  auto grad(const X& p) const {
    const auto k = detail::model::key_of(detail::as_view(p));
    using V = decltype(detail::as_view(p));
    using T = typename V::value_type;
    for (const auto& val : values_)
      if (val.param >= 0 && val.key.same(k))
        return static_cast<tensor<T, V::rank, typename V::space>*>(val.grad.get())->view();
    throw value_error("loom: model: grad(p): p of shape " + shape_string(detail::as_view(p).extents()) +
                      " is not one of the model's parameters");
  }

  //! Registers every parameter with its gradient in an optimizer
  //! (`opt.add(p, grad(p))`, in the parameters' order).
  template <class Opt>
  void add_parameters_to(Opt& opt) {
    std::size_t i = 0;
    std::apply([&](auto&... p) { ((opt.add(p, param_grad<std::remove_cvref_t<decltype(p)>>(i++))), ...); }, params_);
  }

  //! What the last backward ran.
  const backward_info& last_backward() const { return info_; }

 private:
  static constexpr bool is_loss = detail::model::is_loss_step<last_t>;

  template <class F>
  void for_each_step(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::get<I>(steps_), I), ...); }(std::index_sequence_for<S...>{});
  }
  template <class F>
  void for_each_step_reversed(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f(std::get<n_steps - 1 - I>(steps_), n_steps - 1 - I), ...);
    }(std::index_sequence_for<S...>{});
  }
  template <class F>
  void at_step(std::size_t j, F&& f) {
    for_each_step([&](auto& s, std::size_t i) {
      if (i == j) f(s);
    });
  }

  template <class V>
  auto param_grad(std::size_t i) {
    return static_cast<tensor<typename V::value_type, V::rank, typename V::space>*>(values_[i].grad.get())->view();
  }

  template <class V>
  static std::shared_ptr<void> make_grad(const V& v) {
    return std::make_shared<tensor<typename V::value_type, V::rank, typename V::space>>(v.extents());
  }

  static std::string who(const detail::model::value_info& v) {
    return v.producer >= 0 ? "the output of step " + std::to_string(v.producer)
                           : "parameter " + std::to_string(v.param);
  }

  // Finds each operand's value, checks every step, marks what needs a
  // gradient, then plans the backward: which steps run, which write and which
  // add to each gradient, what is zeroed.
  void plan() {
    using namespace detail::model;
    std::size_t pi = 0;
    std::apply(
        [&](auto&... p) {
          ((values_.push_back({key_of(p), -1, static_cast<int>(pi++), true, false, make_grad(p)})), ...);
        },
        params_);
    for (std::size_t i = 0; i != values_.size(); ++i)
      for (std::size_t j = 0; j != i; ++j)
        if (values_[i].key.overlaps(values_[j].key))
          throw aliasing_error("loom: model: parameters " + std::to_string(j) + " and " + std::to_string(i) + " overlap");
    n_params_ = values_.size();
    for_each_step([&](auto& s, std::size_t i) {
      bool needs = false;
      s.for_each_operand([&](auto& o) {
        const auto k = key_of(o.v);
        for (const auto& val : values_) {
          if (val.key.same(k)) {
            o.producer = val.producer, o.param = val.param;
            if constexpr (std::remove_cvref_t<decltype(o)>::floating) needs = needs || val.needs_grad;
            break;
          }
          if (val.key.overlaps(k))
            throw aliasing_error("loom: model step " + std::to_string(i) + " (" + s.kind + "): operand " + o.name +
                                 " of shape " + shape_string(o.v.extents()) + " overlaps " + who(val) +
                                 " without being the same view; pass that tensor itself");
        }
      });
      s.check(i);
      const auto k = key_of(s.out);
      for (const auto& val : values_)
        if (val.key.overlaps(k))
          throw aliasing_error("loom: model step " + std::to_string(i) + " (" + s.kind + "): its output of shape " +
                               shape_string(s.out.extents()) + " overlaps " + who(val) + "; give each step its own output");
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
      value_info out{k, static_cast<int>(i), -1, needs, false, nullptr};
      values_.push_back(out);
      step_value_[i] = values_.size() - 1;
    });
    // Backward plan, last step first: a step runs when its output has a
    // gradient (the last step's is given); the first contribution to a
    // gradient writes it, later ones add to it.
    for_each_step_reversed([&](auto& s, std::size_t i) {
      auto& outv = values_[step_value_[i]];
      active_[i] = outv.needs_grad && (i == n_steps - 1 || outv.written);
      if (!active_[i]) return;
      s.for_each_operand([&](auto& o) {
        if constexpr (std::remove_cvref_t<decltype(o)>::floating) {
          auto* val = find(o);
          if (val == nullptr || !val->needs_grad) return;
          if (!val->grad) val->grad = make_grad(o.v);
          using O = std::remove_cvref_t<decltype(o)>;
          o.grad = static_cast<tensor<typename O::value_type, O::rank, typename O::space>*>(val->grad.get())->view();
          o.mode = val->written ? grad_mode::accumulate : grad_mode::write;
          val->written = true;
        }
      });
      s.make_scratch();
    });
    for (std::size_t p = 0; p != n_params_; ++p)
      if (!values_[p].written) unreached_.push_back(p);
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
    std::apply(
        [&](auto&... p) {
          std::size_t i = 0;
          const auto zero = [&](auto& q) {
            using V = std::remove_cvref_t<decltype(q)>;
            if (std::find(unreached_.begin(), unreached_.end(), i) != unreached_.end())
              fill(param_grad<V>(i), typename V::value_type(0)), ++info_.zeroed;
            ++i;
          };
          (zero(p), ...);
        },
        params_);
    std::vector<bool> fresh(n_steps, false);
    for_each_step_reversed([&](auto& s, std::size_t i) {
      if (!active_[i]) return;
      s.for_each_operand([&](auto& o) {
        if (o.producer >= 0) ensure(static_cast<std::size_t>(o.producer), fresh);
      });
      if (s.reads_own_output()) ensure(i, fresh);
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s)>, last_t>) {
        if (i == n_steps - 1) {
          s.backward(dy_last);
          ++info_.steps;
          return;
        }
      }
      auto& outv = values_[step_value_[i]];
      using Out = typename std::remove_cvref_t<decltype(s)>::out_t;
      using G = tensor<typename Out::value_type, Out::rank, typename Out::space>;
      s.backward(view<const typename Out::value_type, Out::rank, typename Out::space>(
          static_cast<G*>(outv.grad.get())->view()));
      ++info_.steps;
    });
    const auto after = launches();
    info_.kernels = (after.host - before.host) + (after.device - before.device);
  }

  std::tuple<P...> params_;
  std::tuple<S...> steps_;
  std::array<step_policy, n_steps> policy_;
  std::vector<detail::model::value_info> values_;
  std::size_t n_params_ = 0;
  std::array<std::size_t, n_steps> step_value_{};
  std::array<bool, n_steps> active_{};
  std::vector<std::size_t> unreached_;
  struct constant_operand {
    detail::model::value_key key;
    std::string what;
  };
  std::vector<constant_operand> constants_;  // operands that are neither parameters nor outputs (planning)
  backward_info info_;
};

template <class... P, class... S>
model(detail::model::parameter_list<P...>, detail::model::planned_step<S>...)
    -> model<detail::model::parameter_list<P...>, detail::model::planned_step<S>...>;
}  // namespace loom
