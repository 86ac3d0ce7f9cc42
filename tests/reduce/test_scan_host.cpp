// SPDX-License-Identifier: Apache-2.0
#define LOOM_TEST_SPACE loom::host
#define LOOM_TEST_TAG ""
#define LOOM_SCAN_REPLAY 1
#include "scan_cases.inl"
