// SPDX-License-Identifier: Apache-2.0
#pragma once

// Matrix products as expression nodes. `matmul(a, b)` is lazy; assignment
// recognizes it: a root of the form act(alpha * matmul(a, b) + beta * c + bias)
// is ONE cuBLASLt call with the rest in the GEMM's epilogue; any other
// expression around one matmul is the GEMM into the output followed by ONE
// fused elementwise kernel that reads it back (two launches, no temporary).
// The host executor runs the same plan with a blocked reference GEMM.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "loom/config.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/core/launch.hpp"
#include "loom/expr/expression.hpp"
#include "loom/linalg/cublas.hpp"
#include "loom/linalg/host_gemm.hpp"
#include "loom/ops/activations.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"

namespace loom {

//! Options of one matrix product.
//! Example: `y = matmul(x, w, {.allow_tf32 = true});`
struct matmul_options {
  //! float products may round their inputs to TF32 (10-bit mantissa) on Tensor
  //! Cores: several times faster, about 1e-3 relative error. Off by default, as
  //! in PyTorch. No effect on the host, on half/bf16 (always Tensor Cores, float
  //! accumulation) or on double.
  bool allow_tf32 = false;
};

//! The lazy product of two views: `[..., M, K] x [..., K, N] -> [..., M, N]`,
//! batch axes broadcast as in NumPy/torch.matmul. Not an elementwise node: the
//! assignment that contains it splits the work at it (see loom::matmul).
template <class T, std::size_t RA, std::size_t RB, class S>
struct matmul_node : detail::node_tag {
  using value_type = T;
  using space = S;
  static constexpr std::size_t rank = RA > RB ? RA : RB;
  view<const T, RA, S> a;
  view<const T, RB, S> b;
  matmul_options options;

  matmul_node(const view<const T, RA, S>& a_, const view<const T, RB, S>& b_, matmul_options o)
      : a(a_), b(b_), options(o) {}

