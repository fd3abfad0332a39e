"""Which per-launch wrapper kname makes: the C extension kname._native, or the pure-Python one.

The extension is used where it was built and imports (CPython 3.11+ with the GIL); KNAME_NATIVE=0
forces the Python path. Both behave the same; the extension costs less per launch.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from types import FrameType, ModuleType
from typing import Any

from kname.config import native_requested

_imported: tuple[ModuleType | None, str] | None = None  # (the extension, why not), tried once


def native_module(environ: Mapping[str, str] | None = None) -> ModuleType | None:
    """kname._native when new launch wrappers are to be made by it, else None."""
    return choice(environ)[0]


def choice(environ: Mapping[str, str] | None = None) -> tuple[ModuleType | None, str]:
    """(the extension or None, why the Python path is used: "" when it is not)."""
    environ = os.environ if environ is None else environ
    if not native_requested(environ):
        return None, f"KNAME_NATIVE={environ.get('KNAME_NATIVE', '').strip()}"
    return _extension()


def launch_caller() -> FrameType | None:
    """The frame that called the innermost native launch running on this thread, or None."""
    # Never imports: a launch must import nothing (a fork meanwhile would inherit the import
    # lock), and without the extension imported no native launch can be running.
    imported = _imported
    module = None if imported is None else imported[0]
    return None if module is None else module.launch_caller()


def skip_beneath_launch(hook: Callable[..., Any], kinds: dict[int, int]) -> Callable[..., Any]:
    """`hook`, or a C guard of it that returns None at once when called inside a native launch
    with only library code between (`kinds`: callsite's); `hook` itself without the extension."""
    module = native_module()  # made at install, with the wrappers: the extension imported now
    return hook if module is None else module.SkipBeneath(hook, kinds)


def _extension() -> tuple[ModuleType | None, str]:
    global _imported
    if _imported is None:
        _imported = _import_extension()
    return _imported


def _import_extension() -> tuple[ModuleType | None, str]:
    import sysconfig

    if sys.implementation.name != "cpython":
        return None, f"{sys.implementation.name} (the extension is for CPython)"
    if sys.version_info < (3, 11):
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return None, f"Python {version} (the extension needs 3.11+)"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None, "free-threaded Python (the extension needs the GIL)"
    try:
        return importlib.import_module("kname._native"), ""
    except ModuleNotFoundError:
        return None, "the extension kname._native was not built (no C compiler at install?)"
    except ImportError as exc:
        return None, f"the extension kname._native did not import ({exc})"
