// SPDX-License-Identifier: Apache-2.0
#pragma once

// Optimizers as fused loom expressions: SGD (momentum, Nesterov, weight
// decay), AdamW (bias correction, decoupled weight decay) and Lion. Each
// parameter's update is one fused expression (assign_many's) that reads the
// parameter, its gradient and its state and writes the parameter and its
// state together (and, for bf16/half parameters, the float master weights);
// the updates of all parameters of one dtype run as ONE launch
// (multi-tensor: exec/batches.hpp). Global-norm gradient clipping sums the
// squares of all gradients on the device (one launch per dtype group and
// one reduction; no host synchronization) and the updates read the
// clipping factor from there. Learning rate and step count are run-time values: the kernels are
// compiled once per parameter type, not per step.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/space.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/batches.hpp"
#include "loom/exec/multi.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/math.hpp"
#include "loom/reduce/reduce.hpp"
#include "loom/rng/random.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom::optim {
//! SGD's hyper-parameters, as torch.optim.SGD: with g the gradient plus
//! weight_decay * w, the momentum buffer b is g at the first step and then
//! momentum * b + (1 - dampening) * g; the step is g + momentum * b with
//! nesterov, else b (g itself when momentum is 0); w -= lr * step.
struct sgd_options {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

//! AdamW's hyper-parameters, as torch.optim.AdamW: w *= 1 - lr *
//! weight_decay; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
//! w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
struct adamw_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

//! Lion's hyper-parameters (Chen et al., "Symbolic Discovery of Optimization
//! Algorithms", 2023): c = beta1 m + (1 - beta1) g; w = w (1 - lr
//! weight_decay) - lr sign(c); m = beta2 m + (1 - beta2) g.
struct lion_options {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0;
};

//! What every optimizer shares: low-precision parameters and clipping.
struct update_options {
  //! bf16/half parameters keep float master weights that the update reads
  //! and writes; the parameter receives the master rounded (else the
  //! update reads the parameter, computes in float and rounds into it).
  bool master_weights = true;
  //! bf16 parameters are rounded stochastically (loom::stochastic_round,
  //! Philox stream (seed + k * 0x9E3779B97F4A7C15, step) for parameter k),
  //! else to nearest. Not available for half (value_error at add).
  bool stochastic_rounding = false;
  std::uint64_t seed = 0;
  //! Global-norm clipping: every gradient scaled by min(1, max_grad_norm /
  //! (norm + 1e-6)), norm the 2-norm of all gradients together (as
  //! torch.nn.utils.clip_grad_norm_). 0: no clipping.
  double max_grad_norm = 0;
};

//! What the last step did.
struct step_info {
  std::uint64_t step = 0;        //!< the step count after it (1 for the first step)
  std::size_t parameters = 0;    //!< parameters updated
  std::size_t groups = 0;        //!< their groups: parameters of one dtype (and rank, above 4) share one launch
                                 //!< (on the device, one per 64 parameters or fewer, as a kernel's parameters allow)
  std::uint64_t kernels = 0;     //!< launches of the host and device executors during the step
  std::uint64_t clip_kernels = 0;  //!< of those, the clipping's (0 without clipping)
};

namespace detail {
using loom::detail::as_view;

// The compute type of a parameter of type T: float for half and bf16.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <class T>
inline constexpr bool low_precision = std::is_same_v<T, half> || std::is_same_v<T, bf16>;

// The stream of parameter k's stochastic rounding.
inline std::uint64_t rounding_seed(std::uint64_t seed, std::size_t k) {
  return seed + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(k);
}

// SGD: per-step scalars, and the update of one parameter handed to `out`
// as (new w, state view, new state, ...).
struct sgd_rule {
  using options = sgd_options;
  struct scalars {
    double lr, decay, keep, take, momentum_value;
    bool nesterov, momentum;
  };
  static scalars prepare(const options& o, std::uint64_t t) {
    const bool first = t == 1;
    return {o.lr,
            o.weight_decay,
            first ? 0.0 : o.momentum,
            first ? 1.0 : 1.0 - o.dampening,
            o.momentum,
            o.nesterov,
            o.momentum != 0};
  }
  static int states(const scalars& c) { return c.momentum ? 1 : 0; }
  template <class W, class Wx, class Gx, class St, class Out>
  static void apply(const scalars& c, const Wx& w, const Gx& g, St& s, const Out& out) {
    const auto d = g + W(c.decay) * w;
    if (!c.momentum) {
      out(w - W(c.lr) * d);
    } else {
      const auto b = W(c.keep) * s[0] + W(c.take) * d;
      if (c.nesterov)
        out(w - W(c.lr) * (d + W(c.momentum_value) * b), s[0], b);
      else
        out(w - W(c.lr) * b, s[0], b);
    }
  }
};

// The correctly rounded square root of a float from multiplications and
// integer operations only, in SIMD lanes: libm's sqrtf may set errno, which
// keeps the compilers' loops that call it one element at a time. An inverse
// square root seeded from the bits of x in double (relative error below
// 3.5%) and three Newton steps (below 1e-10), sqrt = x * that, rounded to
// float (so within one ulp of the correctly rounded root), then moved by one
// ulp when x lies beyond the square of a neighbouring midpoint (a midpoint
// has 25 significant bits: its square is exact in double). The
// special cases (0, -0, inf, NaN, negative) are blended in by integer masks,
// not branches. Equal to sqrtf for every float (checked exhaustively).
inline float sqrt_rn(float x) {
  const double d = x, h = 0.5 * d;
  double y = std::bit_cast<double>(0x5fe6eb50c7b537a9ull - (std::bit_cast<std::uint64_t>(d) >> 1));
  y = y * (1.5 - h * y * y);
  y = y * (1.5 - h * y * y);
  y = y * (1.5 - h * y * y);
  const float r = static_cast<float>(d * y);
  const std::uint32_t rb = std::bit_cast<std::uint32_t>(r);  // unsigned: wraps for the special cases
  const double below = 0.5 * (static_cast<double>(r) + static_cast<double>(std::bit_cast<float>(rb - 1)));
  const double above = 0.5 * (static_cast<double>(r) + static_cast<double>(std::bit_cast<float>(rb + 1)));
  const std::uint32_t rounded =
      rb + static_cast<std::uint32_t>(d > above * above) - static_cast<std::uint32_t>(d < below * below);
  const std::uint32_t negative = 0u - static_cast<std::uint32_t>(x < 0.0f);
  const std::uint32_t special = (0x7fc00000u & negative) | (std::bit_cast<std::uint32_t>(x) & ~negative);
  const std::uint32_t finite = static_cast<std::uint32_t>(x < std::numeric_limits<float>::infinity());
  const std::uint32_t regular = 0u - (static_cast<std::uint32_t>(x > 0.0f) & finite);
  return std::bit_cast<float>((rounded & regular) | (special & ~regular));
}

// sqrt for the update rules: sqrt_rn for float on the host, the math
// library's elsewhere (the same values: both correctly rounded).
struct fn_sqrt_rn {
  static constexpr bool floating = true;
  template <class T>
  LOOM_HD T operator()(T x) const {
#if defined(__CUDA_ARCH__)
    return math::sqrt(x);
#else
    if constexpr (std::is_same_v<T, float>)
      return sqrt_rn(x);
    else
      return math::sqrt(x);
#endif
  }
};

struct adamw_rule {
  using options = adamw_options;
  struct scalars {
    double b1, b2, eps, decay, step_size, sqrt_bc2;
  };
  static scalars prepare(const options& o, std::uint64_t t) {
    const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
    return {o.beta1, o.beta2, o.eps, 1 - o.lr * o.weight_decay, o.lr / bc1, std::sqrt(bc2)};
  }
  static int states(const scalars&) { return 2; }
  template <class W, class Wx, class Gx, class St, class Out>
  static void apply(const scalars& c, const Wx& w, const Gx& g, St& s, const Out& out) {
    const auto m = W(c.b1) * s[0] + W(1 - c.b1) * g;
    const auto v = W(c.b2) * s[1] + W(1 - c.b2) * (g * g);
    out(w * W(c.decay) - W(c.step_size) * m / (map(fn_sqrt_rn{}, v) / W(c.sqrt_bc2) + W(c.eps)), s[0], m, s[1], v);
  }
};

struct lion_rule {
  using options = lion_options;
  struct scalars {
    double lr, b1, b2, decay;
  };
  static scalars prepare(const options& o, std::uint64_t) {
    return {o.lr, o.beta1, o.beta2, 1 - o.lr * o.weight_decay};
  }
  static int states(const scalars&) { return 1; }
  template <class W, class Wx, class Gx, class St, class Out>
  static void apply(const scalars& c, const Wx& w, const Gx& g, St& s, const Out& out) {
    const auto dir = sign(W(c.b1) * s[0] + W(1 - c.b1) * g);
    out(w * W(c.decay) - W(c.lr) * dir, s[0], W(c.b2) * s[0] + W(1 - c.b2) * g);
  }
};

// One parameter, its gradient and its state, behind a virtual interface so
// that parameters of any type and rank share one optimizer.
template <class Rule, class S>
struct entry_base {
  virtual ~entry_base() = default;
  // Adds the sum of the gradient's squares (in double) to `b`.
  virtual void sum_squares(loom::detail::multi::batches<S>& b) const = 0;
  virtual index_t elements() const = 0;
  // Adds the parameter's update to its batch (launched with the others of
  // its type by the optimizer).
  virtual void update(const typename Rule::scalars& c, const view<const double, 0, S>& coef, std::uint64_t step,
                      const update_options& u, std::size_t k, loom::detail::multi::batches<S>& b) = 0;
};

template <class Rule, class T, std::size_t R, class S>
struct entry final : entry_base<Rule, S> {
  using W = compute_t<T>;
  static constexpr bool master_possible = low_precision<T>;
  view<T, R, S> p;
  view<const T, R, S> g;
  tensor<W, R, S> master;  // empty without master weights
  std::vector<tensor<W, R, S>> state;

