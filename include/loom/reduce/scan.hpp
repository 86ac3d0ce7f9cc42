// SPDX-License-Identifier: Apache-2.0
#pragma once

// Scans along one axis of any expression (cumsum, cumprod, cummax, cummin):
//   reduce/scan/sink.hpp      where the results go; exclusive from inclusive
//   reduce/scan/parts.hpp     the per-thread parts of the warp and cross-row kernels
//   reduce/scan/tiles.hpp     tiles scanned by cub::BlockScan, lane moves
//   reduce/scan/lookback.hpp  the look-back of the single-pass scans
//   reduce/scan/host.hpp      the host executor
//   reduce/scan/cuda.hpp      the CUDA executor: kernels and their choice
//   reduce/scan/api.hpp       the public functions
// The reductions come with it.
#include "loom/reduce/api.hpp"
#include "loom/reduce/scan/api.hpp"
