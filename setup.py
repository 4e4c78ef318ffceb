"""Build dp: the Cython hot paths are part of the build, never optional.

    python -m pip install -e .

A failed Cython build is an error: there is no pure-Python fallback to hide it.
"""
from pathlib import Path

from setuptools import Extension, find_packages, setup
from Cython.Build import cythonize

PACKAGES = ("kernelsim", "dpcore", "nic_drivers", "protocols", "libdp")
# Every .pyx of the packages is an extension: a hot path is Cython or it is not.
EXTENSIONS = sorted(str(p.with_suffix("")).replace("/", ".")
                    for pkg in PACKAGES for p in Path(pkg).rglob("*.pyx"))

extensions = [Extension(name, [name.replace(".", "/") + ".pyx"], extra_compile_args=["-O2"])
              for name in EXTENSIONS]

setup(
    name="dp",
    version="0.1.0",
    description="Directed Point, rebuilt: a simulated cluster kernel and a real messaging subsystem",
    packages=find_packages(include=[f"{p}*" for p in PACKAGES]),
    package_data={"kernelsim": ["profiles/*.toml", "*.pxd", "media/*.pxd"],
                  "dpcore": ["*.pxd"], "nic_drivers": ["*/*.pxd"], "protocols": ["*/*.pxd"]},
    ext_modules=cythonize(extensions, language_level=3, compiler_directives={"embedsignature": True}),
    python_requires=">=3.11",
    install_requires=["trio>=0.22,<0.40", "outcome", "pyroute2>=0.7"],
    extras_require={"test": ["pytest>=7", "pytest-trio>=0.8", "hypothesis>=6"],
                    "bench": ["simpy>=4"]},      # benchmarks/bench_sim_speed.py compares against SimPy
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
        ],
    },
)