  entry(const view<T, R, S>& param, const view<const T, R, S>& grad, bool with_master, int states) : p(param), g(grad) {
    add_states(states);
    if constexpr (master_possible) {
      if (with_master) {
        master = tensor<W, R, S>(p.extents());
        assign(master, cast<W>(p));
      }
    } else {
      (void)with_master;
    }
  }

  // Zeroed state tensors up to n (SGD's momentum buffer appears when
  // momentum becomes non-zero).
  void add_states(int n) {
    while (static_cast<int>(state.size()) < n) {
      state.emplace_back(p.extents());
      assign(state.back(), W(0));
    }
  }

  void sum_squares(loom::detail::multi::batches<S>& b) const override {
    const auto x = cast<double>(g);
    loom::detail::multi::prepare_sum(x * x, [&b](const auto& it) { b.add(it); });
  }
  index_t elements() const override { return p.size(); }

  void update(const typename Rule::scalars& c, const view<const double, 0, S>& coef, std::uint64_t step,
              const update_options& u, std::size_t k, loom::detail::multi::batches<S>& b) override {
    const auto enqueue = [&b](auto&&... pairs) {
      loom::detail::multi::prepare_many(b, pairs...);
    };
    add_states(Rule::states(c));
    std::vector<view<W, R, S>> s;
    for (auto& t : state) s.push_back(t.view());
    // On the host the clipping factor is read here (host memory: the
    // clipping's launches have run) and enters as a scalar, so every
    // operand of a dense parameter is dense and the update runs in SIMD
    // lanes (exec/batches.hpp); on the device it stays where it is.
    const auto grad = [&] {
      if constexpr (std::is_same_v<S, host>)
        return cast<W>(g) * static_cast<W>(*coef.data());
      else
        return cast<W>(g) * cast<W>(coef);
    }();
    if constexpr (!master_possible) {
      Rule::template apply<W>(c, p, grad, s, [&](const auto& w1, const auto&... st) { enqueue(p, w1, st...); });
    } else if (master.size() == p.size() && p.size() > 0) {
      const view<W, R, S> m = master.view();
      Rule::template apply<W>(c, m, grad, s, [&](const auto& w1, const auto&... st) {
        if constexpr (std::is_same_v<T, bf16>)
          if (u.stochastic_rounding) {
            enqueue(m, w1, p, stochastic_round<bf16>(w1, rounding_seed(u.seed, k), step), st...);
            return;
          }
        enqueue(m, w1, p, w1, st...);
      });
    } else {
      Rule::template apply<W>(c, cast<W>(p), grad, s, [&](const auto& w1, const auto&... st) {
        if constexpr (std::is_same_v<T, bf16>)
          if (u.stochastic_rounding) {
            enqueue(p, stochastic_round<bf16>(w1, rounding_seed(u.seed, k), step), st...);
            return;
          }
        enqueue(p, w1, st...);
      });
    }
  }
};

// Parameters of rank below group_rank are updated as views of that rank
// (leading extents of 1), so parameters of one dtype share one launch
// whatever their rank.
inline constexpr std::size_t group_rank = 4;
template <std::size_t GR, class T, std::size_t R, class S>
view<T, GR, S> with_rank(const view<T, R, S>& v) {
  if constexpr (GR == R) {
    return v;
  } else {
    shape<GR> ext, st;
    for (std::size_t d = 0; d != GR - R; ++d) {
      ext[d] = 1;
      st[d] = 0;
    }
    for (std::size_t d = 0; d != R; ++d) {
      ext[GR - R + d] = v.extent(d);
      st[GR - R + d] = v.stride(d);
    }
    return view<T, GR, S>(v.data(), ext, st);
  }
}

inline std::uint64_t launch_total() {
  const launch_counts n = launches();
  return n.host + n.device;
}
}  // namespace detail

//! An optimizer over parameters of any floating type and rank in memory
//! space S, following Rule (sgd, adamw, lion below). Parameters are added
//! with their gradients (tensors or views, kept as views: they must outlive
//! the optimizer); step() updates all of them, one launch per dtype group.
template <class Rule, memory_space S>
class optimizer {
 public:
  using options_type = typename Rule::options;

