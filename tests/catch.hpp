// The one header a test includes for Catch2, whichever major version the build found: v2 (Debian
// 12's `catch2`, one header) or v3 (Ubuntu 24.04, Debian 13: split headers and a compiled library).
// FC_CATCH2_MAJOR comes from tests/CMakeLists.txt (target fc_catch). RapidCheck's `rc::prop` is in
// tests/rapidcheck_catch.hpp.
#pragma once

#ifndef FC_CATCH2_MAJOR
#error "FC_CATCH2_MAJOR is not defined: link the test against fc_catch (tests/CMakeLists.txt)"
#endif

#if FC_CATCH2_MAJOR == 2
#include <catch2/catch.hpp>
#else
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

using Catch::Approx;  // v2 exports Approx globally
#endif
