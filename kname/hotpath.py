"""The hot path in effect: kname's C extension or its pure-Python twin, chosen once per install.

install() calls `use(config.native)` (KNAME_NATIVE, read by kname.config) and hands the HotPath
record it gets to the library units (`Options.hot_path`); the naming core reads `current()`.
The record holds the chosen implementation of each thing a launch needs: the launch wrapper,
its counter, the NVTX range calls, the guards and slots some libraries use, and kname profile's
CUPTI callback. Where the extension is not used it says why (for kname doctor).

The C extensions (kname._native, kname._native_cupti; typed by their .pyi) are imported here and
nowhere else. They are used where they were built and import (CPython 3.11+ with the GIL; the
CUPTI one on Linux); KNAME_NATIVE=0 turns both off. The Python twins (kname.pyhotpath) behave the
same; the C ones cost less per launch. Nothing here imports a higher layer: what a launch needs
from the naming core is handed in (see LaunchWrapperFactory).
"""

from __future__ import annotations

import importlib
import operator
import sys
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any, NamedTuple, Protocol, TypeGuard

from kname import _watched, pyhotpath
from kname.config import native_requested

NATIVE = "kname._native"
NATIVE_CUPTI = "kname._native_cupti"
NATIVE_OFF = "KNAME_NATIVE is off"

RangeCalls = tuple[Callable[[], None], Callable[[], None]]  # a range's push and pop
Extension = tuple[ModuleType | None, str]  # (the extension, or None and why not)


class Counter(Protocol):
    """A launch counter (the C Counter, or itertools.count): next() is atomic under the GIL."""

    def __next__(self) -> int: ...


class LaunchWrapperFactory(Protocol):
    """kname._native.LaunchWrapper, or pyhotpath.launch_wrapper: a wrapper naming each call."""

    def __call__(
        self,
        original: Callable[..., Any],
        kernel: Any,  # None (original is the kernel), (index, attribute), or a callable of args
        switch: Any,  # reads `.on` at each launch
        sites: dict[tuple, Any],
        resolve: Callable[[FrameType, Any], Any],  # on a miss: resolve(frame, kernel) -> site
        # fault(frame, kernel, site, exc, where, again): True, kname's own (the launch runs on);
        # False, raised into it from outside (it propagates)
        fault: Callable[..., bool],
        kinds: dict[int, int],  # id(code) -> callsite's USER, LIBRARY, ... (for the C walk)
        # pyhotpath.UNNAMED_IN_LAUNCHERS, LAUNCHER: 0 unless KNAME_TARGETS launchers are chosen
        launchers: int = 0,
        # callsite.NativeMiss: what the C wrapper reads to name a miss itself (None: resolve)
        miss: Any = None,
    ) -> Callable[..., Any]: ...


class SkipBeneathFactory(Protocol):
    """SkipBeneath(hook, kinds): `hook`, except beneath a C launch with only library code
    between; its Python twin gives `hook` itself."""

    def __call__(self, hook: Callable[..., Any], kinds: dict[int, int]) -> Callable[..., Any]: ...


class SubscriptLaunchFactory(Protocol):
    """A `__getitem__` whose `obj[key](*args, **kwargs)` calls `obj.<method>(*args, **kwargs,
    <key_keyword>=key, **fixed)` inside a launch wrapper that `wrap(original)` makes, with no
    Python frame between the caller's line and the wrapper (Triton's `kernel[grid](...)`)."""

    def __call__(
        self,
        wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
        method: str,
        key_keyword: str,
        fixed: dict[str, Any],
    ) -> Any: ...


class NvtxRangeMaker(Protocol):
    """nvtx_range(domain, message, argb, category): a range's push and pop calling the NVTX C
    API, or None when no tool is attached."""

    def __call__(
        self, domain: str, message: str, argb: int, category: str, /
    ) -> RangeCalls | None: ...


class HotPath(NamedTuple):
    """The implementations one choice of hot path hands down, and why it is what it is (a
    NamedTuple: no dataclass is made at start-up)."""

    why_python: str  # why the pure-Python path is in effect; "" where the C one is
    extension_file: str  # the C extension in use ("" on the Python path)
    launch_wrapper: LaunchWrapperFactory
    counter: Callable[[], Counter]
    # is_launch_caller(frame): whether `frame` called the innermost C launch running on this
    # thread (a C wrapper has no frame of its own); None where no C launch can be running.
    is_launch_caller: Callable[[FrameType], bool] | None
    # Whether a KNAME_TARGETS launcher's wrapper is running on this thread.
    inside_launcher: Callable[[], bool]
    skip_beneath: SkipBeneathFactory
    subscript_launch: SubscriptLaunchFactory
    base_call: Callable[[type], Callable[..., Any]]  # base.__call__, straight to its C slot
    use_direct_call: Callable[[type], None]  # the class's instances called through kname's slot
    # The NVTX C API's range calls and domain, where the extension was built with NVTX's
    # headers; None: the nvtx package's calls (kname.ranges).
    nvtx_range: NvtxRangeMaker | None
    nvtx_domain: Callable[[str], Any] | None
    # kname._native where it has the driver hook (kname.driver_hook), else None.
    driver_hook: ModuleType | None
    # kname profile's CUPTI callback: kname._native_cupti (imported at the first ask), or None
    # and why cupti-python's Python callback is used.
    cupti: Callable[[], Extension]


