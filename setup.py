"""`pip install .` and `pip wheel .` (pyproject.toml): CMake builds libflashcheck.so and the flashcheck
CLI from this tree, `cmake --install` gives them relocatable RPATHs ($ORIGIN), and the wheel carries
them beside the Python package with every shared library they load that is not glibc's:

    flashcheck/lib/libflashcheck.so      RPATH $ORIGIN
    flashcheck/lib/libfmt.so.9 ...       what `ldd` resolves outside glibc (libfmt, libmpfr, libgmp, ...)
    flashcheck/bin/flashcheck            RPATH $ORIGIN/../lib (the `flashcheck` console script runs it)

So the wheel loads on any distribution with the same or a newer glibc. The CMake build folder is
build-pip/cmake (kept between runs). Environment:
    FLASHCHECK_BUILD_DIR=DIR     take libflashcheck.so and the CLI from an existing CMake build (both
                                 targets built there) instead of building: CI's main build, compiled once
    FLASHCHECK_CMAKE_ARGS="..."  extra arguments of the CMake configure (e.g. -DFLASHCHECK_CUDA=OFF)
    FLASHCHECK_JOBS=N            parallel build jobs (default: the CPU count)
"""
import os
import re
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 carries bdist_wheel; before, the wheel package does
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = os.path.join(ROOT, "build-pip")
# What every Linux with glibc provides: never bundled (the wheel's floor is the build's glibc), and
# the CUDA driver, which belongs to the machine.
SYSTEM = re.compile(r"^(linux-vdso|linux-gate|ld-linux[-\w.]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|"
                    r"libcuda)\.so")


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        found = re.search(r"project\(flashcheck VERSION ([0-9.]+)", f.read())
    if not found:
        raise RuntimeError("setup.py: no `project(flashcheck VERSION ...)` in CMakeLists.txt")
    return found.group(1)


def run(cmd):
    print("setup.py: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True)


def cmake_build():
    """The CMake build folder holding libflashcheck.so and the CLI: FLASHCHECK_BUILD_DIR's, or one made here."""
    given = os.environ.get("FLASHCHECK_BUILD_DIR")
    if given:
        given = os.path.abspath(given)
        if not os.path.isfile(os.path.join(given, "CMakeCache.txt")):
            raise RuntimeError("setup.py: FLASHCHECK_BUILD_DIR=%s is not a CMake build folder" % given)
        return given
    if shutil.which("cmake") is None:
        raise RuntimeError("setup.py: cmake not found; flashcheck's C++ core is built with CMake "
                           "(scripts/setup.sh build installs what it needs on Debian and Ubuntu)")
    build = os.path.join(BUILD_BASE, "cmake")
    configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DFLASHCHECK_PROGRAMS=OFF",
                 "-DFLASHCHECK_INSTALL_PYTHONDIR="]
    if shutil.which("ninja") and not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        configure += ["-G", "Ninja"]
    run(configure + shlex.split(os.environ.get("FLASHCHECK_CMAKE_ARGS", "")))
    jobs = os.environ.get("FLASHCHECK_JOBS") or str(os.cpu_count() or 1)
    run(["cmake", "--build", build, "--target", "flashcheck_capi", "flashcheck", "-j", jobs])
    return build


def needed(binary):
    """(soname, path) of every shared library `ldd` resolves for binary, glibc's left out."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (.*) \(0x", line)
        if not m or SYSTEM.match(m.group(1)):
            continue
        if m.group(2).strip() == "not found":
            raise RuntimeError("setup.py: %s needs %s, which is not found" % (binary, m.group(1)))
        libs.append((m.group(1), m.group(2).strip()))
    return libs


class BuildWithCMake(build_py):
    """build_py, then libflashcheck.so, the CLI and their libraries into the package."""

    def run(self):
        super().run()
        build = cmake_build()
        stage = os.path.join(BUILD_BASE, "stage")
        shutil.rmtree(stage, ignore_errors=True)
        # The install step rewrites the RPATHs to $ORIGIN (install/CMakeLists.txt); nothing is rebuilt.
        run(["cmake", "--install", build, "--prefix", stage])
        libdir = next(os.path.join(stage, d) for d in ("lib", "lib64")
                      if os.path.isfile(os.path.join(stage, d, "libflashcheck.so")))
        pkg = os.path.join(self.build_lib, "flashcheck")
        for sub in ("lib", "bin"):
            shutil.rmtree(os.path.join(pkg, sub), ignore_errors=True)
            os.makedirs(os.path.join(pkg, sub))
        lib = os.path.join(pkg, "lib", "libflashcheck.so")
        cli = os.path.join(pkg, "bin", "flashcheck")
        shutil.copy2(os.path.join(libdir, "libflashcheck.so"), lib)
        shutil.copy2(os.path.join(stage, "bin", "flashcheck"), cli)
        for soname, path in sorted(set(needed(lib) + needed(cli))):
            shutil.copy2(os.path.realpath(path), os.path.join(pkg, "lib", soname))
            print("setup.py: bundled %s (%s)" % (soname, os.path.realpath(path)), flush=True)


class PlatformWheel(bdist_wheel):
    """py3-none-linux_<arch>: native code, but no Python extension (ctypes), so any Python 3."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


os.makedirs(BUILD_BASE, exist_ok=True)
setup(
    version=cmake_version(),
    package_dir={"": "python"},
    packages=["flashcheck"],
    cmdclass={"build_py": BuildWithCMake, "bdist_wheel": PlatformWheel},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
    zip_safe=False,
)
