// SPDX-License-Identifier: Apache-2.0
#pragma once

// Gradients of a matrix product y = act(matmul(a, b) + bias): the
// activation's gradient applied to dy in one elementwise kernel that
// loom::grad derives, the bias gradient as a column sum of it (loom's
// deterministic axis reduction), and da = dz b^T, db = a^T dz as GEMMs on
// transposed views of the operands (no copies), batch axes that an operand
// broadcast summed in a fixed order.

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "loom/core/error.hpp"
#include "loom/core/launch.hpp"
#include "loom/core/shape.hpp"
#include "loom/grad/grad.hpp"
#include "loom/linalg/matmul.hpp"
#include "loom/nn/layer.hpp"
#include "loom/reduce/api.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {
//! What matmul_backward computes. `activation` is the forward's epilogue
//! activation (relu, or gelu with approximate::tanh); its gradient needs the
//! activation's input z (for relu, its output serves as well).
struct matmul_backward_options {
  matmul_activation activation = matmul_activation::none;
  bool bias = false;           //!< the value form returns dbias (the column sum of dz)
  bool input_gradient = true;  //!< the value form returns da
  bool weight_gradient = true; //!< the value form returns db
  bool accumulate = false;     //!< the _into form adds to its outputs (gradient accumulation) instead of overwriting
};

//! Which kernels a matmul_backward ran.
struct matmul_backward_info {
  int activation_kernels = 0;  //!< the fused dz = dy * act'(z) kernel (0 or 1)
  int bias_kernels = 0;        //!< the column sum (and its add into an existing dbias)
  int input_gemms = 0;         //!< GEMM calls for da (one, or one per batch matrix when a is broadcast)
  int weight_gemms = 0;        //!< GEMM calls for db
  bool weight_batch_merged = false;  //!< db of a weight shared by the batch as ONE GEMM over the merged rows
  int launches = 0;            //!< every kernel and GEMM call, from loom::launches()
};

//! The gradients matmul_backward returns; a gradient not asked for is an
//! empty tensor.
template <class T, std::size_t RA, std::size_t RB, class S>
struct matmul_gradients {
  tensor<T, RA, S> da;
  tensor<T, RB, S> db;
  tensor<T, 1, S> dbias;
  matmul_backward_info info;
};

