"""The optional C extension kname._native (the per-launch wrapper in C); the rest is setup.cfg.

Where it cannot be built (no compiler, no Python headers, PyPy, CPython before 3.11, a
free-threaded build) kname installs without it, with a warning, and uses its pure-Python path.
"""

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
            self._skip(exc)

    def _skip(self, exc):
        print(
            f"WARNING: kname: the C extension kname._native was not built ({exc}); kname is "
            "installed with its pure-Python launch path (slower per launch, the same behaviour)",
            file=sys.stderr,
        )


why_not = unsupported()
if why_not:
    print(f"kname: not building the C extension kname._native: {why_not}", file=sys.stderr)

setup(
    ext_modules=[] if why_not else [Extension("kname._native", sources=["kname/_native.c"])],
    cmdclass={"build_ext": optional_build_ext},
)
