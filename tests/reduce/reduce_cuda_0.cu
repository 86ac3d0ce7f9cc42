// SPDX-License-Identifier: Apache-2.0
// Part 0 of the [cuda] reduction tests (reduce_cuda.cu says why in parts).
#define LOOM_REDUCE_PART 0
#include "reduce_cuda.cu"