  explicit optimizer(const options_type& o = {}, const update_options& u = {})
      : opts_(o), upd_(u), coef_(shape<1>{1}), norm_(shape<1>{1}) {
    assign(coef_, 1.0);
    assign(norm_, 0.0);
  }

  //! Adds parameter `param` with its gradient `grad` (same dtype and
  //! shape, else dtype_error or shape_error naming the parameter's index);
  //! returns its index. bf16/half parameters get float master weights
  //! (update_options::master_weights), copied from the parameter now.
  template <tensor_like P, tensor_like G>
  std::size_t add(P&& param, G&& grad) {
    const auto pv = detail::as_view(param);
    const auto gv = detail::as_view(grad);
    using T = std::remove_const_t<typename decltype(pv)::element_type>;
    using GT = std::remove_const_t<typename decltype(gv)::element_type>;
    constexpr std::size_t R = decltype(pv)::rank;
    static_assert(std::is_same_v<typename decltype(pv)::space, S> && std::is_same_v<typename decltype(gv)::space, S>,
                  "loom: an optimizer's parameters and gradients live in its memory space; copy them with "
                  "loom::to_device(x) or loom::to_host(x)");
    static_assert(!std::is_const_v<typename decltype(pv)::element_type>,
                  "loom: an optimizer writes its parameters: give a view of non-const elements");
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || detail::low_precision<T>,
                  "loom: an optimizer's parameters are float, double, bf16 or half");
    static_assert(R >= 1, "loom: an optimizer's parameters have rank 1 or more; view a scalar as shape [1]");
    const std::size_t k = entries_.size();
    const std::string who = "loom: optimizer parameter " + std::to_string(k) + ": ";
    if constexpr (!std::is_same_v<T, GT>) {
      throw dtype_error(who + "its gradient is " + std::string(dtype_name(dtype_of<GT>)) + ", the parameter " +
                        std::string(dtype_name(dtype_of<T>)) + "; give a gradient of the parameter's dtype");
    } else {
      if constexpr (decltype(gv)::rank != R) {
        throw shape_error(who + "gradient of shape " + shape_string(gv.extents()) + " for a parameter of shape " +
                          shape_string(pv.extents()));
      } else {
        if (gv.extents() != pv.extents())
          throw shape_error(who + "gradient of shape " + shape_string(gv.extents()) + " for a parameter of shape " +
                            shape_string(pv.extents()));
        if (may_overlap(pv, gv)) throw aliasing_error(who + "the gradient overlaps the parameter");
        if (upd_.stochastic_rounding && std::is_same_v<T, half>)
          throw value_error(who + "stochastic rounding is available for bf16 parameters, not half");
        constexpr std::size_t GR = R < detail::group_rank ? detail::group_rank : R;
        entries_.push_back(std::make_unique<detail::entry<Rule, T, GR, S>>(
            detail::with_rank<GR>(pv), detail::with_rank<GR>(view<const T, R, S>(gv)), upd_.master_weights,
            Rule::states(Rule::prepare(opts_, 1))));
        index_t chunks = 0;
        for (const auto& e : entries_) chunks += loom::detail::multi::sum_chunks<S>(e->elements());
        parts_ = tensor<double, 1, S>(shape<1>{chunks > 0 ? chunks : 1});
      }
    }
    return k;
  }