namespace detail::linalg {
template <class X>
inline constexpr bool is_skip = std::is_same_v<std::remove_cvref_t<X>, autodiff::skip_t>;

// The view `v` with R - RV leading axes of extent 1 (stride 0).
template <std::size_t R, class T, std::size_t RV, class S>
view<T, R, S> pad_leading(const view<T, RV, S>& v) {
  shape<R> ext{}, str{};
  for (std::size_t d = 0; d != R; ++d) ext[d] = 1;
  for (std::size_t d = 0; d != RV; ++d) {
    ext[R - RV + d] = v.extent(d);
    str[R - RV + d] = v.strides()[d];
  }
  return view<T, R, S>(v.data(), ext, str);
}

// The matrix of `v` (rank R, batch axes of extent 1 where it broadcasts) at
// the batch coordinates `c` of the full batch.
template <class T, std::size_t R, class S>
view<T, 2, S> matrix_at(const view<T, R, S>& v, const std::array<index_t, R>& c) {
  index_t off = 0;
  for (std::size_t d = 0; d + 2 < R; ++d)
    if (v.extent(d) != 1) off += c[d] * v.strides()[d];
  return view<T, 2, S>(v.data() + off, shape<2>{v.extent(R - 2), v.extent(R - 1)},
                       shape<2>{v.strides()[R - 2], v.strides()[R - 1]});
}

// The axes before the last of `v` as one axis of more than one row, when
// their strides allow it.
template <class T, std::size_t R, class S>
bool merge_rows(const view<T, R, S>& v, view<T, 2, S>& out) {
  index_t rows = 1, stride = 0, next = 0;  // next: the stride the next outer axis needs
  for (std::size_t d = R - 1; d-- > 0;) {
    if (v.extent(d) == 1) continue;
    if (rows == 1)
      stride = v.strides()[d];
    else if (v.strides()[d] != next)
      return false;
    next = v.strides()[d] * v.extent(d);
    rows *= v.extent(d);
  }
  if (rows <= 1) return false;
  out = view<T, 2, S>(v.data(), shape<2>{rows, v.extent(R - 1)}, shape<2>{stride, v.strides()[R - 1]});
  return true;
}

template <class G, class P, class Q>
void gemm_into(const G& g, const P& p, const Q& q, bool accumulate) {
  if (accumulate)
    assign(g, matmul(p, q) + g);  // C = D: the addition rides in the GEMM's epilogue
  else
    assign(g, matmul(p, q));
}

// g (rank R, extent 1 on the batch axes the operand broadcast) = the sum over
// those axes of p x q. One batched GEMM when nothing is summed; else one GEMM
// per batch matrix in row-major order, the first one into each output matrix
// overwriting it (unless accumulating): a fixed order, so the sums are
// deterministic. Returns the GEMM calls.
template <class T, std::size_t R, class S, class P, class Q>
int operand_gradient(const view<T, R, S>& g, const P& p, const Q& q, const shape<R>& full, bool accumulate) {
  bool summed = false;
  index_t batches = 1;
  for (std::size_t d = 0; d + 2 < R; ++d) {
    summed = summed || (g.extent(d) == 1 && full[d] != 1);
    batches *= full[d];
  }
  if (!summed) {
    gemm_into(g, p, q, accumulate);
    return 1;
  }
  std::array<index_t, R> c{};
  for (index_t i = 0; i < batches; ++i) {
    bool first = true;
    for (std::size_t d = 0; d + 2 < R; ++d) first = first && (g.extent(d) != 1 || c[d] == 0);
    gemm_into(matrix_at(g, c), matrix_at(p, c), matrix_at(q, c), accumulate || !first);
    for (std::size_t d = R - 2; d-- > 0;) {
      if (++c[d] < full[d]) break;
      c[d] = 0;
    }
  }
  return static_cast<int>(batches);
}

template <class V>
void check_output(const char* name, const V& out, const char* of, const auto& want) {
  if (out.extents() != want)
    throw shape_error(std::string("loom: matmul_backward: ") + name + " of shape " + shape_string(out.extents()) +
                      " for " + of + " of shape " + shape_string(want));
}

// The activation whose gradient dz = dy * act'(z) one derived kernel computes.
inline constexpr auto relu_layer = layer([](auto z) { return relu(z); });
inline constexpr auto gelu_tanh_layer = layer([](auto z) { return gelu(z, approximate::tanh); });

template <class DA, class DB, class DBias, class T, std::size_t RA, std::size_t RB, class S, class DY, class Z>
matmul_backward_info backward(DA&& da, DB&& db, DBias&& dbias, const view<const T, RA, S>& a,
                              const view<const T, RB, S>& b, const DY& dy_in, const Z* z_in,
                              const matmul_backward_options& o) {
  constexpr std::size_t R = RA > RB ? RA : RB;
  static_assert(DY::rank == R, "loom: matmul_backward: dy has the product's rank, max(rank(a), rank(b))");
  static_assert(std::is_same_v<std::remove_const_t<typename DY::element_type>, T>,
                "loom: matmul_backward: dy has the operands' element type");
  const auto before = launches();
  matmul_backward_info info;
  const shape<R> y_shape = matmul(a, b).extents();  // checks a and b (shape_error naming both)
  const view<const T, R, S> dy = dy_in;
  if (dy.extents() != y_shape)
    throw shape_error("loom: matmul_backward: dy of shape " + shape_string(dy.extents()) + " for a product of shape " +
                      shape_string(y_shape));
  if constexpr (!is_skip<DA>) check_output("da", da, "a", a.extents());
  if constexpr (!is_skip<DB>) check_output("db", db, "b", b.extents());
  if constexpr (!is_skip<DBias>) check_output("dbias", dbias, "a bias of a product", shape<1>{y_shape[R - 1]});
  if ((o.activation != matmul_activation::none) != (z_in != nullptr))
    throw value_error(o.activation != matmul_activation::none
                          ? "loom: matmul_backward: the activation's gradient needs its input z: pass z after dy"
                          : "loom: matmul_backward: an activation input z was given but options.activation is none");
  // dz: dy itself, or dy * act'(z) in one kernel.
  tensor<T, R, S> dz_store;
  if (z_in) {
    const view<const T, R, S> z = *z_in;
    if (z.extents() != y_shape)
      throw shape_error("loom: matmul_backward: z of shape " + shape_string(z.extents()) + " for a product of shape " +
                        shape_string(y_shape));
    dz_store = tensor<T, R, S>(y_shape);
    if (o.activation == matmul_activation::relu)
      dz_store = grad<0>(relu_layer)(z, dy);
    else
      dz_store = grad<0>(gelu_tanh_layer)(z, dy);
    info.activation_kernels = 1;
  }
  const view<const T, R, S> dz = z_in ? view<const T, R, S>(dz_store.view()) : dy;
  const auto mark = launches();
  if constexpr (!is_skip<DBias>) {
    std::array<int, R - 1> axes{};
    for (std::size_t d = 0; d + 1 < R; ++d) axes[d] = static_cast<int>(d);
    const auto s = reduce::reduce_axes<reduce::sum_op, false>("sum", dz, axes);
    if (o.accumulate)
      dbias += s;
    else
      dbias = s;
    const auto done = launches();
    info.bias_kernels = static_cast<int>(done.host - mark.host + done.device - mark.device);
  }
  if constexpr (!is_skip<DA>) {
    const auto bt = pad_leading<R>(b).transpose(-2, -1);
    info.input_gemms = operand_gradient(pad_leading<R>(as_view(da)), dz, bt, y_shape, o.accumulate);
  }
  if constexpr (!is_skip<DB>) {
    const auto dbv = as_view(db);
    const auto at = pad_leading<R>(a).transpose(-2, -1);
    const auto dbp = pad_leading<R>(dbv);
    bool shared = true;  // b is one matrix for the whole batch
    for (std::size_t d = 0; d + 2 < R; ++d) shared = shared && dbp.extent(d) == 1;
    view<const T, 2, S> a_rows, dz_rows;
    if (R > 2 && shared && merge_rows(pad_leading<R>(a), a_rows) && merge_rows(dz, dz_rows)) {
      gemm_into(matrix_at(dbp, std::array<index_t, R>{}), a_rows.t(), dz_rows, o.accumulate);
      info.weight_gemms = 1;
      info.weight_batch_merged = true;
    } else {
      info.weight_gemms = operand_gradient(dbp, at, dz, y_shape, o.accumulate);
    }
  }
  const auto after = launches();
  info.launches = static_cast<int>(after.host - before.host + after.device - before.device);
  return info;
}

// The _into forms: outputs as views (or skip), operands as const views.
template <class DA, class DB, class DBias, class A, class B, class DY, class Z>
matmul_backward_info backward_into(DA&& da, DB&& db, DBias&& dbias, const A& a_in, const B& b_in, const DY& dy,
                                   const Z* z, const matmul_backward_options& o) {
  const auto a = as_view(a_in);
  const auto b = as_view(b_in);
  using T = std::remove_const_t<typename decltype(a)::element_type>;
  using S = typename decltype(a)::space;
  return backward(autodiff::output_of(da), autodiff::output_of(db), autodiff::output_of(dbias),
                  view<const T, decltype(a)::rank, S>(a), view<const T, decltype(b)::rank, S>(b), as_view(dy), z, o);
}

template <class A, class B, class DY, class Z>
auto backward_values(const A& a_in, const B& b_in, const DY& dy, const Z* z, const matmul_backward_options& o) {
  const auto a = as_view(a_in);
  const auto b = as_view(b_in);
  using T = std::remove_const_t<typename decltype(a)::element_type>;
  using S = typename decltype(a)::space;
  constexpr std::size_t RA = decltype(a)::rank, RB = decltype(b)::rank;
  matmul_gradients<T, RA, RB, S> g{tensor<T, RA, S>(o.input_gradient ? a.extents() : shape<RA>{}),
                                   tensor<T, RB, S>(o.weight_gradient ? b.extents() : shape<RB>{}),
                                   tensor<T, 1, S>(shape<1>{o.bias ? b.extent(RB - 1) : 0}), {}};
  matmul_backward_options into = o;
  into.accumulate = false;
  auto run = [&](auto&& da, auto&& db, auto&& dbias) {
    g.info = backward_into(da, db, dbias, a, b, dy, z, into);
  };
  auto bias_out = [&](auto&& da, auto&& db) {
    if (o.bias)
      run(da, db, g.dbias.view());
    else
      run(da, db, skip);
  };
  auto weight_out = [&](auto&& da) {
    if (o.weight_gradient)
      bias_out(da, g.db.view());
    else
      bias_out(da, skip);
  };
  if (o.input_gradient)
    weight_out(g.da.view());
  else
    weight_out(skip);
  return g;
}

}  // namespace detail::linalg

