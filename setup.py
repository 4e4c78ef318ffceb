"""Build dp: the Cython hot paths are part of the build, never optional.

    python -m pip install -e .

A failed Cython build is an error: there is no pure-Python fallback to hide it.
"""
import os
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from Cython.Build import cythonize

PACKAGES = ("kernelsim", "dpcore", "nic_drivers", "protocols", "libdp")
# Every .pyx of the packages is an extension: a hot path is Cython or it is not.
EXTENSIONS = sorted(str(p.with_suffix("")).replace("/", ".")
                    for pkg in PACKAGES for p in Path(pkg).rglob("*.pyx"))

# DP_SANITIZE=address builds every extension with AddressSanitizer, so that an access
# past a buffer fails loudly instead of passing silently (CI runs the receive-path fuzz
# tests under it: see .ci/run). Run with LD_PRELOAD=$(gcc -print-file-name=libasan.so).
# -O0: ASan instruments every access at any level, and gcc compiles Cython's large C files
# about 4x faster at -O0 than at -O1 (2 s against 8 s for dpcore/_services.c), which is
# most of the sanitizer stage's time in CI; the fuzz tests run slower but far less long.
# The default build has no debug information (-g0 after Python's own -g): gcc spends about
# 30% of its time on it (17.4 s against 12.2 s for dpcore/_services.c), and the build is
# most of a fresh install's time. DP_DEBUG=1 keeps it, for gdb or line-level profiles.
SANITIZE = os.environ.get("DP_SANITIZE", "")
DEBUG = os.environ.get("DP_DEBUG", "") not in ("", "0")
CFLAGS = (["-O0", "-g", f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer"] if SANITIZE
          else ["-O2", "-g" if DEBUG else "-g0"])
LDFLAGS = [f"-fsanitize={SANITIZE}"] if SANITIZE else []

# Cython's own helpers (function objects, argument parsing, tracebacks, buffer formats...)
# are generated once into a shared module instead of into every extension: ~30 MB of
# the same C less for gcc (87 -> 57 MB in all), a fresh build 246 -> 149 s on 2 cores,
# and no measurable change per round trip (callgrind: 99.97k -> 100.6k instructions).
SHARED_UTILITY = "kernelsim._cyutility"
extensions = [Extension(name, [name.replace(".", "/") + ".pyx"], extra_compile_args=CFLAGS, extra_link_args=LDFLAGS)
              for name in EXTENSIONS]
extensions.append(Extension(SHARED_UTILITY, [SHARED_UTILITY.replace(".", "/") + ".c"],
                            extra_compile_args=CFLAGS, extra_link_args=LDFLAGS))

JOBS = os.cpu_count() or 1


class ParallelBuildExt(build_ext):
    """Compile the extensions on every core (``pip install`` gives no ``-j``): the build is
    most of a fresh install's time."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = JOBS


setup(
    name="dp",
    version="0.1.0",
    description="Directed Point, rebuilt: a simulated cluster kernel and a real messaging subsystem",
    packages=find_packages(include=[f"{p}*" for p in PACKAGES]),
    package_data={"kernelsim": ["profiles/*.toml", "*.pxd", "media/*.pxd", "daemon/*.pxd"],
                  "dpcore": ["*.pxd"], "nic_drivers": ["*.pxd", "*/*.pxd"], "protocols": ["*/*.pxd"]},
    ext_modules=cythonize(extensions, language_level=3, compiler_directives={"embedsignature": True},
                          nthreads=JOBS, shared_utility_qualified_name=SHARED_UTILITY),
    cmdclass={"build_ext": ParallelBuildExt},
    python_requires=">=3.11",
    install_requires=["trio>=0.22,<0.40", "outcome", "pyroute2>=0.7", "rich>=13"],
    extras_require={
        "test": ["pytest>=7", "pytest-trio>=0.8", "hypothesis>=6"],
        "plot": ["matplotlib>=3.5"],                      # --plot, dp plot
        "cluster": ["dask[distributed]>=2023.1"],         # --sweep ... --scheduler ADDRESS
        "bench": ["simpy>=4"],                            # benchmarks/bench_sim_speed.py compares against SimPy
    },
    entry_points={
        "console_scripts": ["dp = libdp._cli:main"],
        "dp.modules": [
            "dp = dpcore.module:MODULE",
            "dec21140 = nic_drivers.dec21140:MODULE",
            "atm = nic_drivers.atm:MODULE",
            "myrinet = nic_drivers.myrinet:MODULE",
            "tb2 = nic_drivers.tb2:MODULE",
            "am = protocols.am:MODULE",
            "fm = protocols.fm:MODULE",
            "lci = protocols.lci:MODULE",
        ],
    },
)