  //! The result's shape; throws shape_error naming both operand shapes.
  shape<rank> extents() const {
    const auto& ea = a.extents();
    const auto& eb = b.extents();
    auto fail = [&](const std::string& why) {
      throw shape_error("loom: matmul of shapes " + shape_string(ea) + " and " + shape_string(eb) + ": " + why);
    };
    if (ea[RA - 1] != eb[RB - 2])
      fail("the inner extents differ (" + std::to_string(ea[RA - 1]) + " columns vs " + std::to_string(eb[RB - 2]) +
           " rows)");
    shape<rank> s{};
    for (std::size_t i = 0; i + 2 < rank; ++i) {
      const std::size_t back = rank - i;  // position counted from the end
      const index_t x = back <= RA ? ea[RA - back] : 1;
      const index_t y = back <= RB ? eb[RB - back] : 1;
      if (x != y && x != 1 && y != 1)
        fail("batch axis " + std::to_string(i) + " does not broadcast (" + std::to_string(x) + " vs " +
             std::to_string(y) + ")");
      s[i] = x == 1 ? y : x;
    }
    s[rank - 2] = ea[RA - 2];
    s[rank - 1] = eb[RB - 1];
    return s;
  }
};

//! Which way an assignment containing a matmul ran.
enum class matmul_path : std::uint8_t {
  none,                   //!< no matmul in the expression: the ordinary one-kernel assignment
  empty,                  //!< the output has no elements: nothing ran
  fused,                  //!< ONE GEMM call with alpha, beta C, row bias and relu/gelu(tanh) in its epilogue
  gemm_then_elementwise,  //!< the GEMM writes the output, then ONE fused elementwise kernel reads it back
  elementwise             //!< inner extent 0: the product is zero; ONE elementwise kernel
};

//! What an assignment containing a matmul does (loom::explain) or did
//! (loom::last_matmul): its path, the fused epilogue, the kernels it enqueues.
struct matmul_info {
  matmul_path path = matmul_path::none;
  matmul_activation activation = matmul_activation::none;  //!< fused activation
  bool bias = false;                                         //!< a row bias fused into the epilogue
  bool accumulate = false;                                   //!< beta * C fused into the epilogue
  double alpha = 1;                                          //!< the product's scale
  double beta = 0;                                           //!< C's scale when `accumulate`
  int launches = 0;  //!< kernels (cuBLASLt calls included) or host loops the assignment runs
  bool on_device = false;
};

//! A one-line description of `i`, e.g. "fused: gelu_tanh(alpha*A@B + bias), 1 launch".
inline std::string to_string(const matmul_info& i) {
  const char* act = i.activation == matmul_activation::relu        ? "relu"
                    : i.activation == matmul_activation::gelu_tanh ? "gelu_tanh"
                                                                   : "";
  const auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  std::string body = i.alpha != 1 ? num(i.alpha) + "*A@B" : std::string("A@B");
  if (i.accumulate) body += i.beta == 1 ? std::string(" + C") : " + " + num(i.beta) + "*C";
  if (i.bias) body += " + bias";
  if (*act) body = std::string(act) + "(" + body + ")";
  std::string p;
  switch (i.path) {
    case matmul_path::none: p = "no matmul: elementwise"; break;
    case matmul_path::empty: p = "empty"; break;
    case matmul_path::fused: p = "fused: " + body; break;
    case matmul_path::gemm_then_elementwise: p = "gemm then elementwise"; break;
    case matmul_path::elementwise: p = "inner extent 0: elementwise"; break;
  }
  return p + ", " + std::to_string(i.launches) + (i.launches == 1 ? " launch" : " launches") +
         (i.on_device ? " on the device" : " on the host");
}

//! The matrix product of two tensors or views, lazily: `[..., M, K] x
//! [..., K, N] -> [..., M, N]` with batch axes broadcast (torch.matmul for
//! rank >= 2; make a vector a matrix with unsqueeze). float, double, half and
//! bf16; half/bf16 accumulate in float. Transposed and strided views enter
//! cuBLASLt as layouts, never copied. Assignment decides the work:
//!  - `y = act(alpha * matmul(a, b) + beta * c + bias)` (every part optional;
//!    act is relu or gelu(..., approximate::tanh); bias a row of y's last
//!    extent, c laid out like y): one cuBLASLt call, the rest in its epilogue;
//!  - any other expression with one matmul: the GEMM into y, then one fused
//!    elementwise kernel (two launches, no temporary);
//!  loom::explain(y, e) tells which, before running; loom::last_matmul() after.
//! Throws shape_error naming both shapes when they do not match.
//! Example: `y = gelu(matmul(x, w) + b, approximate::tanh);`
template <tensor_like A, tensor_like B>
[[nodiscard]] auto matmul(const A& a, const B& b, matmul_options options = {}) {
  auto va = detail::as_view(a);
  auto vb = detail::as_view(b);
  using VA = decltype(va);
  using VB = decltype(vb);
  using T = typename VA::value_type;
  static_assert(VA::rank >= 2 && VB::rank >= 2,
                "loom: matmul needs operands of rank 2 or more; make a vector a matrix with .unsqueeze(0) or "
                ".unsqueeze(1)");
  static_assert(std::is_same_v<T, typename VB::value_type>,
                "loom: matmul needs operands of one element type; convert one first: "
                "loom::materialize(loom::cast<T>(x))");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> ||
                    std::is_same_v<T, bf16>,
                "loom: matmul supports float, double, half and bf16 operands");
  static_assert(std::is_same_v<typename VA::space, typename VB::space>,
                "loom: matmul of a host and a device tensor; copy one side first with loom::to_device(x) or "
                "loom::to_host(x)");
  using S = typename VA::space;
  matmul_node<T, VA::rank, VB::rank, S> n(view<const T, VA::rank, S>(va), view<const T, VB::rank, S>(vb), options);
  (void)n.extents();  // shape errors at the call, where the user wrote the product
  return n;
}