//! Gradients of y = act(matmul(a, b) + bias) for the gradient dy of y:
//! da = dz b^T, db = a^T dz, dbias = the column sum of dz, where dz = dy
//! (no activation) or dy * act'(z) (`o.activation`, z the activation's
//! input; for relu its output serves too; use the overload taking z).
//! Returns {da, db, dbias, info}, each gradient in a new tensor (an empty one
//! when `o` does not ask for it). Batch axes broadcast as in matmul: an
//! operand shared along batch axes gets the sum over them, in a fixed order.
//! Kernels: dz in one fused elementwise kernel (derived by loom::grad), the
//! bias sum in one axis reduction, da and db one GEMM each (transposed views,
//! no copies) — db of a weight shared by a batch is one GEMM over the merged
//! rows when a's and dz's batch and row axes merge; other broadcast operands
//! take one GEMM per batch matrix. Deterministic run to run.
//! Example: `auto g = loom::matmul_backward(x, w, dy, {.bias = true}); // g.da, g.db, g.dbias`
template <tensor_like A, tensor_like B, tensor_like DY>
[[nodiscard]] auto matmul_backward(const A& a, const B& b, const DY& dy, const matmul_backward_options& o = {}) {
  using DYV = decltype(detail::as_view(dy));
  return detail::linalg::backward_values(a, b, dy, static_cast<const DYV*>(nullptr), o);
}