  //! One step over every parameter: the clipping (if on), then one launch
  //! per dtype group. Enqueued on the current stream; no synchronization.
  void step() {
    const std::uint64_t before = detail::launch_total();
    ++steps_;
    std::uint64_t clip = 0;
    if (upd_.max_grad_norm > 0) {
      clip_gradients();
      clip = detail::launch_total() - before;
      clipping_ = true;
    } else if (clipping_) {
      assign(coef_, 1.0);
      clipping_ = false;
    }
    const auto c = Rule::prepare(opts_, steps_);
    const view<const double, 0, S> coef(coef_.slice(0));
    for (std::size_t k = 0; k != entries_.size(); ++k) entries_[k]->update(c, coef, steps_, upd_, k, batches_);
    const std::size_t groups = batches_.size();
    batches_.flush();
    info_ = {steps_, entries_.size(), groups, detail::launch_total() - before, clip};
  }

  //! The hyper-parameters; changing lr (or any other) takes effect at the
  //! next step, without compiling anything.
  options_type& options() { return opts_; }
  const options_type& options() const { return opts_; }
  update_options& updates() { return upd_; }
  //! Steps taken so far (the t of AdamW's bias correction; the Philox
  //! offset of stochastic rounding). set_steps resumes a saved run.
  std::uint64_t steps() const { return steps_; }
  void set_steps(std::uint64_t t) { steps_ = t; }
  std::size_t size() const { return entries_.size(); }
  //! What the last step launched.
  const step_info& last_step() const { return info_; }
  //! The 2-norm of all gradients at the last clipped step (0-d, in S: read
  //! it with .item(), which synchronizes; 0 before any).
  view<const double, 0, S> grad_norm() const { return norm_.slice(0); }

