// SPDX-License-Identifier: Apache-2.0
#pragma once

// The steps of a loom::model that wrap loom's layers with backward passes of
// their own: an embedding lookup (embedding_backward) and attention
// (attention_backward).

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

#include "loom/model/steps.hpp"
#include "loom/nn/attention.hpp"
#include "loom/nn/embedding.hpp"

namespace loom {
namespace detail::model {
//! out = embedding(ids, table): one gather kernel. Backward:
//! embedding_backward into the table's gradient (deterministic, no atomics).
template <class Ids, class Table>
struct embedding_desc {
  Ids ids;
  Table table;
  index_t padding;
};

template <class Out, class Ids, class Table>
struct embedding_step {
  static constexpr const char* kind = "embedding";
  template <class Fb>
  void for_each_buffer(Fb&&) {}
  using out_t = Out;
  Out out;
  Ids ids;
  Table table;
  index_t padding;

  template <class Fn>
  void for_each_operand(Fn&& fn) {
    fn(ids), fn(table);
  }
  bool reads_own_output() const { return false; }

  void check(std::size_t i) {
    static_assert(Table::rank == 2 && Out::rank == Ids::rank + 1 && !Ids::floating,
                  "loom: model: embedding_lookup(ids, table) takes integer ids and a table [rows, dim]; its output "
                  "has the ids' shape plus [dim]");
    shape<Out::rank> want{};
    for (std::size_t d = 0; d != Ids::rank; ++d) want[d] = ids.v.extent(d);
    want[Ids::rank] = table.v.extent(1);
    if (out.extents() != want)
      throw_step(i, kind, "its output of shape " + shape_string(out.extents()) + " for " + ids.describe() + " and " +
                              table.describe() + " (a lookup of shape " + shape_string(want) + ")");
  }

  void forward() { out = embedding(ids.v, table.v); }

  template <class DY>
  void backward(const DY& dy) {
    if (table.mode == grad_mode::none) return;
    embedding_backward(table.target(), dy, ids.v, padding);
    table.finish();
  }
  void make_scratch() { table.make_scratch(); }
};

//! out = attn(q, k, v), q, k, v [B, H, S, D] (views into a qkv step's
//! output, say): the attention's kernels, then one copy into the step's
//! output; the log-sum-exp rows stay in a tensor the step owns. Backward:
//! attention_backward (reads the output and lse), its dq, dk, dv written
//! or added into the operands' gradients (one kernel each).
template <class Attn, class Q, class K, class V>
struct attention_desc {
  Attn attn;
  Q q;
  K k;
  V v;
};

template <class Out, class Attn, class Q, class K, class V>
struct attention_step {
  static constexpr const char* kind = "attention";
  template <class Fb>
  void for_each_buffer(Fb&&) {}
  using out_t = Out;
  using value_type = typename Out::value_type;
  Out out;
  Attn attn;
  Q q;
  K k;
  V v;
  tensor<loom::detail::attn::acc_t<value_type>, 3, typename Out::space> lse;

  template <class Fn>
  void for_each_operand(Fn&& fn) {
    fn(q), fn(k), fn(v);
  }
  bool reads_own_output() const { return true; }

  void check(std::size_t i) {
    static_assert(Out::rank == 4 && Q::rank == 4 && K::rank == 4 && V::rank == 4,
                  "loom: model: attend(attn, q, k, v) takes q, k, v [B, H, S, D] and writes an output of q's shape");
    try {
      (void)loom::detail::attn::run_attention_forward<typename Out::space, loom::detail::attn::run_on::checks_only>(
          attn.score, attn.mask, attn.scale, q.v, k.v, v.v, std::tuple<>{});
    } catch (const shape_error& err) {
      throw_step(i, kind, q.describe() + ", " + k.describe() + ", " + v.describe() + ": " + err.what());
    }
    if (out.extents() != q.v.extents())
      throw_step(i, kind, "its output of shape " + shape_string(out.extents()) + " for " + q.describe());
  }

  void forward() {
    auto r = attn(q.v, k.v, v.v);
    assign(out, r.o);
    lse = std::move(r.lse);
  }

  template <class DY>
  void backward(const DY& dy) {
    auto d = attention_backward(attn, q.v, k.v, v.v, out, lse, dy);
    put(q, d.dq), put(k, d.dk), put(v, d.dv);
  }
  void make_scratch() {}

 private:
  template <class O, class G>
  static void put(O& o, const G& g) {
    if (o.mode == grad_mode::write)
      assign(o.grad, g);
    else if (o.mode == grad_mode::accumulate)
      o.grad += g;
  }
};
}  // namespace detail::model

//! An embedding step: `embedding(ids, table)` ([rows, dim] table, integer
//! ids of any rank; output ids.shape + [dim]), one gather kernel; its
//! backward is embedding_backward into the table's gradient (row
//! `padding_idx` gets none, as in PyTorch).
template <tensor_like Ids, tensor_like Table>
[[nodiscard]] auto embedding_lookup(const Ids& ids, const Table& table, index_t padding_idx = no_padding) {
  using namespace detail::model;
  return embedding_desc<operand_t<Ids>, operand_t<Table>>{operand_of("ids", ids), operand_of("table", table),
                                                          padding_idx};
}

//! An attention step: `attn(q, k, v)` for a loom::attention (score_mod and
//! mask kind; no extra arguments), q, k, v [B, H, S, D] (views into another
//! step's output are the usual source); its backward is attention_backward.
template <class Score, class Mask, tensor_like Q, tensor_like K, tensor_like V>
[[nodiscard]] auto attend(const attention_fn<Score, Mask>& attn, const Q& q, const K& k, const V& v) {
  using namespace detail::model;
  return attention_desc<attention_fn<Score, Mask>, operand_t<Q>, operand_t<K>, operand_t<V>>{
      attn, operand_of("q", q), operand_of("k", k), operand_of("v", v)};
}

namespace detail::model {
template <class Out, class Ids, class Table>
auto make_step(step_target<Out> t, embedding_desc<Ids, Table> d) {
  return embedding_step<Out, Ids, Table>{t.out, std::move(d.ids), std::move(d.table), d.padding};
}
template <class Out, class Attn, class Q, class K, class V>
auto make_step(step_target<Out> t, attention_desc<Attn, Q, K, V> d) {
  return attention_step<Out, Attn, Q, K, V>{t.out, d.attn, std::move(d.q), std::move(d.k), std::move(d.v), {}};
}
}  // namespace detail::model
}  // namespace loom
