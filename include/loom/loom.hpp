// SPDX-License-Identifier: Apache-2.0
#pragma once

//! The umbrella header: everything loom offers.
#include "loom/config.hpp"
#include "loom/core/device.hpp"
#include "loom/core/dtype.hpp"
#include "loom/core/env.hpp"
#include "loom/core/error.hpp"
#include "loom/core/shape.hpp"
#include "loom/core/space.hpp"
#include "loom/core/stream.hpp"
#include "loom/exec/assign.hpp"
#include "loom/exec/launch.hpp"
#include "loom/expr/expression.hpp"
#include "loom/expr/promote.hpp"
#include "loom/memory/memory.hpp"
#include "loom/ops/activations.hpp"
#include "loom/ops/arithmetic.hpp"
#include "loom/ops/compare.hpp"
#include "loom/ops/math.hpp"
#include "loom/tensor/copy.hpp"
#include "loom/tensor/tensor.hpp"
#include "loom/tensor/view.hpp"