_current: HotPath | None = None
_imports: dict[str, Extension] = {}  # each extension, tried once per process
_counter_types: set[type] = {pyhotpath.Counter}  # and the C Counter, once it is imported


def use(native: bool) -> HotPath:
    """Choose the hot path for this install (`native`: Config.native) and make it current."""
    global _current
    _current = choose(native)
    return _current


def current() -> HotPath:
    """The hot path of this install; uninstalled, the one KNAME_NATIVE asks for (decided at the
    first ask after reset(), by kname.config; two threads asking at once decide alike)."""
    hot_path = _current
    return use(native_requested()) if hot_path is None else hot_path


def reset() -> None:
    """No hot path is current (uninstall()): the next current() decides again."""
    global _current
    _current = None


def choose(native: bool) -> HotPath:
    """The hot path a Config.native of `native` gets here; the extension is imported now."""
    if not native:
        return _python_path(NATIVE_OFF, lambda: (None, NATIVE_OFF))
    module, why = _extension(NATIVE)
    if module is None:
        return _python_path(why, _cupti)
    return _native_path(module)


def is_main_interpreter() -> bool:
    """Whether this is the process's main interpreter, not a subinterpreter: kname's C
    extensions are single-phase init (one copy of their state per process), and the nvtx package
    imports numpy, which does not support subinterpreters."""
    import _thread

    is_main = getattr(_thread, "_is_main_interpreter", None)  # 3.12+
    if is_main is not None:
        return bool(is_main())
    try:  # 3.10, 3.11: loaded only here, where no cheaper tell exists
        import _xxsubinterpreters as interpreters
    except ImportError:  # not built: no subinterpreter can be made from Python
        return True
    return bool(interpreters.get_current() == interpreters.get_main())


def is_counter(counter: Any) -> TypeGuard[Counter]:
    """Whether `counter` is a launch counter of either hot path (next() on one cannot fail): a
    name keeps its counter across installs, whichever hot path each chose."""
    return type(counter) in _counter_types


def _python_path(why: str, cupti: Callable[[], Extension]) -> HotPath:
    return HotPath(
        why_python=why,
        extension_file="",
        launch_wrapper=pyhotpath.launch_wrapper,
        counter=pyhotpath.Counter,
        is_launch_caller=None,  # a Python wrapper's frame marks its launch
        inside_launcher=pyhotpath.inside_launcher,
        skip_beneath=pyhotpath.skip_beneath,
        subscript_launch=pyhotpath.subscript_launch,
        base_call=pyhotpath.base_call,
        use_direct_call=pyhotpath.use_direct_call,
        nvtx_range=None,
        nvtx_domain=None,
        driver_hook=None,
        cupti=cupti,
    )


def _native_path(module: ModuleType) -> HotPath:
    def subscript_launch(
        wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
        method: str,
        key_keyword: str,
        fixed: dict[str, Any],
    ) -> Any:
        # The wrapper of operator.call, called with obj.<method> first: no Python frame at all.
        return module.SubscriptLaunch(wrap(operator.call), method, key_keyword, fixed)

    return HotPath(
        why_python="",
        extension_file=module.__file__ or NATIVE,
        launch_wrapper=module.LaunchWrapper,
        counter=module.Counter,
        is_launch_caller=module.is_launch_caller,
        inside_launcher=module.inside_launcher,
        skip_beneath=module.SkipBeneath,
        subscript_launch=subscript_launch,
        base_call=module.BaseCall,
        use_direct_call=module.use_direct_call,
        nvtx_range=getattr(module, "nvtx_range", None),  # built without NVTX's headers: none
        nvtx_domain=getattr(module, "nvtx_domain", None),
        driver_hook=module if hasattr(module, "driver_hook_install") else None,
        cupti=_cupti,
    )


def _cupti() -> Extension:
    return _extension(NATIVE_CUPTI)


def _extension(name: str) -> Extension:
    tried = _imports.get(name)
    if tried is None:
        tried = _imports[name] = _import(name)
    return tried


def _import(name: str) -> Extension:
    """(the extension, "") or (None, why it cannot be used here)."""
    if sys.implementation.name != "cpython":
        return None, f"{sys.implementation.name} (the extension is for CPython)"
    if sys.version_info < (3, 11):
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return None, f"Python {version} (the extension needs 3.11+)"
    if "t" in getattr(sys, "abiflags", ""):  # Py_GIL_DISABLED, without sysconfig's 0.5 ms
        return None, "free-threaded Python (the extension needs the GIL)"
    if not is_main_interpreter():
        return None, "a subinterpreter (the extension is for the main interpreter)"
    if name == NATIVE_CUPTI and not sys.platform.startswith("linux"):
        return None, f"{sys.platform} (the extension {name} is built on Linux)"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError:
        return None, f"the extension {name} was not built (no C compiler at install?)"
    except ImportError as exc:
        return None, f"the extension {name} did not import ({exc})"
    if name == NATIVE:
        # Sites and switches say when they change: the C wrapper forgets what it remembered.
        module.watch_changes_of(_watched.Watched)
        _watched.forget_with(module.forget_launches)
        _counter_types.add(module.Counter)
    return module, ""
