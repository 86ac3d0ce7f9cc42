// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "rng_cases.inl"

#if LOOM_HAS_OPENMP
#include <omp.h>
#endif

TEST_CASE("philox4x32_10 matches Random123's published known-answer vectors", "[rng]") {
  // Random123's kat_vectors, philox4x32 with 10 rounds: counter, key, result.
  struct kat {
    loom::philox_words ctr;
    std::uint32_t k0, k1;
    loom::philox_words want;
  };
  const kat cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const kat& c : cases) {
    const loom::philox_words got = loom::philox4x32_10(c.ctr, c.k0, c.k1);
    for (int j = 0; j < 4; ++j) CHECK(got.w[j] == c.want.w[j]);
  }
}

TEST_CASE("uniform_from_bits is the high 24 bits times 2^-24", "[rng]") {
  CHECK(loom::uniform_from_bits(0) == 0.0f);
  CHECK(loom::uniform_from_bits(0xffffffffu) == 1.0f - 0x1p-24f);
  CHECK(loom::uniform_from_bits(0xffffffffu) < 1.0f);
  CHECK(loom::uniform_from_bits(0x000000ffu) == 0.0f);
  CHECK(loom::uniform_from_bits(0x00000100u) == 0x1p-24f);
  CHECK(loom::uniform_from_bits(0x80000000u) == 0.5f);
}

TEST_CASE("random values do not depend on the number of host threads", "[rng]") {
#if LOOM_HAS_OPENMP
  const int threads = omp_get_max_threads();
  const loom::shape<2> s{513, 257};  // above the host executor's threshold for threads
  std::mt19937_64 g(loom_test::seed_for("threads"));
  auto x = random_host<float, 2>(s, g);
  loom::host_tensor<float, 2> one(s), two(s), two_t({s[1], s[0]});
  omp_set_num_threads(1);
  one = loom::dropout(x, 0.25f, 11, 12) + loom::randn(13);
  omp_set_num_threads(2);
  two = loom::dropout(x, 0.25f, 11, 12) + loom::randn(13);
  two_t.t() = loom::dropout(x, 0.25f, 11, 12) + loom::randn(13);
  omp_set_num_threads(threads);
  loom::host_tensor<float, 2> back(s);
  back = two_t.t();
  check_exact(two, [&](std::uint64_t i) { return one.data()[i]; });
  check_exact(back, [&](std::uint64_t i) { return one.data()[i]; });
#else
  SUCCEED("no OpenMP: the host executor runs one thread");
#endif
}


TEST_CASE("the random leaf's vector loads give the values of single elements", "[rng][detail]") {
  const loom::shape<2> s{5, 37};
  loom::detail::bind_info info;
  const auto u = loom::detail::bind_for_read(loom::rand(3, 4), s, info);
  CHECK(info.linear);
  const auto z = loom::detail::bind_for_read(loom::randn(3, 4), s, info);
  const auto m = loom::detail::bind_for_read(loom::bernoulli(0.3f, 3, 4), s, info);
  const auto d = loom::detail::bind_for_read(loom::randn<double>(3, 4), s, info);
  loom_test::check_vector_forms<4>(u, s[0] * s[1], s[1]);
  loom_test::check_vector_forms<8>(u, s[0] * s[1], s[1]);
  loom_test::check_vector_forms<4>(z, s[0] * s[1], s[1]);
  loom_test::check_vector_forms<8>(z, s[0] * s[1], s[1]);
  loom_test::check_vector_forms<16>(m, s[0] * s[1], s[1]);
  loom_test::check_vector_forms<2>(d, s[0] * s[1], s[1]);
}

TEST_CASE("randperm does not depend on the number of host threads", "[rng][randperm]") {
#if LOOM_HAS_OPENMP
  const int threads = omp_get_max_threads();
  const loom::index_t n = 300007;  // above the host executor's threshold for threads
  omp_set_num_threads(1);
  const auto one = loom::randperm<loom::host>(n, 77, 3);
  omp_set_num_threads(2);
  const auto two = loom::randperm<loom::host>(n, 77, 3);
  omp_set_num_threads(threads);
  check_exact(two, [&](std::uint64_t i) { return one.data()[i]; });
#else
  SUCCEED("no OpenMP: the host executor runs one thread");
#endif
}