//! Operands that are expressions rather than tensors do not compile: cuBLASLt
//! reads memory.
template <operand A, operand B>
  requires(!(tensor_like<A> && tensor_like<B>))
auto matmul(const A&, const B&, matmul_options = {}) {
  static_assert(detail::always_false<A, B>,
                "loom: matmul operands must be tensors or views; evaluate an expression first: "
                "loom::matmul(loom::materialize(x * 2), w)");
}

namespace detail {
// A matmul node has no expression children: its operands are views that
// cuBLASLt (or the host GEMM) reads.
template <class T, std::size_t RA, std::size_t RB, class S>
struct children_of<matmul_node<T, RA, RB, S>> {
  using types = type_list<>;
  template <class...>
  using rebind = matmul_node<T, RA, RB, S>;
};
template <class N>
struct is_matmul : std::false_type {};
template <class T, std::size_t RA, std::size_t RB, class S>
struct is_matmul<matmul_node<T, RA, RB, S>> : std::true_type {};
template <class N>
struct broadcasts_matmul : std::false_type {};
template <class E, std::size_t R>
struct broadcasts_matmul<broadcast_node<E, R>> : std::bool_constant<tree_any_v<E, is_matmul>> {};

// How many matmul nodes a tree holds (0 for an operand that is not a node:
// a tensor or view), and whether one sits under a broadcast.
template <class N>
struct matmul_count : std::integral_constant<int, 0> {};
template <class N>
  requires is_node<N>
struct matmul_count<N> : std::integral_constant<int, static_cast<int>(tree_sum_v<N, is_matmul>)> {};
template <class N>
inline constexpr bool matmul_broadcast = tree_any_v<N, broadcasts_matmul>;
}  // namespace detail

//! Satisfied by expressions whose tree contains a matmul node.
template <class E>
concept contains_matmul = detail::matmul_count<std::remove_cvref_t<E>>::value > 0;

