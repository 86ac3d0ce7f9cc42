// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/dist/communicator.hpp"
#include "loom/dist/zero.hpp"
#include "loom/tensor/view.hpp"

namespace loom::dist {

//! The gradients of data parallelism averaged in buckets while the backward
//! still runs. The gradients live in one flat buffer; `segments` gives each
//! parameter's gradient there as (offset, size), in the order the backward
//! finishes them (for a buffer laid out in forward order: last layer
//! first). Consecutive segments fill buckets of at least `bucket_bytes`
//! (default 25 MiB); a bucket's segments must be adjacent in the buffer.
//! The backward calls ready(k) when it has written gradient k; a bucket
//! whose gradients are all ready is averaged across the ranks at once
//! (all_reduce, reduce_op::average), buckets always in their order, so that
//! every rank issues the same collectives in the same order whatever order
//! its ready() calls come in. wait() returns when every bucket is averaged
//! and makes ready() start the next step.
//! On the device the all-reduce of a bucket runs on a stream of its own
//! (NCCL), after an event recorded on the current stream at ready(): it
//! overlaps the kernels the backward enqueues after it, and wait() makes the
//! current stream wait for the last bucket (no host synchronization). On the
//! host each bucket is averaged inside the ready() call that completes it.
//! Made with a zero1_adamw (ZeRO-1), a bucket is reduce-scattered instead
//! (reduce_scatter_v, average): each rank receives the bucket's elements
//! that lie in its shard, into the optimizer's gradient_shard(); after
//! wait(), zero1_adamw::update() completes the step. The bytes are those of
//! one reduce_scatter of the gradients.
//! Example: `loom::dist::gradient_buckets<bf16, loom::device> b(comm, grads, segments); ... b.ready(k); ... b.wait();`
template <class T, memory_space S>
class gradient_buckets {
 public:
  gradient_buckets(communicator& comm, const view<T, 1, S>& grads,
                   const std::vector<std::pair<index_t, index_t>>& segments, std::size_t bucket_bytes = 25u << 20)
      : comm_(&comm), grads_(grads), ready_(segments.size(), false) {
    if (!grads.is_contiguous()) throw value_error("loom: gradient_buckets: the gradients are one contiguous buffer");
    std::size_t k = 0;
    while (k < segments.size()) {
      bucket b{segments[k].first, segments[k].first, 0, 0};
      index_t covered = 0;
      std::size_t bytes = 0;
      for (; k < segments.size() && (b.segments == 0 || bytes < bucket_bytes); ++k) {
        const auto [offset, size] = segments[k];
        if (offset < 0 || size < 0 || offset + size > grads.size())
          throw value_error("loom: gradient_buckets: segment " + std::to_string(k) + " [" + std::to_string(offset) +
                            ", " + std::to_string(offset + size) + ") lies outside the " +
                            std::to_string(grads.size()) + " gradients");
        b.begin = std::min(b.begin, offset);
        b.end = std::max(b.end, offset + size);
        covered += size;
        bytes += static_cast<std::size_t>(size) * sizeof(T);
        ++b.segments;
        bucket_of_.push_back(buckets_.size());
      }
      if (covered != b.end - b.begin)
        throw value_error("loom: gradient_buckets: the segments of bucket " + std::to_string(buckets_.size()) +
                          " do not tile [" + std::to_string(b.begin) + ", " + std::to_string(b.end) +
                          ") of the buffer: give segments in an order in which neighbours are adjacent");
      b.pending = b.segments;
      buckets_.push_back(b);
    }
    if constexpr (std::is_same_v<S, device>) {
      comm_stream_.emplace();
      done_.emplace(false);
      for (std::size_t i = 0; i != buckets_.size(); ++i) ready_events_.emplace_back(false);
    }
  }

  //! Buckets that reduce-scatter into the shards of `zero` (ZeRO-1): the
  //! gradients are zero.gradients(); each bucket's elements go to the ranks
  //! whose shards hold them, averaged, in zero.gradient_shard(). Call
  //! zero.update() after wait().
  //! Example: `loom::dist::gradient_buckets<float, loom::device> b(zero, segments); ... b.wait(); zero.update();`
  gradient_buckets(zero1_adamw<T, S>& zero, const std::vector<std::pair<index_t, index_t>>& segments,
                   std::size_t bucket_bytes = 25u << 20)
      : gradient_buckets(zero.comm(), zero.gradients(), segments, bucket_bytes) {
    shard_out_ = zero.gradient_shard();
    shard_ = zero.shard_size();
  }

