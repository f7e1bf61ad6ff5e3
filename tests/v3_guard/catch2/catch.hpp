// Placed first on the include path of a Catch2 v3 build, where the system's v2 header may still be
// installed: a test that includes <catch2/catch.hpp> directly would register its TEST_CASEs with
// v2's registry, which v3's runner never sees, and they would silently not run.
#error "include \"tests/catch.hpp\" (Catch2 v2 and v3), not <catch2/catch.hpp>"
