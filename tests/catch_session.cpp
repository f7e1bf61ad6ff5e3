// The Catch2 session both test mains run (tests/catch_main.cpp, tests/catch_main_gpu.cpp). With v2 this
// file compiles the Catch implementation, the heaviest translation unit of the suite: once per build.
#define CATCH_CONFIG_RUNNER
#include "tests/catch.hpp"

#if FC_CATCH2_MAJOR >= 3
#include <catch2/catch_session.hpp>
#endif

#include "tests/catch_session.hpp"

int fc_run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
