// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#define LOOM_GRAD_PART 1
#define LOOM_GRAD_PART_NAME "1"
#include "grad_cases.inl"
