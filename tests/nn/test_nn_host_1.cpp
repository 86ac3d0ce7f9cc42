// SPDX-License-Identifier: Apache-2.0
// Part 1 of the host nn tests (two files compile side by side).
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#define LOOM_NN_PART 1
#include "nn_cases.inl"
