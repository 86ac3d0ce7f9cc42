// SPDX-License-Identifier: Apache-2.0
#pragma once

// The launch counters, the launch step and the host/device loops live in
// core/launch.hpp; this header forwards to it.
#include "loom/core/launch.hpp"
