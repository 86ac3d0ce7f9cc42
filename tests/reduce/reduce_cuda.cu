// SPDX-License-Identifier: Apache-2.0
// The [cuda] reduction tests: all of them in one file where the program is
// only compiled (no GPU), one part each in reduce_cuda_0/1/2.cu (LOOM_REDUCE_PART)
// where it is built to run, so the parts compile in parallel.
#define LOOM_TEST_SPACE loom::device
#define LOOM_TEST_TAG "[cuda]"
// Fewer types than the host test: each adds every reduction's CUB and block
// kernels to the compile time. The host test covers all seven. double is
// here for its own device paths: var/std of double has a 24-byte
// accumulator, too wide for CUB's pointer kernel (lift_items instead), and
// the 8-byte elements' vector widths.
#define LOOM_REDUCE_TYPES float, double, loom::half, std::int32_t, bool
#include "reduce_cases.inl"
