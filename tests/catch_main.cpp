// Catch2 main for CPU tests (v2 and v3).
#include "tests/catch_session.hpp"

int main(int argc, char** argv) { return fc_run_catch_session(argc, argv); }
