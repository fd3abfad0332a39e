"""The optional C extensions; the rest is setup.cfg.

kname._native is the per-launch wrapper in C; kname._native_cupti (Linux) is kname profile's
CUPTI launch callback in C, built without CUDA headers (it finds libcupti at run time);
kname._sigterm_guard (Linux) makes sure a SIGTERM that Python never gets to handle still ends the
process. Where one cannot be built (no compiler, no Python headers, PyPy, CPython before 3.11, a
free-threaded build) kname installs without it, with a warning, and uses its pure-Python
counterpart (for the guard: the Python SIGTERM handler alone).
"""

import glob
import importlib.util
import os
import platform
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def unsupported() -> str:
    """Why this interpreter gets no extension ("" when it gets one)."""
    if platform.python_implementation() != "CPython":
        return f"{platform.python_implementation()} is not CPython"
    if sys.version_info < (3, 11):
        return "it needs CPython 3.11 or newer"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "free-threaded CPython is not supported"
    return ""


class optional_build_ext(build_ext):
    """build_ext that warns instead of failing: kname works without its extension."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler at all, a broken toolchain
            self._skip(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # a compile or link error
            self._skip(exc, [ext])

    def _skip(self, exc, extensions=None):
        for ext in self.extensions if extensions is None else extensions:
            print(
                f"WARNING: kname: the C extension {ext.name} was not built ({exc}); kname is "
                f"installed with {FALLBACKS[ext.name]}",
                file=sys.stderr,
            )


FALLBACKS = {
    "kname._native": "its pure-Python launch path (slower per launch, the same behaviour)",
    "kname._native_cupti": (
        "the Python CUPTI callback of kname profile (slower per launch, the same behaviour)"
    ),
    "kname._sigterm_guard": (
        "its Python SIGTERM handler alone (a process that SIGTERM finds blocked in C code may "
        "then not end)"
    ),
}


def nvtx_include_dir() -> str | None:
    """The directory holding nvtx3/nvToolsExt.h: the nvidia-nvtx wheel's (a build requirement on
    Linux), else the CUDA toolkit's; None where neither is found."""
    roots = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            roots += sorted(glob.glob(os.path.join(location, "*", "include")), reverse=True)
    toolkit = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    roots.append(os.path.join(toolkit, "include"))
    for root in roots:
        if os.path.isfile(os.path.join(root, "nvtx3", "nvToolsExt.h")):
            return root
    return None


def native_extension() -> Extension:
    """kname._native, calling NVTX's C API itself where the NVTX headers are found (Linux)."""
    sources = ["kname/_native.c"]
    depends = ["kname/_native_common.h", "kname/_native_nvtx.h"]
    if not sys.platform.startswith("linux"):
        return Extension("kname._native", sources=sources, depends=depends)
    include = nvtx_include_dir()
    if include is None:
        print(
            "kname: NVTX headers not found (pip install nvidia-nvtx, or set CUDA_HOME): "
            "kname._native's ranges go through the nvtx package",
            file=sys.stderr,
        )
        return Extension("kname._native", sources=sources, depends=depends)
    return Extension(
        "kname._native",
        sources=sources,
        depends=depends,
        include_dirs=[include],
        define_macros=[("KNAME_NVTX", "1")],
        libraries=["dl"],  # NVTX loads its tool with dlopen
    )


def extensions() -> list[Extension]:
    made = [native_extension()]
    if sys.platform.startswith("linux"):  # dlopen, pthreads, and CUPTI's plain calling convention
        made.append(
            Extension(
                "kname._native_cupti",
                sources=["kname/_native_cupti.c"],
                depends=["kname/_cupti_abi.h", "kname/_native_common.h"],
                libraries=["dl", "pthread"],
            )
        )
        # sigaction chained to CPython's handler, a watchdog pthread, an unnamed semaphore.
        made.append(
            Extension(
                "kname._sigterm_guard", sources=["kname/_sigterm_guard.c"], libraries=["pthread"]
            )
        )
    return made


if __name__ == "__main__":  # as pip's build backend and `python setup.py` run it; the tests
    # load this file for nvtx_include_dir alone
    why_not = unsupported()
    if why_not:
        print(f"kname: not building the C extensions kname._native*: {why_not}", file=sys.stderr)

    setup(
        ext_modules=[] if why_not else extensions(),
        cmdclass={"build_ext": optional_build_ext},
    )
