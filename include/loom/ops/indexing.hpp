// SPDX-License-Identifier: Apache-2.0
#pragma once

// Indexing and joining in expressions: gather, index_select, embedding
// (expr/indexing.hpp), concat and stack (expr/concat.hpp), with the
// assignment that evaluates them; the embedding's backward is in
// nn/embedding.hpp.

#include "loom/core/index_fault.hpp"
#include "loom/exec/assign.hpp"
#include "loom/expr/concat.hpp"
#include "loom/expr/indexing.hpp"
#include "loom/ops/arithmetic.hpp"  // mostly used inside arithmetic: embedding(ids, table) * scale + pos
