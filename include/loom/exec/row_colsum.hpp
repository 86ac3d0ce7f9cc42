// SPDX-License-Identifier: Apache-2.0
#pragma once

// Row assignments that also sum columns (exec/rows/colsum.hpp).

#include "loom/exec/rows/colsum.hpp"
