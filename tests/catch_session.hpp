// The Catch2 session (tests/catch_session.cpp), for the test mains, which then need no Catch header.
#pragma once

int fc_run_catch_session(int argc, char** argv);
