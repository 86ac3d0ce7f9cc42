// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <type_traits>

#include "loom/core/error.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/dist/communicator.hpp"
#include "loom/optim/optim.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom::dist {

//! AdamW sharded across the ranks as ZeRO stage 1 (Rajbhandari et al.,
//! "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
//! 2020): every rank holds all parameters, but each keeps AdamW's moments
//! (and, for bf16/half parameters, the float master weights) of one shard
//! only, 1/size() of the elements. step() averages the gradients across the
//! ranks and leaves each rank its shard (reduce_scatter), updates that shard
//! (loom::optim::adamw: one fused launch), and gathers the updated shards
//! into every rank's parameters (all_gather, in place). The result equals
//! AdamW on the whole parameter buffer with the ranks' average gradient.
//! The parameters and gradients are one flat, contiguous 1-D buffer each (a
//! model's parameters packed together); they must outlive this object.
//! When their size is not a multiple of size(), a zero-padded copy of each
//! adds two copies per step. Global-norm clipping
//! (update_options::max_grad_norm > 0) scales the averaged gradients by
//! min(1, max_grad_norm / (norm + 1e-6)) as loom::optim does, the norm over
//! all shards: each rank sums its shard's squares in double, the ranks'
//! sums are all-gathered and added in rank order, so every rank gets the
//! same norm, bit for bit (grad_norm()); the shard is scaled in place before
//! the update (for bf16/half gradients rounded to T once, where the
//! unsharded optimizer keeps the scaled gradient in float).
//! gradient_buckets made with this optimizer reduce-scatter the gradients
//! bucket by bucket while the backward runs; then update() does the rest.
//! Cost per step: the bytes of one all-reduce of the gradients (reduce_scatter
//! plus all_gather), as plain data parallelism; optimizer state 1/size();
//! clipping adds one pass over the shard and an all-gather of one double.
//! Example: `loom::dist::zero1_adamw<float, loom::device> opt(comm, params, grads, {.lr = 3e-4});  opt.step();`
template <class T, memory_space S>
class zero1_adamw {
 public:
  zero1_adamw(communicator& comm, const view<T, 1, S>& params, const view<T, 1, S>& grads,
              const optim::adamw_options& o = {}, const optim::update_options& u = {})
      : comm_(&comm), params_(params), grads_(grads), max_norm_(u.max_grad_norm), opt_(o, unclipped(u)) {
    const std::string who = "loom: zero1_adamw: ";
    if (params.extents() != grads.extents())
      throw shape_error(who + "gradients of shape " + shape_string(grads.extents()) + " for parameters of shape " +
                        shape_string(params.extents()));
    if (!params.is_contiguous() || !grads.is_contiguous())
      throw value_error(who + "the parameters and the gradients are each one contiguous buffer");
    if (u.max_grad_norm < 0) throw value_error(who + "max_grad_norm must not be negative");
    const index_t ranks = comm.size();
    shard_ = (params.size() + ranks - 1) / ranks;
    const index_t padded = shard_ * ranks;
    grad_shard_ = zeros<T, 1, S>(shape<1>{shard_});  // the padding stays 0
    if (max_norm_ > 0) {
      sums_ = tensor<double, 1, S>(shape<1>{ranks});
      mine_ = tensor<double, 1, S>(shape<1>{1});
      coef_ = tensor<double, 1, S>(shape<1>{1});
    }
    norm_ = zeros<double, 1, S>(shape<1>{1});
    padded_ = padded != params.size();
    if (padded_) {
      padded_params_ = zeros<T, 1, S>(shape<1>{padded});
      padded_grads_ = zeros<T, 1, S>(shape<1>{padded});
      copy_into(padded_params_.slice(range(0, params.size())), params_);
    }
    opt_.add(full_params().slice(range(begin(), begin() + shard_)), grad_shard_);
  }