  //! Gradient `segment` is written (on the device: by work enqueued on the
  //! current stream so far). Averages every bucket that is complete and
  //! whose predecessors are. A segment marked twice in one step is a
  //! value_error.
  void ready(std::size_t segment) {
    if (segment >= ready_.size())
      throw value_error("loom: gradient_buckets: segment " + std::to_string(segment) + " of " +
                        std::to_string(ready_.size()));
    if (ready_[segment])
      throw value_error("loom: gradient_buckets: segment " + std::to_string(segment) +
                        " is marked ready twice in one step");
    ready_[segment] = true;
    bucket& b = buckets_[bucket_of_[segment]];
    --b.pending;
    if constexpr (std::is_same_v<S, device>)
      if (b.pending == 0) ready_events_[bucket_of_[segment]].record(current_stream());
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) launch(next_++);
  }

  //! Returns when every bucket is averaged (on the device: makes the
  //! current stream wait for them) and starts a new step. A segment not
  //! marked ready is a value_error naming it (the other ranks then wait in
  //! their collective until their timeout).
  void wait() {
    for (std::size_t k = 0; k != ready_.size(); ++k)
      if (!ready_[k])
        throw value_error("loom: gradient_buckets: wait() before segment " + std::to_string(k) + " was marked ready");
    if constexpr (std::is_same_v<S, device>) {
      if (!buckets_.empty()) {
        done_->record(*comm_stream_);
        done_->wait_on(current_stream());
      }
    }
    for (std::size_t k = 0; k != ready_.size(); ++k) ready_[k] = false;
    for (auto& b : buckets_) b.pending = b.segments;
    next_ = 0;
  }

  //! The number of buckets, and bucket i's range of the buffer.
  [[nodiscard]] std::size_t size() const { return buckets_.size(); }
  [[nodiscard]] std::pair<index_t, index_t> bucket_range(std::size_t i) const {
    return {buckets_.at(i).begin, buckets_.at(i).end};
  }

 private:
  struct bucket {
    index_t begin, end;
    std::size_t segments;
    std::size_t pending;
  };

  // Bucket i averaged: all-reduced, or (ZeRO-1) reduce-scattered by the
  // shards, rank r's count being the bucket's elements in [r shard, (r + 1)
  // shard) of the gradients.
  void reduce(std::size_t i) {
    const bucket& b = buckets_[i];
    const auto part = grads_.slice(range(b.begin, b.end));
    if (shard_ == 0) return comm_->all_reduce(part, reduce_op::average);
    std::vector<index_t> counts;
    for (int r = 0; r != comm_->size(); ++r) {
      const index_t lo = std::max(b.begin, shard_ * r), hi = std::min({b.end, shard_ * (r + 1), grads_.size()});
      counts.push_back(std::max<index_t>(hi - lo, 0));
    }
    const index_t at = std::max(b.begin - shard_ * comm_->rank(), index_t{0});
    const index_t mine = counts[static_cast<std::size_t>(comm_->rank())];
    comm_->reduce_scatter_v(part, shard_out_.slice(range(mine > 0 ? at : 0, mine > 0 ? at + mine : 0)), counts,
                            reduce_op::average);
  }
  void launch(std::size_t i) {
    if constexpr (std::is_same_v<S, device>) {
      ready_events_[i].wait_on(*comm_stream_);
      const stream_guard on(*comm_stream_);
      reduce(i);
    } else {
      reduce(i);
    }
  }

  communicator* comm_;
  view<T, 1, S> grads_;
  view<T, 1, S> shard_out_;  // ZeRO-1: this rank's gradient shard, of shard_ elements (0: all-reduce)
  index_t shard_ = 0;
  std::vector<bool> ready_;
  std::vector<std::size_t> bucket_of_;
  std::vector<bucket> buckets_;
  std::size_t next_ = 0;
  std::optional<loom::stream> comm_stream_;
  std::vector<loom::event> ready_events_;
  std::optional<loom::event> done_;
};
}  // namespace loom::dist
