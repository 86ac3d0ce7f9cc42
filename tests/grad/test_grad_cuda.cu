// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
#define LOOM_GRAD_ONE_LAYER_PER_TEST 1
#include "grad_cases.inl"
