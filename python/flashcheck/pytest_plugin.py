"""pytest integration. With flashcheck installed the plugin loads by itself (an entry point); in a
source checkout add `pytest_plugins = ["flashcheck.pytest_plugin"]` to conftest.py. Then:

    def test_my_attention(flashcheck_check):
        flashcheck_check("mypkg.attention:kernel")     # every law; the report on failure

Options: --flashcheck-cases N, --flashcheck-seed S (default: a fixed seed, so CI is repeatable)."""
import pytest

import flashcheck


def pytest_addoption(parser):
    group = parser.getgroup("flashcheck")
    group.addoption("--flashcheck-cases", type=int, default=None, help="random cases per law (default 100)")
    group.addoption("--flashcheck-seed", type=int, default=1, help="RapidCheck seed (default 1)")


@pytest.fixture
def flashcheck_check(request):
    """Run flashcheck on a kernel; fail the test with the report (counterexamples, replay lines)."""
    config = request.config

    def run(kernel, **options):
        options.setdefault("cases", config.getoption("--flashcheck-cases"))
        options.setdefault("seed", config.getoption("--flashcheck-seed"))
        result = flashcheck.check(kernel, quiet=True, **options)
        if not result.ok:
            pytest.fail("flashcheck: a law failed\n" + result.report, pytrace=False)
        return result

    return run
