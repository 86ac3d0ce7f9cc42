// SPDX-License-Identifier: Apache-2.0
// Part 1 of the [cuda] reduction tests (reduce_cuda.cu says why in parts).
#define LOOM_REDUCE_PART 1
#include "reduce_cuda.cu"
