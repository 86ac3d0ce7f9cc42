// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#define LOOM_RANDOM_PART 2
#include "elementwise_cases.inl"
