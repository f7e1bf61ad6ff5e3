# The bridge's own tests run from the source tree: the package from python/, the library from the build
# (FLASHCHECK_LIBRARY, set by ctest), the pytest plugin named here as a user's conftest.py would.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # python/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # py_kernels

pytest_plugins = ["flashcheck.pytest_plugin"]