namespace detail {
template <class N>
const auto& find_matmul(const N& n) {
  return find_node<is_matmul>(n);
}

// The tree with its matmul node replaced by a leaf (the output, or a zero).
template <class L, class N>
auto replace_matmul(const N& n, const L& leaf) {
  return transform(n, [&](const auto& m) {
    if constexpr (is_matmul<std::remove_cvref_t<decltype(m)>>::value)
      return leaf;
    else
      return m;
  });
}

template <class C>
double scalar_value(const C& v) {
  if constexpr (std::is_same_v<C, half> || std::is_same_v<C, bf16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

// The epilogue form act(alpha * M + s0 * X0 + s1 * X1), matched on the node
// types; the addends X are leaves of the output's type, broadcast to its shape.
template <class O, std::size_t RO, class S>
struct epilogue_match {
  double alpha = 1;
  int count = 0;
  view<const O, RO, S> addend[2];
  double scale[2] = {1, 1};
  matmul_activation act = matmul_activation::none;
  shape<RO> ext;
};

template <class N, class M>
bool match_scaled(const N&, M&) {
  return false;
}
template <class T, std::size_t RA, std::size_t RB, class S, class M>
bool match_scaled(const matmul_node<T, RA, RB, S>&, M&) {
  return true;
}
template <class C, class T, std::size_t RA, std::size_t RB, class S, class M>
bool match_scaled(const map_node<fn::mul, scalar_node<C>, matmul_node<T, RA, RB, S>>& n, M& m) {
  m.alpha *= scalar_value(get<0>(n.children).value);
  return true;
}
template <class C, class T, std::size_t RA, std::size_t RB, class S, class M>
bool match_scaled(const map_node<fn::mul, matmul_node<T, RA, RB, S>, scalar_node<C>>& n, M& m) {
  m.alpha *= scalar_value(get<1>(n.children).value);
  return true;
}

template <class N, class M>
bool match_addend(const N&, M&, double) {
  return false;
}
template <class T, std::size_t R, class S, class O, std::size_t RO>
bool match_addend(const leaf_node<T, R, S>& l, epilogue_match<O, RO, S>& m, double s) {
  if constexpr (std::is_same_v<T, O> && R <= RO) {
    if (m.count == 2) return false;
    m.addend[m.count] = l.v.broadcast_to(m.ext);
    m.scale[m.count++] = s;
    return true;
  } else {
    return false;
  }
}
template <class C, class L, class M>
bool match_addend(const map_node<fn::mul, scalar_node<C>, L>& n, M& m, double s) {
  return match_addend(get<1>(n.children), m, s * scalar_value(get<0>(n.children).value));
}
template <class C, class L, class M>
bool match_addend(const map_node<fn::mul, L, scalar_node<C>>& n, M& m, double s) {
  return match_addend(get<0>(n.children), m, s * scalar_value(get<1>(n.children).value));
}

template <class N, class M>
bool match_sum(const N& n, M& m) {
  return match_scaled(n, m);
}
template <class A, class B, class M>
bool match_sum(const map_node<fn::add, A, B>& n, M& m) {
  if constexpr (matmul_count<A>::value > 0)
    return match_sum(get<0>(n.children), m) && match_addend(get<1>(n.children), m, 1.0);
  else
    return match_sum(get<1>(n.children), m) && match_addend(get<0>(n.children), m, 1.0);
}
template <class A, class B, class M>
bool match_sum(const map_node<fn::sub, A, B>& n, M& m) {
  if constexpr (matmul_count<A>::value > 0)
    return match_sum(get<0>(n.children), m) && match_addend(get<1>(n.children), m, -1.0);
  else
    return false;
}

template <class N, class M>
bool match_root(const N& n, M& m) {
  return match_sum(n, m);
}
template <class X, class M>
bool match_root(const map_node<fn::relu, X>& n, M& m) {
  m.act = matmul_activation::relu;
  return match_sum(get<0>(n.children), m);
}
template <class X, class M>
bool match_root(const map_node<fn::gelu, X>& n, M& m) {
  // cuBLASLt's GELU epilogue is the tanh form; exact GELU takes two kernels.
  if (!n.f.tanh_form) return false;
  m.act = matmul_activation::gelu_tanh;
  return match_sum(get<0>(n.children), m);
}

// The output restricted to the matmul's rank (the leading axes it drops have extent 1).
template <std::size_t R, class O, std::size_t RO, class S>
view<O, R, S> drop_leading(const view<O, RO, S>& v) {
  shape<R> e{}, s{};
  for (std::size_t i = 0; i != R; ++i) {
    e[i] = v.extent(RO - R + i);
    s[i] = v.stride(RO - R + i);
  }
  return view<O, R, S>(v.data(), e, s);
}

template <class A, std::size_t R, class S>
bool row_major_matrix(const view<A, R, S>& v) {
  const index_t r = v.extent(R - 2), c = v.extent(R - 1);
  return (c == 1 || v.stride(R - 1) == 1) && (r == 1 || v.stride(R - 2) >= c);
}

// Everything an assignment decided before running.
template <class O, std::size_t RO, class S>
struct matmul_plan {
  matmul_info info;
  view<const O, RO, S> c;     // fused C (null data: none)
  view<const O, RO, S> bias;  // fused row bias (null data: none)
};

template <class O, std::size_t RO, class S, class E>
matmul_plan<O, RO, S> plan_matmul(const view<O, RO, S>& out, const E& e) {
  using M = std::remove_cvref_t<decltype(find_matmul(e))>;
  using T = typename M::value_type;
  static_assert(matmul_count<E>::value == 1,
                "loom: an expression with more than one matmul; evaluate all but one first: "
                "auto t = loom::materialize(loom::matmul(a, b));");
  static_assert(!matmul_broadcast<E>, "loom: a matmul under broadcast_to(); evaluate it first with loom::materialize");
  static_assert(!std::is_const_v<O>, "loom: cannot assign to a view of const elements");
  static_assert(std::is_same_v<typename E::space, S>,
                "loom: the expression lives in another memory space than the output; copy it with "
                "loom::to_device(x) or loom::to_host(x)");
  static_assert(E::rank <= RO, "loom: the expression has a higher rank than the output it is assigned to");
  static_assert(std::is_same_v<O, T> || (std::is_same_v<O, float> && (std::is_same_v<T, half> ||
                                                                      std::is_same_v<T, bf16>)),
                "loom: a matmul writes its result straight into the output, so the output's element type must be "
                "the operands' (or float for half/bf16 operands); assign into such a tensor, or evaluate the "
                "product first with loom::materialize(loom::matmul(a, b))");
  const M& mm = find_matmul(e);
  constexpr std::size_t R = M::rank;

  // Shape errors of the product and of the elementwise part.
  check_assignable_shapes(out.extents(), out.strides(), e.extents());
  const shape<R> me = mm.extents();
  for (std::size_t d = 0; d != RO; ++d)
    if ((d + R < RO ? 1 : me[d + R - RO]) != out.extent(d))
      throw shape_error("loom: the matmul's result (shape " + shape_string(me) +
                        ") is broadcast to the output (shape " + shape_string(out.extents()) +
                        "), but it is written into the output directly; evaluate it first with loom::materialize");

  matmul_plan<O, RO, S> p;
  p.info.on_device = std::is_same_v<S, device>;
  if (out.size() == 0) {
    p.info.path = matmul_path::empty;
    return p;
  }
  if (may_overlap(mm.a, out) || may_overlap(mm.b, out))
    throw aliasing_error("loom: the output of a matmul (shape " + shape_string(out.extents()) +
                         ") overlaps one of its operands; evaluate into a new tensor");
  if (mm.a.extent(std::remove_cvref_t<decltype(mm.a)>::rank - 1) == 0) {
    p.info.path = matmul_path::elementwise;
    p.info.launches = 1;
    return p;
  }

  epilogue_match<O, RO, S> m;
  m.ext = out.extents();
  bool fused = match_root(e, m);
  view<const O, RO, S> c, bias;
  double beta = 0;
  for (int i = 0; fused && i != m.count; ++i) {
    const auto& v = m.addend[i];
    bool row = out.extent(RO - 1) == 1 || v.stride(RO - 1) == 1;
    for (std::size_t d = 0; d + 1 < RO; ++d) row = row && (v.extent(d) == 1 || v.stride(d) == 0);
    const bool disjoint = !may_overlap(v, out);
    // A row bias needs D row-major: cuBLASLt adds it per row of the column-major D^T, i.e. per column of D.
    if (m.scale[i] == 1 && !bias.data() && row && disjoint && row_major_matrix(out)) {
      bias = v;
      continue;
    }
    bool same_layout = true;
    for (std::size_t d = 0; d != RO; ++d) same_layout = same_layout && (out.extent(d) == 1 || v.stride(d) == out.stride(d));
    if (!c.data() && same_layout && (disjoint || same_index_map(v, out))) {
      c = v;
      beta = m.scale[i];
      continue;
    }
    fused = false;
  }
  // cuBLASLt's bias and activation epilogues are documented for the float
  // compute types; a double product keeps only alpha and beta in the call.
  if (std::is_same_v<T, double> && (bias.data() || m.act != matmul_activation::none)) fused = false;
  if (fused) {
    p.info.path = matmul_path::fused;
    p.info.activation = m.act;
    p.info.alpha = m.alpha;
    p.info.bias = bias.data() != nullptr;
    p.info.accumulate = c.data() != nullptr;
    p.info.beta = beta;
    p.info.launches = 1;
    p.c = c;
    p.bias = bias;
    return p;
  }
  // Two kernels: the GEMM overwrites the output before the elementwise pass reads anything.
  auto check = [&](const auto& v) {
    if (may_overlap(v.broadcast_to(out.extents()), out))
      throw aliasing_error("loom: the expression around the matmul reads the output (shape " +
                           shape_string(out.extents()) +
                           "), which the matrix product overwrites first; evaluate into a new tensor");
  };
  for_each_leaf(e, [&](const auto& leaf) { check(leaf.v); });
  p.info.path = matmul_path::gemm_then_elementwise;
  p.info.launches = 2;
  return p;
}

// One batch stride for axes [0, n) of a strided operand, when there is one.
inline bool uniform_batch_stride(const index_t* ext, const index_t* st, std::size_t n, index_t& stride) {
  stride = 0;
  bool have = false;
  index_t expect = 0;
  for (std::size_t d = n; d-- > 0;) {
    if (ext[d] == 1) continue;
    if (have && st[d] != expect) return false;
    if (!have) stride = st[d];
    have = true;
    expect = st[d] * ext[d];
  }
  return true;
}

template <class T>
constexpr cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>)
    return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>)
    return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, half>)
    return CUDA_R_16F;
  else
    return CUDA_R_16BF;
}

