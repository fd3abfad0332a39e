"""Every kernel launch named in Nsight, whichever library made it (docs/nsight_hook.md).

Under an NVTX tool (Nsight Systems, Nsight Compute: they set NVTX_INJECTION64_PATH) and in the
default mode, install() puts kname._native's driver hook in place: each launch that no kname
range holds (PyTorch's, cuBLAS's, CuPy's ufuncs, XLA's) then runs inside a range named after the
launching thread's first user line by kname's rules, as kname profile names it; a launch on a
thread with no Python frame (autograd's) takes the name of the backward() pass running, and
gets no range when none runs. With no tool attached, ranges are dropped anyway, so the hook is
not installed and costs nothing. KNAME_DRIVER_HOOK=0 leaves it out.
"""

from __future__ import annotations

import os
from types import FrameType
from typing import Any

from kname import callsite, hotpath, ranges
from kname._locks import new_lock
from kname._warnings import report_fault
from kname.config import KNAME_DRIVER_HOOK, driver_hook_wanted

CATEGORY = "driver"  # the NVTX category of the hook's ranges
VARIABLE = KNAME_DRIVER_HOOK

_lock = new_lock()
_why_not = "kname is not installed"
_installed = False


def _native() -> Any:
    """kname._native where it has the hook (the NVTX headers at build time, Linux), else None."""
    return hotpath.current().driver_hook


def _switched_off() -> bool:
    """KNAME_DRIVER_HOOK set off (config.py reads it; read_config said a bad value at install)."""
    return not driver_hook_wanted()


def reason_not_wanted(mode: str) -> str:
    """Why this install gets no hook ("" when it wants one)."""
    if _switched_off():
        return f"{VARIABLE}={os.environ.get(VARIABLE, '').strip()}"
    if mode != "nvtx":
        return f"KNAME_MODE is {mode} (the hook names ranges of the default mode only)"
    if hotpath.current().nvtx_range is None:
        return "kname._native is not in use, or was built without the NVTX headers"
    if not ranges.tool_attached():
        return "no NVTX tool is attached (no profiler would see its ranges)"
    return ""


def install(mode: str) -> None:
    """The hook in place when this install wants it (see reason_not_wanted)."""
    global _why_not, _installed
    with _lock:
        why = reason_not_wanted(mode)
        native = _native() if not why else None
        if not why and native is None:
            why = "kname._native has no driver hook here (Linux x86-64 and aarch64 only)"
        if why:
            _why_not = why
            return
        why = native.driver_hook_install(_push_of_frame, callsite._kinds)
        _installed = not why
        _why_not = why
        if _installed:
            _name_backward_passes(native)


def uninstall() -> None:
    """Every entry point the hook took given back (disable(), uninstall())."""
    global _installed, _why_not
    with _lock:
        if not _installed:
            return
        from kname.profiling import backward

        backward.listen(None)
        backward.collect(None)
        native = _native()
        if native is not None:
            native.driver_hook_uninstall()
        _pushes.clear()  # the next install may have another domain
        _installed = False
        _why_not = "kname was disabled or uninstalled"


def state() -> dict[str, Any]:
    """Whether the hook is in place (`installed`), why not (`why_not`), and its counts."""
    native = _native()
    found = dict(native.driver_hook_state()) if native is not None else {"installed": False}
    found["why_not"] = "" if found.get("installed") else _why_not
    return found


_pushes: dict[str, Any] = {}  # range name -> its push (kname._native's NvtxCall)


def doctor_line(mode: str, hot_path: hotpath.HotPath) -> tuple[bool, str]:
    """kname doctor's line: (whether the hook will be or is in place, what it says)."""
    if _installed:
        slots = state().get("slots", 0)
        return True, f"driver hook: in place ({slots} entry points taken)"
    if hot_path.driver_hook is None:
        why = hot_path.why_python or "kname._native has no driver hook here (Linux only, NVTX)"
        return False, f"driver hook: unavailable ({why}): only launches kname wraps get ranges"
    if _switched_off():
        setting = f"{VARIABLE}={os.environ.get(VARIABLE, '').strip()}"
        return False, f"driver hook: off ({setting}): only launches kname wraps get ranges"
    if mode != "nvtx":
        return False, f"driver hook: not used (KNAME_MODE={mode})"
    return True, (
        "driver hook: ready: under an NVTX tool (nsys, ncu --nvtx) every launch outside a "
        "kname range (PyTorch, cuBLAS, CuPy's ufuncs) is named after its line"
    )


def _push_named(name: str) -> Any:
    """The hook's push of a range called `name`, made once; None where NVTX has no tool.

    Always kname._native's own NVTX call (the hook reads its attributes), never the nvtx
    package's: past ranges.MAX_NAMES names, every new one shares ranges.OVERFLOW_NAME.
    """
    push = _pushes.get(name)
    if push is not None:
        return push
    maker = hotpath.current().nvtx_range
    if maker is None:
        return None
    with _lock:
        if len(_pushes) >= ranges.MAX_NAMES:
            name = ranges.OVERFLOW_NAME
        push = _pushes.get(name)
        if push is None:
            calls = maker(ranges.domain_name(), name, ranges.colour_of(name), CATEGORY)
            push = None if calls is None else calls[0]
            if push is not None:
                _pushes[name] = push
    return push


def _push_of_frame(frame: FrameType | None) -> Any:
    """The NVTX push of a launch made while `frame` runs, named as kname profile names it."""
    from kname.profiling import capture

    return _push_named(capture.site_of_frame(frame))


def _name_backward_passes(native: Any) -> None:
    """Backward passes open scopes (the torch unit's wrap of torch.autograd.backward), whose
    name the hook gives launches on autograd's threads."""
    from kname.profiling import backward, capture

    def tell(name: str | None) -> None:
        try:
            native.driver_hook_set_frameless(None if name is None else _push_named(name))
        except Exception as exc:  # the backward pass runs on, named or not
            report_fault("naming a backward pass for the driver hook", exc)

    backward.collect(capture.site_of_frame)
    backward.listen(tell)
