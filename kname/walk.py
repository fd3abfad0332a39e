"""Walking a launch's stack: past library frames to the user's, and the cache key of its site.

Each frame's code is judged by the caller's rules (kname.callsite.kind_of): USER frames name a
site, LIBRARY and COMPILE frames are passed over, PLUMBING ones (the standard library, kname,
wrapt) too. A kname launch wrapper's frame (or, for the C one, which has none, the frame that
called it) means the launch is nested in another, which names it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from kname import hotpath
from kname.naming import INLINED

# How a code object's frames count in the walk. USER: a call site. LIBRARY: passed over, but
# names a launch that has no user frame at all (a library's own code). PLUMBING: passed over,
# and never a name (the standard library, kname, wrapt). WRAPPER: kname's own launch wrapper.
# COMPILE: library code doing build-time work (compiling, autotuning): passed over as LIBRARY,
# and a launch beneath it is named apart (COMPILE_MARK). The C walks know no COMPILE: they leave
# such a launch to resolve(), as for a code object not judged yet.
USER, LIBRARY, WRAPPER, PLUMBING, COMPILE = 0, 1, 2, 3, 4

# Key prefixes of sites named other than by user frames: never equal to a launch's fast key.
_LIBRARY_SITE = "library frame"
_KERNEL_SITE = "no user frame"
_COMPILE_SITE = "compile"

_wrapper_code_ids: set[int] = set()
_wrapper_codes: list[CodeType] = []  # kname's own, kept: their ids mean a launch in progress


def register_wrapper_code(code: CodeType) -> None:
    """Mark kname's own launch wrapper: a launch found beneath one is nested, and not named."""
    _wrapper_codes.append(code)
    _wrapper_code_ids.add(id(code))


def stack(
    frame: FrameType | None,
    depth: int,
    judge: Callable[[CodeType, object], int],
    stop_at_wrapper: bool = True,
) -> tuple[list[FrameType] | None, FrameType | None, bool]:
    """Up to `depth` user frames from `frame` outwards, the outermost LIBRARY frame seen before
    the first of them, and whether a COMPILE frame was seen before it; (None, None, False) for a
    launch nested in another kname launch. `judge(code, module)` is the kind of a frame's code.
    """
    user_frames: list[FrameType] = []
    library_frame = None
    compiling = False
    # A native launch wrapper has no frame: the caller of the one running marks where it is, and
    # reaching it from below is reaching that wrapper (a walk that starts there starts above it).
    is_native_caller, start = hotpath.current().is_launch_caller, frame
    process_start = _process_start()
    while frame is not None and len(user_frames) < depth:
        code = frame.f_code
        if code is process_start:
            break  # the frames outside it are the parent's (forked) or spawn's: not this child's
        if (
            is_native_caller is not None
            and frame is not start
            and stop_at_wrapper
            and not user_frames
            and is_native_caller(frame)
        ):
            return None, None, False  # inside a native kname launch: the outer one names it
        if id(code) in _wrapper_code_ids:
            if stop_at_wrapper and not user_frames:
                return None, None, False  # inside another kname launch: the outer one names it
        else:
            kind = judge(code, frame.f_globals.get("__name__"))
            if kind == USER:
                user_frames.append(frame)
                # The frames it is written in are one frame with it on 3.12+ (PEP 709).
                while frame.f_code.co_name in INLINED and frame.f_back is not None:
                    frame = frame.f_back
            elif kind in (LIBRARY, COMPILE) and not user_frames:
                library_frame = frame
                compiling = compiling or kind == COMPILE
        frame = frame.f_back
    return user_frames, library_frame, compiling


def _process_start() -> CodeType | None:
    """multiprocessing's BaseProcess._bootstrap, where a child process's own stack begins (None
    before multiprocessing is imported): a forked child's frames go on into its parent's, up
    to `p.start()`, a spawned one's into spawn's `<string>` entry; neither is the child's."""
    module = sys.modules.get("multiprocessing.process")
    bootstrap = getattr(getattr(module, "BaseProcess", None), "_bootstrap", None)
    return getattr(bootstrap, "__code__", None)


def _key(frames: list[FrameType], kernel_key: Any, depth: int) -> tuple:
    # The flat form is the launch wrapper's fast-path key: with KNAME_DEPTH > 1 a site that
    # found one user frame (no caller) must not answer it for a launch that has callers.
    if len(frames) == 1 and depth == 1:
        return (id(frames[0].f_code), frames[0].f_lasti, kernel_key)
    return (*((id(f.f_code), f.f_lasti) for f in frames), kernel_key)


def site_key(
    user_frames: list[FrameType],
    library_frame: FrameType | None,
    kernel_key: Any,
    depth: int,
    compiling: bool = False,
) -> tuple[tuple, list[FrameType]]:
    """The cache key of a site, and the frames that name it (none: named by the kernel)."""
    if compiling:  # keyed apart: the same line's launches at run time are another site
        key, frames = site_key(user_frames, library_frame, kernel_key, depth)
        return (_COMPILE_SITE, *key), frames
    if user_frames:
        return _key(user_frames, kernel_key, depth), user_frames
    # Keyed apart from the fast path: the same library line called from a user's line is
    # named after that line.
    if library_frame is not None:
        code = library_frame.f_code
        return (_LIBRARY_SITE, id(code), library_frame.f_lasti, kernel_key), [library_frame]
    return (_KERNEL_SITE, kernel_key), []
