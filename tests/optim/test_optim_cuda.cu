// SPDX-License-Identifier: Apache-2.0
// The optimizer tests on the device ([cuda]; skipped without a GPU).
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
#include "optim_cases.inl"
