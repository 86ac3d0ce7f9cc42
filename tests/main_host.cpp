// SPDX-License-Identifier: Apache-2.0
// Catch2 main for the host test programs.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
