// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
#include "matmul_backward_cases.inl"
