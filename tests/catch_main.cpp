// Catch2 main for CPU tests (v2 and v3).
#define CATCH_CONFIG_RUNNER  // v2: this file compiles the Catch implementation
#include "tests/catch.hpp"

#if FC_CATCH2_MAJOR >= 3
#include <catch2/catch_session.hpp>
#endif

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
