// SPDX-License-Identifier: Apache-2.0
// Part 0 of the [cuda] nn tests (two files compile side by side).
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
#define LOOM_NN_PART 0
#include "nn_cases.inl"
