// SPDX-License-Identifier: Apache-2.0
// Part 1 of the [cuda] grad tests (two files compile side by side).
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
#define LOOM_GRAD_ONE_LAYER_PER_TEST 1
#define LOOM_GRAD_PART 1
#include "grad_cases.inl"
