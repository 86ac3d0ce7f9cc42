// SPDX-License-Identifier: Apache-2.0
// Part 2 of the host reduction tests (three files compile in parallel).
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#define LOOM_REDUCE_TYPES float, double, loom::half, loom::bf16, std::int32_t, std::int8_t, bool
#define LOOM_REDUCE_PART 2
#define LOOM_REDUCE_REPLAY 1
#include "reduce_cases.inl"