//! matmul_backward with the activation's input z (shape of dy) for
//! `o.activation` (relu: z or the activation's output; gelu_tanh: z).
//! Example: `auto g = loom::matmul_backward(x, w1, dh, h, {.activation = loom::matmul_activation::relu, .bias = true});`
template <tensor_like A, tensor_like B, tensor_like DY, tensor_like Z>
[[nodiscard]] auto matmul_backward(const A& a, const B& b, const DY& dy, const Z& z, const matmul_backward_options& o) {
  const auto zv = detail::as_view(z);
  return detail::linalg::backward_values(a, b, dy, &zv, o);
}

//! matmul_backward into existing tensors or views: da, db, dbias (each may be
//! `loom::skip`), overwritten, or added to with `o.accumulate` (the GEMMs add
//! in their epilogue, C = D; dbias takes one more elementwise kernel).
//! `o.bias`, `o.input_gradient` and `o.weight_gradient` are not read: the
//! outputs given say what is computed. Shapes are checked first
//! (shape_error naming the operand); returns which kernels ran.
//! Example: `loom::matmul_backward_into(dx, dw, loom::skip, x, w, dy, {.accumulate = true});`
template <class DA, class DB, class DBias, tensor_like A, tensor_like B, tensor_like DY>
matmul_backward_info matmul_backward_into(DA&& da, DB&& db, DBias&& dbias, const A& a, const B& b, const DY& dy,
                                          const matmul_backward_options& o = {}) {
  using DYV = decltype(detail::as_view(dy));
  return detail::linalg::backward_into(da, db, dbias, a, b, dy, static_cast<const DYV*>(nullptr), o);
}

//! matmul_backward_into with the activation's input z for `o.activation`.
//! Example: `loom::matmul_backward_into(loom::skip, dw1, db1, x, w1, dh, h, {.activation = loom::matmul_activation::relu});`
template <class DA, class DB, class DBias, tensor_like A, tensor_like B, tensor_like DY, tensor_like Z>
matmul_backward_info matmul_backward_into(DA&& da, DB&& db, DBias&& dbias, const A& a, const B& b, const DY& dy,
                                          const Z& z, const matmul_backward_options& o) {
  const auto zv = detail::as_view(z);
  return detail::linalg::backward_into(da, db, dbias, a, b, dy, &zv, o);
}
}  // namespace loom
