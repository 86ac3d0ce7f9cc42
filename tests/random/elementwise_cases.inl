// SPDX-License-Identifier: Apache-2.0
// Random elementwise expressions: a fixed set of tree shapes, each written
// once as a generic function that builds a loom expression from loom views
// and a reference value from reference values; every tree runs over several
// dtype combinations, on random shapes and layouts (random_support.hpp).
// The including file defines LOOM_TEST_SPACE, LOOM_TEST_TAG and
// LOOM_RANDOM_PART (0-3: which dtype combinations it instantiates, so the
// cases compile in parallel).
#include <tuple>

#include "random_support.hpp"

using loom::half;
using loom::bf16;
using loom_random::index_t;

namespace {
using space_t = LOOM_TEST_SPACE;
constexpr bool on_device = std::is_same_v<space_t, loom::device>;

// The tree shapes. Names are unqualified so that argument-dependent lookup
// picks loom's functions for views and the reference's for reference values.
#define LOOM_TREE(id, n, text, ...)                                       \
  struct id {                                                             \
    static constexpr const char* name = text;                             \
    static constexpr int arity = n;                                       \
    template <class A, class B, class C, class D>                         \
    auto operator()(const A& a, const B& b, const C& c, const D& d) const { \
      (void)a, (void)b, (void)c, (void)d;                                 \
      return __VA_ARGS__;                                                 \
    }                                                                     \
  };
LOOM_TREE(t_add, 2, "a + b", a + b)
LOOM_TREE(t_fma, 3, "a * b - c", a * b - c)
LOOM_TREE(t_where_cmp, 3, "where(a > b, a * 2, c - 1)", where(a > b, a * 2, c - 1))
LOOM_TREE(t_exp_abs, 2, "exp(-abs(a)) * b + 1.5f", exp(-abs(a)) * b + 1.5f)
LOOM_TREE(t_sqrt_div, 2, "sqrt(abs(a) + 1) / (abs(b) + 0.5f)", sqrt(abs(a) + 1) / (abs(b) + 0.5f))
LOOM_TREE(t_tanh_sigmoid, 4, "tanh(a * b + c) * sigmoid(d)", tanh(a * b + c) * sigmoid(d))
LOOM_TREE(t_clamp_minmax, 4, "clamp(a, -1.0f, 1.0f) + maximum(b, c) - minimum(c, d)",
          clamp(a, -1.0f, 1.0f) + maximum(b, c) - minimum(c, d))
LOOM_TREE(t_casts, 3, "cast<float>(a) * 0.5 + cast<half>(b) - cast<int32_t>(c * 3)",
          cast<float>(a) * 0.5 + cast<half>(b) - cast<std::int32_t>(c * 3))
LOOM_TREE(t_rounding, 3, "floor(a * 1.7f) + ceil(b) - round(c * 0.3f)", floor(a * 1.7f) + ceil(b) - round(c * 0.3f))
LOOM_TREE(t_logic, 4, "(a > 0 && b < 1) || !(c != d)", (a > 0 && b < 1) || !(c != d))
LOOM_TREE(t_pow_log, 2, "pow(abs(a) + 0.5f, 2) + log(abs(b) + 1)", pow(abs(a) + 0.5f, 2) + log(abs(b) + 1))
LOOM_TREE(t_where_trig, 4, "where(a >= b, sin(a), cos(b)) * where(c < 0, d, 2)",
          where(a >= b, sin(a), cos(b)) * where(c < 0, d, 2))
LOOM_TREE(t_deep, 4, "((a + b) * (c - d) + a * d) / (1 + abs(b * c))", ((a + b) * (c - d) + a * d) / (1 + abs(b * c)))
LOOM_TREE(t_mod, 2, "a % (abs(b) + 1)", a % (abs(b) + 1))
LOOM_TREE(t_activations, 4, "gelu(a) + silu(b) - relu(c) * erf(d)", gelu(a) + silu(b) - relu(c) * erf(d))
LOOM_TREE(t_sign_log1p, 4, "sign(a - b) * log1p(abs(c)) + exp2(d * 0.25f)", sign(a - b) * log1p(abs(c)) + exp2(d * 0.25f))
LOOM_TREE(t_chain, 4, "-(a - (b - (c - (d - a)))) * 3 + 0.25", -(a - (b - (c - (d - a)))) * 3 + 0.25)
LOOM_TREE(t_unary_chain, 2, "exp(tanh(sin(cos(a)))) + b", exp(tanh(sin(cos(a)))) + b)
LOOM_TREE(t_where_any, 3, "where(a, b, c)", where(a, b, c))
LOOM_TREE(t_smooth, 3, "leaky_relu(a, 0.2) * mish(b) + softplus(c)", leaky_relu(a, 0.2) * mish(b) + softplus(c))
LOOM_TREE(t_bool_cast, 3, "cast<bool>(a) && (b >= c)", cast<bool>(a) && (b >= c))
#undef LOOM_TREE

using trees = std::tuple<t_add, t_fma, t_where_cmp, t_exp_abs, t_sqrt_div, t_tanh_sigmoid, t_clamp_minmax, t_casts,
                         t_rounding, t_logic, t_pow_log, t_where_trig, t_deep, t_mod, t_activations, t_sign_log1p,
                         t_chain, t_unary_chain, t_where_any, t_smooth, t_bool_cast>;

// Dtype combinations: leaf i of a tree has type t<i>.
template <int Id, class T0, class T1, class T2, class T3>
struct combo {
  static constexpr int id = Id;
  using t0 = T0;
  using t1 = T1;
  using t2 = T2;
  using t3 = T3;
};
#if LOOM_RANDOM_PART == 0
using combos = std::tuple<combo<0, float, float, float, float>, combo<4, std::int32_t, std::int32_t, std::int32_t, std::int32_t>>;
#define LOOM_RANDOM_PART_NAME "float; int32"
#elif LOOM_RANDOM_PART == 1
using combos = std::tuple<combo<1, double, double, double, double>, combo<5, half, float, bf16, std::int32_t>>;
#define LOOM_RANDOM_PART_NAME "double; half, float, bf16, int32"
#elif LOOM_RANDOM_PART == 2
using combos = std::tuple<combo<2, half, half, half, half>, combo<6, double, bf16, std::int8_t, std::uint8_t>>;
#define LOOM_RANDOM_PART_NAME "half; double, bf16, int8, uint8"
#else
using combos = std::tuple<combo<3, bf16, bf16, bf16, bf16>, combo<7, half, std::int32_t, std::int64_t, bf16>>;
#define LOOM_RANDOM_PART_NAME "bf16; half, int32, int64, bf16"
#endif

template <class T>
std::string type_name() {
  return loom_random::ref::kind_name(loom_random::ref::kind_of<T>());
}

template <class Tree, std::size_t R, class Combo>
void run_case(std::uint64_t seed, long case_no, loom_random::stats& st) {
  using namespace loom_random;
  using T0 = typename Combo::t0;
  using T1 = typename Combo::t1;
  using T2 = typename Combo::t2;
  using T3 = typename Combo::t3;
  constexpr std::size_t R1 = R > 1 ? R - 1 : 1, R3 = R > 2 ? R - 2 : 1;
  rng r(seed);
  const auto out_ext = random_extents(r, R, 40000);
  auto leaf_logical = [&](std::size_t rank) {
    std::vector<index_t> l(rank);
    for (std::size_t a = 0; a < rank; ++a) {
      const index_t e = out_ext[R - rank + a];
      l[a] = e != 1 && r.chance(0.2) ? 1 : e;
    }
    return l;
  };
  operand<T0, R, space_t> a;
  operand<T1, R1, space_t> b;
  operand<T2, R, space_t> c;
  operand<T3, R3, space_t> d;
  std::string err = a.build(r, random_layout(r, leaf_logical(R), true), out_ext, true);
  if (err.empty()) err = b.build(r, random_layout(r, leaf_logical(R1), true), out_ext, true);
  if (err.empty()) err = c.build(r, random_layout(r, leaf_logical(R), true), out_ext, true);
  if (err.empty()) err = d.build(r, random_layout(r, leaf_logical(R3), true), out_ext, true);

  const auto expr = Tree{}(a.v, b.v, c.v, d.v);
  using O = typename loom::detail::node_t<decltype(expr)>::value_type;
  const bool in_place = std::is_same_v<O, T0> && a.lay.logical == out_ext && !a.lay.expand && r.chance(0.15);
  operand<O, R, space_t> out;
  if (!in_place && err.empty()) err = out.build(r, random_layout(r, out_ext, false), out_ext, false);

  const int ar = Tree::arity;
  auto describe = [&] {
    std::ostringstream s;
    s << "LOOM_RANDOM_SEED=" << base_seed() << " LOOM_RANDOM_CASE=" << case_no << " (" << (on_device ? "device" : "host")
      << ", part " << LOOM_RANDOM_PART << "): " << Tree::name << " with a: " << type_name<T0>() << " rank " << R
      << ", b: " << type_name<T1>() << " rank " << R1 << ", c: " << type_name<T2>() << " rank " << R
      << ", d: " << type_name<T3>() << " rank " << R3 << "; output " << type_name<O>() << " " << str(out_ext)
      << (in_place ? " in place of a" : "") << "\n  a: " << a.lay.describe();
    if (ar > 1) s << "\n  b: " << b.lay.describe();
    if (ar > 2) s << "\n  c: " << c.lay.describe();
    if (ar > 3) s << "\n  d: " << d.lay.describe();
    if (!in_place) s << "\n  out: " << out.lay.describe();
    s << "\n  ";
    return s.str();
  };
  if (!err.empty()) {
    FAIL_CHECK(describe() << err);
    return;
  }
  // The documented promotion rules, applied by the reference, give the same dtype.
  const ref::kind want_kind = Tree{}(ref::leaf(T0(1)), ref::leaf(T1(1)), ref::leaf(T2(1)), ref::leaf(T3(1))).k;
  if (want_kind != ref::kind_of<O>()) {
    FAIL_CHECK(describe() << "loom's result dtype is " << type_name<O>() << ", the documented promotion gives "
                          << ref::kind_name(want_kind));
    return;
  }
  // Runs and checks the assignment into `target` (the output, or `a` in place).
  auto check = [&](auto& target) {
    index_t n = 1;
    for (auto e : out_ext) n *= e;

    // The path the planner must choose, from the test's own layout arithmetic:
    // contiguous when the output is dense and every operand dense or periodic
    // (repeating a dense block); on the device also 16-byte aligned, with every
    // period a multiple of the vector width (16 bytes of the narrowest type).
    std::size_t narrowest = std::min(sizeof(O), sizeof(T0));
    if (ar > 1) narrowest = std::min(narrowest, sizeof(T1));
    if (ar > 2) narrowest = std::min(narrowest, sizeof(T2));
    if (ar > 3) narrowest = std::min(narrowest, sizeof(T3));
    const auto width = static_cast<index_t>(16 / narrowest);
    auto linear = [&](const auto& op) {
      const index_t p = op.predicted_period(out_ext);
      return p == 0 || (p > 0 && (!on_device || p % width == 0));
    };
    bool all_dense = dense(out_ext, target.lay.lstride), all_aligned = target.predicted_aligned();
    all_dense = all_dense && linear(a) && (ar < 2 || linear(b)) && (ar < 3 || linear(c)) && (ar < 4 || linear(d));
    all_aligned = all_aligned && a.predicted_aligned() && (ar < 2 || b.predicted_aligned()) &&
                  (ar < 3 || c.predicted_aligned()) && (ar < 4 || d.predicted_aligned());
    const loom::eval_path want_path = n == 0 ? loom::eval_path::empty
                                      : all_dense && (!on_device || all_aligned) ? loom::eval_path::contiguous
                                                                                   : loom::eval_path::general;

    const auto before = launches_in_space<space_t>();
    loom::eval_info info;
    try {
      info = loom::assign(target.v, expr);
    } catch (const std::exception& ex) {
      FAIL_CHECK(describe() << "loom threw: " << ex.what());
      return;
    }
    const auto launched = launches_in_space<space_t>() - before;
    ++st.cases;
    st.in_place += in_place;
    count_path(st, info.path);
    if (launched != (n > 0 ? 1u : 0u) || info.path != want_path) {
      FAIL_CHECK(describe() << launched << " launches on the " << path_name(info.path) << " path; want "
                            << (n > 0 ? 1 : 0) << " on the " << path_name(want_path) << " path");
      return;
    }

    const auto after = loom::to_host(target.mem);
    std::vector<char> written(static_cast<std::size_t>(after.size()), 0);
    std::array<index_t, 8> o{};
    for (index_t i = 0; i < n; ++i) {
      unravel(i, out_ext, o.data());
      const ref::rv want = Tree{}(ref::leaf(a.at_output(o.data(), R)), ref::leaf(b.at_output(o.data(), R)),
                                  ref::leaf(c.at_output(o.data(), R)), ref::leaf(d.at_output(o.data(), R)));
      const index_t off = target.lay.offset(o.data());
      written[static_cast<std::size_t>(off)] = 1;
      if (want.dc) {
        ++st.skipped;
        continue;
      }
      ++st.elements;
      const std::string why = mismatch(after.data()[off], want);
      if (!why.empty()) {
        std::ostringstream s;
        s.precision(17);
        s << "output element " << str(std::vector<index_t>(o.begin(), o.begin() + R)) << ": " << why << "; inputs a "
          << loom_test::as_double(a.at_output(o.data(), R));
        if (ar > 1) s << ", b " << loom_test::as_double(b.at_output(o.data(), R));
        if (ar > 2) s << ", c " << loom_test::as_double(c.at_output(o.data(), R));
        if (ar > 3) s << ", d " << loom_test::as_double(d.at_output(o.data(), R));
        FAIL_CHECK(describe() << s.str());
        return;
      }
    }
    for (index_t i = 0; i < after.size(); ++i)
      if (!written[static_cast<std::size_t>(i)] && !loom_test::same_bits(after.data()[i], target.host.data()[i])) {
        FAIL_CHECK(describe() << "element " << i << " of the output's buffer lies outside the output view but was written");
        return;
      }
  };
  if constexpr (std::is_same_v<O, T0>) {
    if (in_place) {
      check(a);
      return;
    }
  }
  check(out);
}

struct entry {
  void (*run)(std::uint64_t, long, loom_random::stats&);
};

template <class Combo, std::size_t... I>
void add_entries(std::vector<entry>& table, std::index_sequence<I...>) {
  // Output rank 1 to 4, rotating with the tree and the combination.
  (table.push_back(entry{&run_case<std::tuple_element_t<I, trees>, 1 + (I + Combo::id) % 4, Combo>}), ...);
}
template <std::size_t... C>
std::vector<entry> make_table(std::index_sequence<C...>) {
  std::vector<entry> table;
  (add_entries<std::tuple_element_t<C, combos>>(table, std::make_index_sequence<std::tuple_size_v<trees>>{}), ...);
  return table;
}
}  // namespace

TEST_CASE("random elementwise expressions match the reference interpreter (" LOOM_RANDOM_PART_NAME ")",
          "[random]" LOOM_TEST_TAG) {
  const auto table = make_table(std::make_index_sequence<std::tuple_size_v<combos>>{});
  const long n = loom_random::case_count(2000), only = loom_random::only_case();
  loom_random::stats st;
  for (long k = 0; k < n; ++k) {
    if (only >= 0 && k != only) continue;
    const std::uint64_t seed = loom_random::mix(loom_random::base_seed(), static_cast<std::uint64_t>(k) * 4 + LOOM_RANDOM_PART);
    table[static_cast<std::size_t>(k) % table.size()].run(seed, k, st);
  }
  st.print(on_device ? "elementwise [cuda] part " LOOM_RANDOM_PART_NAME : "elementwise part " LOOM_RANDOM_PART_NAME);
  CHECK(st.cases == (only >= 0 ? 1 : n));
}
