// SPDX-License-Identifier: Apache-2.0
// The optimizer tests on the host executor.
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#include "optim_cases.inl"
