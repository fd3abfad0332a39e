"""The optional C extensions, and the start-up gate put at the root of site-packages; the rest is
setup.cfg.

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
from setuptools.command.build_py import build_py


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


class build_py_with_gate(build_py):
    """build_py, and the start-up gate kname/_bootstrap/kname.pth put at the root of the wheel
    (site-packages, where site reads .pth files). An editable install gets none: `kname run`
    starts kname there (docs/architecture.md)."""

    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_file(GATE, os.path.join(self.build_lib, os.path.basename(GATE)))


GATE = "kname/_bootstrap/kname.pth"

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


# Each extension is built from several files, one job each (docs/architecture.md has the table);
# a library's own C is in its unit's folder, and its unit names it (Library.c_sources). The
# headers are listed for the rebuild checks (setuptools' and the tests'), and for the sdist.
NATIVE_SOURCES = [
    "kname/_native_c/module.c",
    "kname/_native_c/launch.c",
    "kname/_native_c/counters.c",
    "kname/_native_c/callsite.c",
    "kname/_native_c/miss.c",
    "kname/_native_c/ranges.c",
    "kname/_native_c/units.c",
    "kname/_common_c/common.c",
    "kname/_common_c/slots.c",
    "kname/_native_c/driver_hook.c",
    "kname/_native_c/got_slots.c",
    "kname/targets/cupy/_native_cupy.c",
    "kname/targets/triton/_native_triton.c",
]
NATIVE_HEADERS = [
    "kname/_common_c/common.h",
    "kname/_common_c/slots.h",
    "kname/_native_c/types.h",
    "kname/_native_c/callsite.h",
    "kname/_native_c/miss.h",
    "kname/_native_c/launch.h",
    "kname/_native_c/ranges.h",
    "kname/_common_c/profiled.h",
    "kname/_native_c/driver_hook.h",
    "kname/_native_c/got_slots.h",
]
CUPTI_SOURCES = [
    "kname/profiling/_cupti_c/module.c",
    "kname/profiling/_cupti_c/state.c",
    "kname/profiling/_cupti_c/recorder.c",
    "kname/profiling/_cupti_c/teardown.c",
    "kname/profiling/_cupti_c/records.c",
    "kname/profiling/_cupti_c/site_calls.c",
    "kname/profiling/_cupti_c/callback.c",
    "kname/profiling/_cupti_c/launch_site.c",
    "kname/profiling/_cupti_c/faults.c",
    "kname/profiling/_cupti_c/activity.c",
    "kname/profiling/_cupti_c/join.c",
    "kname/profiling/_cupti_c/id_map.c",
    "kname/profiling/_cupti_c/launch_times.c",
    "kname/profiling/_cupti_c/graphs.c",
    "kname/profiling/_cupti_c/trace.c",
    "kname/profiling/_cupti_c/trace_json.c",
    "kname/profiling/_cupti_c/torch_memory.c",
    "kname/profiling/_cupti_c/torch_tracker.c",
    "kname/profiling/_cupti_c/tracked_sites.c",
    "kname/profiling/_cupti_c/ledger.c",
    "kname/_common_c/common.c",
    "kname/_common_c/slots.c",
]
CUPTI_HEADERS = [
    "kname/_common_c/common.h",
    "kname/_common_c/slots.h",
    "kname/profiling/_cupti_c/types.h",
    "kname/profiling/_cupti_c/callback.h",
    "kname/profiling/_cupti_c/recorder.h",
    "kname/profiling/_cupti_c/join.h",
    "kname/profiling/_cupti_c/id_map.h",
    "kname/profiling/_cupti_c/launch_times.h",
    "kname/profiling/_cupti_c/graphs.h",
    "kname/profiling/_cupti_c/trace.h",
    "kname/_common_c/profiled.h",
    "kname/profiling/_cupti_c/cupti_abi.h",
    "kname/profiling/_cupti_c/torch_memory.h",
    "kname/profiling/_cupti_c/tracked_sites.h",
    "kname/profiling/_cupti_c/ledger.h",
]


def native_extension(nvtx_include: str | None) -> Extension:
    """kname._native, calling NVTX's C API itself where the NVTX headers are found (Linux)."""
    common = {"sources": NATIVE_SOURCES, "depends": NATIVE_HEADERS, "include_dirs": ["kname"]}
    if nvtx_include is None:
        return Extension("kname._native", **common)
    return Extension(
        "kname._native",
        **{**common, "include_dirs": ["kname", nvtx_include]},
        define_macros=[("KNAME_NVTX", "1")],
        libraries=["dl"],  # NVTX loads its tool with dlopen
        # NVTX's implementation is in its headers, as weak functions and data: each file that
        # includes them carries a copy, and the linker uses one. Each function and datum in a
        # section of its own, the copies it does not use are dropped (20 kB each, never run).
        extra_compile_args=["-ffunction-sections", "-fdata-sections"],
        extra_link_args=["-Wl,--gc-sections"],
    )


def extensions(nvtx_include: str | None) -> list[Extension]:
    """The extensions built on this platform; `nvtx_include` as nvtx_include_dir() finds it."""
    made = [native_extension(nvtx_include)]
    if sys.platform.startswith("linux"):  # dlopen, pthreads, and CUPTI's plain calling convention
        made.append(
            Extension(
                "kname._native_cupti",
                sources=CUPTI_SOURCES,
                depends=CUPTI_HEADERS,
                include_dirs=["kname"],
                libraries=["dl", "pthread"],
            )
        )
        # sigaction chained to CPython's handler, a POSIX timer (librt before glibc 2.34).
        made.append(
            Extension(
                "kname._sigterm_guard",
                sources=["kname/_sigterm_c/sigterm_guard.c"],
                libraries=["rt"],
            )
        )
    return made


if __name__ == "__main__":  # as pip's build backend and `python setup.py` run it; the tests
    # load this file for what it says of the build (nvtx_include_dir, extensions)
    why_not = unsupported()
    if why_not:
        print(f"kname: not building the C extensions kname._native*: {why_not}", file=sys.stderr)
    nvtx_include = nvtx_include_dir() if sys.platform.startswith("linux") else None
    if not why_not and sys.platform.startswith("linux") and nvtx_include is None:
        print(
            "kname: NVTX headers not found (pip install nvidia-nvtx, or set CUDA_HOME): "
            "kname._native's ranges go through the nvtx package",
            file=sys.stderr,
        )

    setup(
        ext_modules=[] if why_not else extensions(nvtx_include),
        cmdclass={"build_ext": optional_build_ext, "build_py": build_py_with_gate},
    )