// The column-major cuBLASLt form of X^T for a row-major-indexed matrix X
// (r x c, strides sr, sc): X's memory read column-major is X^T when X is
// row-major (op N) and X when X is column-major (op T, giving X^T).
inline lt_matrix lt_transposed(const void* p, index_t r, index_t c, index_t sr, index_t sc, const char* name,
                               const std::string& shape_s, const std::string& strides_s) {
  lt_matrix m;
  m.p = p;
  if ((c == 1 || sc == 1) && (r == 1 || sr >= std::max<index_t>(c, 1))) {
    m.op = CUBLAS_OP_N;
    m.rows = static_cast<std::uint64_t>(c);
    m.cols = static_cast<std::uint64_t>(r);
    m.ld = r == 1 ? std::max<index_t>(c, 1) : sr;
  } else if ((r == 1 || sr == 1) && (c == 1 || sc >= std::max<index_t>(r, 1))) {
    m.op = CUBLAS_OP_T;
    m.rows = static_cast<std::uint64_t>(r);
    m.cols = static_cast<std::uint64_t>(c);
    m.ld = c == 1 ? std::max<index_t>(r, 1) : sc;
  } else {
    throw value_error(std::string("loom: matmul operand ") + name + " (shape " + shape_s + ", strides " + strides_s +
                      ") is not a layout cuBLASLt takes: one of its two matrix axes must have stride 1 and the other "
                      "a stride of at least the first's extent; copy it first with loom::contiguous(x)");
  }
  return m;
}

