// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reductions over any expression (sum, mean, amax, argmax, var, ...):
//   core/reduction_ops.hpp  the reduction operators and result types (below expr/)
//   reduce/plan.hpp    walk order, layouts and the device thread mapping
//   reduce/shares.hpp  each device thread's share of an axis reduction
//   reduce/host.hpp    the host executor
//   reduce/cuda.hpp    the CUDA executor: CUB calls and the axis kernels
//   reduce/api.hpp     the public functions
#include "loom/reduce/api.hpp"
