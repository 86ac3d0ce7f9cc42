// SPDX-License-Identifier: Apache-2.0
// Part 0 of the host grad tests (two files compile side by side).
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#define LOOM_GRAD_PART 0
#include "grad_cases.inl"