#if LOOM_CUDA_COMPILER
// D (rank R, batch axes [0, R-2)) = epilogue(A B) with one cublasLtMatmul.
// Row-major D is column-major D^T, and D^T = B^T A^T: so cuBLASLt's "A" is
// B's memory and its "B" is A's; the m x n column-major result is N x M.
// The bias epilogue adds bias[i] to row i of that column-major result, i.e.
// to column i of the row-major D: exactly a row bias of length N.
template <class T, class O, std::size_t R>
void device_gemm(view<const T, R, device> a, view<const T, R, device> b, view<O, R, device> d, const O* c,
                 const O* bias, double alpha, double beta, matmul_activation act, bool allow_tf32, stream_ref s) {
  if (!row_major_matrix(d)) {
    // A column-major output: compute D^T = B^T A^T instead, whose output is row-major.
    const auto at = a.transpose(-1, -2);
    a = b.transpose(-1, -2);
    b = at;
    d = d.transpose(-1, -2);
  }
  const index_t m = d.extent(R - 2), n = d.extent(R - 1), k = a.extent(R - 1);
  if (!row_major_matrix(d))
    throw value_error("loom: the output of a matmul (shape " + shape_string(d.extents()) + ", strides " +
                      shape_string(d.strides()) +
                      ") is not a layout cuBLASLt takes: one matrix axis must have stride 1; assign into a tensor");
  index_t batch = 1;
  for (std::size_t i = 0; i + 2 < R; ++i) batch *= d.extent(i);
  constexpr index_t int_max = std::numeric_limits<std::int32_t>::max();
  if (m > int_max || n > int_max || k > int_max || batch > int_max)
    throw value_error("loom: matmul extents (batch " + std::to_string(batch) + ", m " + std::to_string(m) + ", n " +
                      std::to_string(n) + ", k " + std::to_string(k) + ") exceed cuBLASLt's 32-bit limits; split it");
  lt_call call;
  call.device = s.device();
  call.stream = s.get();
  call.ab_type = cuda_type<T>();
  call.cd_type = cuda_type<O>();
  if constexpr (std::is_same_v<T, double>) {
    call.compute = CUBLAS_COMPUTE_64F;
    call.scale_type = CUDA_R_64F;
  } else {
    call.compute = std::is_same_v<T, float> && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    call.scale_type = CUDA_R_32F;
  }
  call.a = lt_transposed(b.data(), k, n, b.stride(R - 2), b.stride(R - 1), "b", shape_string(b.extents()),
                         shape_string(b.strides()));
  call.b = lt_transposed(a.data(), m, k, a.stride(R - 2), a.stride(R - 1), "a", shape_string(a.extents()),
                         shape_string(a.strides()));
  call.m = static_cast<std::uint64_t>(n);
  call.n = static_cast<std::uint64_t>(m);
  call.k = static_cast<std::uint64_t>(k);
  call.ldd = m == 1 ? std::max<index_t>(n, 1) : d.stride(R - 2);
  call.batch = static_cast<std::int32_t>(batch);
  const auto batch_stride = [&](const auto& v, const char* name) {
    index_t st = 0;
    if (!uniform_batch_stride(d.extents().data(), v.strides().data(), R - 2, st))
      throw value_error(std::string("loom: the batch axes of matmul operand ") + name + " (shape " +
                        shape_string(v.extents()) + ", strides " + shape_string(v.strides()) +
                        " after broadcasting) have no single batch stride, which cuBLASLt needs; copy it first "
                        "with loom::contiguous(x) (a broadcast operand: loom::contiguous(x.broadcast_to(shape)))");
    return st;
  };
  call.b.batch_stride = batch_stride(a, "a");
  call.a.batch_stride = batch_stride(b, "b");
  call.d_batch_stride = batch_stride(d, "out");
  call.d = d.data();
  call.c = c;
  call.alpha = alpha;
  call.beta = c ? beta : 0.0;
  call.bias = bias;
  if (act == matmul_activation::relu)
    call.epilogue = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (act == matmul_activation::gelu_tanh)
    call.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  else
    call.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  lt_matmul(call);
}
#endif

