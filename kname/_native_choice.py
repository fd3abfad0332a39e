"""Which per-launch wrapper kname makes: the C extension kname._native, or the pure-Python one;
and which CUPTI launch callback `kname profile` uses: kname._native_cupti, or cupti-python's.

Each extension is used where it was built and imports (CPython 3.11+ with the GIL; the CUPTI one
on Linux); KNAME_NATIVE=0 forces the Python paths. Both behave the same; the extensions cost
less per launch.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from types import FrameType, ModuleType
from typing import Any

from kname._watched import HOT_PATH, Watched
from kname.config import native_requested

_imported: tuple[ModuleType | None, str] | None = None  # (the extension, why not), tried once
_imported_cupti: tuple[ModuleType | None, str] | None = None  # the same for kname._native_cupti
CUPTI_CALLBACK = "kname._native_cupti"
PYTHON_CALLBACK_COST = "about 20-50 us of CPU time per launch"


def native_module(environ: Mapping[str, str] | None = None) -> ModuleType | None:
    """kname._native when new launch wrappers are to be made by it, else None."""
    return choice(environ)[0]


def choice(environ: Mapping[str, str] | None = None) -> tuple[ModuleType | None, str]:
    """(the extension or None, why the Python path is used: "" when it is not)."""
    refused = _refused(environ)
    return (None, refused) if refused else _extension()


def cupti_choice(environ: Mapping[str, str] | None = None) -> tuple[ModuleType | None, str]:
    """(kname._native_cupti or None, why kname profile uses cupti-python's callback: "" when
    it does not)."""
    global _imported_cupti
    refused = _refused(environ)
    if refused:
        return None, refused
    if _imported_cupti is None:
        _imported_cupti = _import_extension(CUPTI_CALLBACK)
    return _imported_cupti


def profile_collector(environ: Mapping[str, str] | None = None) -> str:
    """Which launch callback `kname profile` would use here, in words (for kname doctor)."""
    native, why = cupti_choice(environ)
    if native is not None:
        return f"native, the C extension ({native.__file__})"
    return f"CUPTI's Python binding ({why}), {PYTHON_CALLBACK_COST}"


def _refused(environ: Mapping[str, str] | None) -> str:
    """Why KNAME_NATIVE turns the extensions off ("" when it does not)."""
    environ = os.environ if environ is None else environ
    if native_requested(environ):
        return ""
    return f"KNAME_NATIVE={environ.get('KNAME_NATIVE', '').strip()}"


def imported_native() -> ModuleType | None:
    """kname._native if it has been imported (by an install that made its wrappers), else None.

    Never imports: a launch must import nothing (a fork meanwhile would inherit the import
    lock), and without the extension imported no native launch can be running.
    """
    imported = _imported
    return None if imported is None else imported[0]


def launch_caller_check() -> Callable[[FrameType], bool] | None:
    """`is_launch_caller(frame)`: whether `frame` called the innermost native launch running on
    this thread; None where no native launch can be running."""
    module = imported_native()
    return None if module is None else module.is_launch_caller


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


def _import_extension(name: str = HOT_PATH) -> tuple[ModuleType | None, str]:
    import sysconfig

    if sys.implementation.name != "cpython":
        return None, f"{sys.implementation.name} (the extension is for CPython)"
    if sys.version_info < (3, 11):
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return None, f"Python {version} (the extension needs 3.11+)"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None, "free-threaded Python (the extension needs the GIL)"
    if name == CUPTI_CALLBACK and not sys.platform.startswith("linux"):
        return None, f"{sys.platform} (the extension {name} is built on Linux)"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError:
        return None, f"the extension {name} was not built (no C compiler at install?)"
    except ImportError as exc:
        return None, f"the extension {name} did not import ({exc})"
    if name == HOT_PATH:
        module.watch_changes_of(Watched)  # sites and switches say when they change
    return module, ""
