// SPDX-License-Identifier: Apache-2.0
// Part 2 of the [cuda] reduction tests (reduce_cuda.cu says why in parts).
#define LOOM_REDUCE_PART 2
#include "reduce_cuda.cu"