inline matmul_info& last_matmul_slot() {
  thread_local matmul_info info;
  return info;
}

// The GEMM of the plan: A and B broadcast to the output's batch shape, D the output at the product's rank.
template <class M, class O, std::size_t R, class S>
void run_gemm(const M& mm, const view<O, R, S>& d, const view<const O, R, S>& c, const view<const O, R, S>& bias,
              double alpha, double beta, matmul_activation act) {
  using T = typename M::value_type;
  shape<R> ea = d.extents(), eb = d.extents();
  ea[R - 1] = mm.a.extent(std::remove_cvref_t<decltype(mm.a)>::rank - 1);
  eb[R - 2] = ea[R - 1];
  const view<const T, R, S> a = mm.a.broadcast_to(ea);
  const view<const T, R, S> b = mm.b.broadcast_to(eb);
  if constexpr (std::is_same_v<S, host>) {
    host_gemm<T, O, R>(a, b, d, gemm_epilogue<O, R>{alpha, beta, c, bias, act});
  } else {
#if LOOM_CUDA_COMPILER
    device_gemm<T, O, R>(a, b, d, c.data(), bias.data(), alpha, beta, act, mm.options.allow_tf32, current_stream());
#endif
  }
}

template <class O, std::size_t RO, class S, class E>
eval_info matmul_assign(const view<O, RO, S>& out, const E& e) {
  require_cuda_compiler_for<S>();
  using M = std::remove_cvref_t<decltype(find_matmul(e))>;
  constexpr std::size_t R = M::rank;
  const matmul_plan<O, RO, S> p = plan_matmul(out, e);
  const M& mm = find_matmul(e);
  const view<O, R, S> d = drop_leading<R>(out);
  eval_info info;
  info.on_device = p.info.on_device;
  switch (p.info.path) {
    case matmul_path::fused:
      run_gemm(mm, d, drop_leading<R>(p.c), drop_leading<R>(p.bias), p.info.alpha, p.info.beta, p.info.activation);
      last_eval_slot() = info;  // no elementwise pass ran
      break;
    case matmul_path::gemm_then_elementwise:
      run_gemm(mm, d, view<const O, R, S>{}, view<const O, R, S>{}, 1.0, 0.0, matmul_activation::none);
      info = assign_impl(out, replace_matmul(e, leaf_node<O, R, S>(view<const O, R, S>(d))));
      break;
    case matmul_path::elementwise: {
      // The product over an empty inner axis is zero: a stride-0 view of one zero.
      const shape<R> zero_strides{};
      if constexpr (std::is_same_v<S, host>) {
        static const O zero = O(0.0f);
        info = assign_impl(out, replace_matmul(e, leaf_node<O, R, S>(view<const O, R, S>(&zero, d.extents(), zero_strides))));
      } else {
        const stream_ref s = current_stream();
        const scratch<device> z(sizeof(O), s);
        LOOM_CUDA_CHECK(cudaMemsetAsync(z.p, 0, sizeof(O), s.get()));
        info = assign_impl(out, replace_matmul(e, leaf_node<O, R, S>(view<const O, R, S>(static_cast<const O*>(z.p),
                                                                                          d.extents(), zero_strides))));
      }
      break;
    }
    case matmul_path::empty:
    case matmul_path::none:
      last_eval_slot() = info;
      break;
  }
  last_matmul_slot() = p.info;
  return info;
}
}  // namespace detail

