// SPDX-License-Identifier: Apache-2.0
#pragma once

// Row reductions inside expressions (expr/row_nodes.hpp) and the rows
// executor that runs them, one kernel per assignment (exec/rows/).

#include "loom/exec/assign.hpp"
#include "loom/exec/rows/run.hpp"
#include "loom/expr/row_nodes.hpp"
