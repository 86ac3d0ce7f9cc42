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
//! adds two copies per step. Global-norm clipping is not available here
//! (its norm spans the shards): update_options::max_grad_norm must be 0.
//! Cost per step: the bytes of one all-reduce of the gradients (reduce_scatter
//! plus all_gather), as plain data parallelism; optimizer state 1/size().
//! Example: `loom::dist::zero1_adamw<float, loom::device> opt(comm, params, grads, {.lr = 3e-4});  opt.step();`
template <class T, memory_space S>
class zero1_adamw {
 public:
  zero1_adamw(communicator& comm, const view<T, 1, S>& params, const view<T, 1, S>& grads,
              const optim::adamw_options& o = {}, const optim::update_options& u = {})
      : comm_(&comm), params_(params), grads_(grads), opt_(o, u) {
    const std::string who = "loom: zero1_adamw: ";
    if (params.extents() != grads.extents())
      throw shape_error(who + "gradients of shape " + shape_string(grads.extents()) + " for parameters of shape " +
                        shape_string(params.extents()));
    if (!params.is_contiguous() || !grads.is_contiguous())
      throw value_error(who + "the parameters and the gradients are each one contiguous buffer");
    if (u.max_grad_norm > 0)
      throw value_error(who + "global-norm clipping (max_grad_norm) is not available: its norm spans the shards");
    const index_t ranks = comm.size();
    shard_ = (params.size() + ranks - 1) / ranks;
    const index_t padded = shard_ * ranks;
    grad_shard_ = tensor<T, 1, S>(shape<1>{shard_});
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
    opt_.step();
    const view<T, 1, S> all = full_params();
    comm_->all_gather(all.slice(range(begin(), begin() + shard_)), all);
    if (padded_) copy_into(params_, padded_params_.slice(range(0, params_.size())));
  }

  //! The first element of this rank's shard, and the elements of a shard
  //! (the last rank's shard may extend into the padding).
  [[nodiscard]] index_t begin() const { return shard_ * comm_->rank(); }
  [[nodiscard]] index_t shard_size() const { return shard_; }
  //! The optimizer of this rank's shard (its options, steps, last step).
  optim::adamw<S>& optimizer() { return opt_; }

 private:
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
  optim::adamw<S> opt_;
};
}  // namespace loom::dist