  //! One step: average the gradients into this rank's shard, update the
  //! shard, gather every shard into the parameters. Collective: every rank
  //! calls it. Device work is enqueued on the current stream.
  void step() {
    if (padded_) copy_into(padded_grads_.slice(range(0, grads_.size())), grads_);
    const view<T, 1, S> grads = padded_ ? padded_grads_.view() : grads_;
    comm_->reduce_scatter(grads, grad_shard_, reduce_op::average);
    update();
  }

  //! The step after the averaged gradients of this rank's shard are in
  //! gradient_shard() (gradient_buckets made with this optimizer put them
  //! there): the clipping (if on), the update of the shard, the gather of
  //! every shard into the parameters. Collective: every rank calls it.
  void update() {
    if (max_norm_ > 0) clip_shard();
    opt_.step();
    const view<T, 1, S> all = full_params();
    comm_->all_gather(all.slice(range(begin(), begin() + shard_)), all);
    if (padded_) copy_into(params_, padded_params_.slice(range(0, params_.size())));
  }

  //! The first element of this rank's shard, and the elements of a shard
  //! (the last rank's shard may extend into the padding).
  [[nodiscard]] index_t begin() const { return shard_ * comm_->rank(); }
  [[nodiscard]] index_t shard_size() const { return shard_; }
  //! The optimizer of this rank's shard (its options, steps, last step;
  //! its own clipping is off: this object clips across the shards).
  optim::adamw<S>& optimizer() { return opt_; }
  //! The 2-norm of all ranks' averaged gradients at the last clipped step
  //! (0-d, in S; 0 before any), the same on every rank.
  [[nodiscard]] view<const double, 0, S> grad_norm() const { return norm_.slice(0); }
  //! This rank's shard of the averaged gradients: elements [begin(),
  //! begin() + shard_size()) of the gradients, zero past their end.
  [[nodiscard]] view<T, 1, S> gradient_shard() { return grad_shard_.view(); }
  //! The gradients (the whole buffer) and the communicator.
  [[nodiscard]] view<T, 1, S> gradients() const { return grads_; }
  [[nodiscard]] communicator& comm() const { return *comm_; }

 private:
  static optim::update_options unclipped(optim::update_options u) {
    u.max_grad_norm = 0;
    return u;
  }
  // Global-norm clipping across the shards, deterministic: this rank's sum
  // of squares in double, the ranks' sums all-gathered and added in rank
  // order (the same reduction on every rank), the factor of loom::optim,
  // and the shard scaled by it as the unsharded update scales a gradient
  // (in T's compute type, the factor rounded to it).
  void clip_shard() {
    using W = optim::detail::compute_t<T>;
    const auto g = cast<double>(grad_shard_.view());
    assign(mine_, sum(g * g));
    comm_->all_gather(mine_, sums_);
    const auto total = sum(sums_.view());  // a 0-d tensor: it outlives the expression below
    const auto n = sqrt(total);
    assign_many(norm_, n, coef_, minimum(1.0, max_norm_ / (n + 1e-6)));
    if constexpr (std::is_same_v<S, host>)
      assign(grad_shard_, cast<T>(cast<W>(grad_shard_.view()) * static_cast<W>(*coef_.data())));
    else
      assign(grad_shard_, cast<T>(cast<W>(grad_shard_.view()) * cast<W>(coef_.slice(0))));
  }
  view<T, 1, S> full_params() { return padded_ ? padded_params_.view() : params_; }
  template <class D, class Src>
  static void copy_into(const D& dst, const Src& src) {
    stream_ref st{};
    if constexpr (std::is_same_v<S, device>) st = current_stream();
    loom::detail::copy_views(dst, view<const T, 1, S>(src), st, false);
  }

  communicator* comm_;
  view<T, 1, S> params_;
  view<T, 1, S> grads_;
  index_t shard_ = 0;
  bool padded_ = false;
  tensor<T, 1, S> padded_params_;
  tensor<T, 1, S> padded_grads_;
  tensor<T, 1, S> grad_shard_;
  double max_norm_ = 0;
  tensor<double, 1, S> sums_, mine_, coef_, norm_;  // clipping: the ranks' sums of squares, this rank's, factor, norm
  optim::adamw<S> opt_;
};
}  // namespace loom::dist