 private:
  void clip_gradients() {
    // The squares of all gradients of one dtype summed by chunks in one
    // launch (exec/batches.hpp), the partial sums added by one reduction,
    // then the norm and the factor in one launch: each in a fixed order,
    // so deterministic.
    for (const auto& e : entries_) e->sum_squares(sums_);
    double* cursor = parts_.data();
    sums_.flush(&cursor);
    const auto total = sum(parts_.slice(range(0, static_cast<index_t>(cursor - parts_.data()))));
    const auto n = sqrt(total);
    assign_many(norm_, n, coef_, minimum(1.0, upd_.max_grad_norm / (n + 1e-6)));
  }

  options_type opts_;
  update_options upd_;
  std::vector<std::unique_ptr<detail::entry_base<Rule, S>>> entries_;
  // The clipping factor and the norm, [1] (0-d outputs are avoided: a
  // one-element vector read as a 0-d view).
  tensor<double, 1, S> coef_;
  tensor<double, 1, S> norm_;
  tensor<double, 1, S> parts_;
  std::uint64_t steps_ = 0;
  bool clipping_ = false;
  step_info info_;
  loom::detail::multi::batches<S> batches_;
  loom::detail::multi::batches<S> sums_;
};

//! SGD with momentum, dampening, Nesterov and weight decay (sgd_options).
template <memory_space S>
using sgd = optimizer<detail::sgd_rule, S>;
//! AdamW (adamw_options).
template <memory_space S>
using adamw = optimizer<detail::adamw_rule, S>;
//! Lion (lion_options).
template <memory_space S>
using lion = optimizer<detail::lion_rule, S>;
}  // namespace loom::optim