//! Evaluates an expression containing a matmul into `out` (chosen over the
//! elementwise loom::assign for such expressions; `y = expr` calls it). One
//! GEMM call when the expression is act(alpha * matmul + beta * c + bias),
//! else the GEMM into `out` and one fused elementwise kernel; see loom::matmul.
//! Returns the elementwise pass's eval_info (path `empty` when none ran);
//! loom::last_matmul() tells the matmul path.
//! Example: `loom::assign(y, relu(matmul(x, w) + b));`
template <tensor_like Out, operand E>
  requires contains_matmul<E>
eval_info assign(Out&& out, const E& e) {
  return detail::matmul_assign(detail::as_view(out), e);
}

//! What `out = e` would run, without running it: the matmul path, the fused
//! epilogue and the number of launches. Throws the errors the assignment would
//! (shapes, aliasing); cuBLASLt layout errors surface when it runs. For
//! expressions without a matmul: path `none`, one launch (zero when empty).
//! Example: `assert(loom::explain(y, gelu(matmul(x, w) + b, approximate::tanh)).launches == 1);`
template <tensor_like Out, operand E>
matmul_info explain(Out&& out, const E& e) {
  const auto v = detail::as_view(out);
  if constexpr (contains_matmul<E>) {
    return detail::plan_matmul(v, e).info;
  } else {
    matmul_info i;
    i.on_device = std::is_same_v<typename decltype(v)::space, device>;
    i.launches = v.size() ? 1 : 0;
    return i;
  }
}

//! What the calling thread's last assignment containing a matmul did.
//! Example: `y = tanh(matmul(x, w)); assert(loom::last_matmul().path == loom::matmul_path::gemm_then_elementwise);`
inline matmul_info last_matmul() { return detail::last_matmul_slot(); }
}  // namespace loom
