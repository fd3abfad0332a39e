"""Which frame launched a kernel, and the cached record of that call site.

Per launch, the wrapper looks up `sites[(id(code), f_lasti, kernel_key)]` for its caller's frame
(see kname.launch). Everything here runs only when that look-up misses: walking past library
frames, classifying code objects, building names and NVTX attributes.

Code objects are never hashed: CPython hashes code by value, on every look-up (0.5 µs for a small
module, 10 µs for one of 300 functions). Keys use id(code), and each cache entry holds the code
object, so an id cannot be reused while its entry exists.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from kname import naming, ranges
from kname._locks import new_lock, reset_in_child
from kname._warnings import report_fault, warn_once
from kname.config import DEFAULT_FORMAT

MAX_SITES = 100_000
MAX_CODES = 200_000

# Frames of these modules are never the call site: kname and wrapt, and the stdlib helpers that
# sit between a user's line and a launch. install() adds the GPU libraries' packages (each
# library unit names its own).
CORE_LIBRARY_MODULES = (
    "kname", "wrapt", "functools", "contextlib", "threading", "runpy", "importlib",
    "_frozen_importlib", "_frozen_importlib_external",
)  # fmt: skip

_KNAME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

USER, LIBRARY, WRAPPER = 0, 1, 2


class Site:
    """Everything a launch from one call site needs, built once."""

    __slots__ = (
        "attributes", "code", "counter", "identifier", "kernel", "launch", "lib", "name", "order",
        "pop", "push",
    )  # fmt: skip

    def __init__(self, name, identifier, kernel, lib, attributes, code, order):
        self.name = name  # the display name, as the profiler shows it
        self.identifier = identifier  # identifier-safe form, for renamed kernels
        self.kernel = kernel  # the kernel's name
        self.lib = lib
        self.attributes = attributes  # prebuilt NVTX attributes, None when none are emitted
        self.push = self.pop = None  # bound NVTX calls, None when no range is emitted
        if attributes is not None:
            self.push, self.pop = ranges.range_calls(attributes)
        self.code = code  # keeps the keyed code objects (and so their ids) alive
        self.counter = itertools.count()  # next() is atomic: no lost counts across threads
        self.order = order  # first-seen order, for the census
        self.launch = None  # KNAME_MODE=rename: launches the site's renamed kernel instead
        if _site_calls is not None:  # kname profile: the launch also hands its site over
            self.push, self.pop = _site_calls(self)

    def launches(self) -> int:
        """How many launches this site has counted."""
        # itertools.count shows its next value only in its repr.
        return int(repr(self.counter)[6:-1])


sites: dict[tuple, Site] = {}
# Counts of sites no longer cached (evicted, or built under earlier rules): (name, kernel, lib).
retired_launches: dict[tuple[str, str, str], int] = {}

_lock = new_lock(reentrant=True)
_kinds: dict[int, int] = {}
_codes: dict[int, CodeType] = {}
_wrapper_code_ids: set[int] = set()
_skip: tuple[str, ...] = ()
_library_modules = CORE_LIBRARY_MODULES
_template = DEFAULT_FORMAT
_depth = 1
_emit_nvtx = True
_order = itertools.count()
_site_calls: Callable[[Site], tuple[Any, Any]] | None = None


def configure(
    skip: tuple[str, ...] = (),
    template: str = DEFAULT_FORMAT,
    depth: int = 1,
    emit_nvtx: bool = True,
    library_modules: tuple[str, ...] = (),
) -> None:
    """Set the rules (no arguments: the defaults); forget every decision and site made under the
    old ones, but keep their launch counts (by name, as the cache's evicted sites are kept)."""
    global _skip, _library_modules, _library_path, _template, _depth, _emit_nvtx
    with _lock:
        _skip, _template, _depth, _emit_nvtx = tuple(skip), template, depth, emit_nvtx
        _library_modules = (*CORE_LIBRARY_MODULES, *library_modules)
        _library_path = _library_path_pattern(_library_modules)
        _kinds.clear()
        _codes.clear()
        for site in list(sites.values()):
            _retire(site)
        sites.clear()


def use_site_calls(factory: Callable[[Site], tuple[Any, Any]] | None = None) -> None:
    """Sites built from now on take their push and pop from `factory(site)` (None: NVTX's alone).

    `kname profile` hands each wrapped launch's site to its collector this way, at no cost to a
    launch when it is not profiling. Cached sites are dropped, so every site is built anew; their
    launch counts are kept. `factory` must not raise.
    """
    global _site_calls
    with _lock:
        _site_calls = factory
        for site in list(sites.values()):
            _retire(site)
        sites.clear()


def clear() -> None:
    """Forget cached code classifications and call sites (and their counts)."""
    with _lock:
        _kinds.clear()
        _codes.clear()
        sites.clear()
        retired_launches.clear()


def register_wrapper_code(code: CodeType) -> None:
    """Mark kname's own launch wrapper: a launch found beneath one is nested, and not named."""
    _wrapper_code_ids.add(id(code))
    _codes[id(code)] = code


def resolve(
    frame: FrameType,
    kernel: Any,
    kernel_key: Any,
    kernel_name: str | Callable[[Any], str],
    lib: str,
    rename: Any = None,
) -> Site | None:
    """The site for a launch whose wrapper was called from `frame`; None if it is nested.

    Walks past library frames to the first user frame (or `depth` of them), then looks the key
    up again and builds the site on a miss (with `rename(kernel, site)` as its `launch`).
    `kernel_name` may be a function of the kernel: it is then asked only when a site is built.
    """
    user_frames, outermost_library = _walk(frame, _depth)
    if user_frames is None:
        return None
    site_frames = user_frames or [outermost_library]
    key = _key(site_frames, kernel_key)
    site = sites.get(key)
    if site is None:
        if callable(kernel_name):
            kernel_name = kernel_name(kernel)
        site = _build(key, site_frames, kernel, kernel_name, lib, rename)
    return site


def pass_through(frame: FrameType, kernel: Any) -> None:
    """After a fault in kname at a launch from `frame`: launches of `kernel` from that line run
    from now on as if kname were off, still counted (by a new counter if the old one failed).

    Never raises. Keyed as the launch wrapper's fast path looks sites up, so nothing is retried.
    """
    with contextlib.suppress(Exception), _lock:
        key = (id(frame.f_code), frame.f_lasti, id(kernel))
        site = sites.get(key)
        if site is None:
            alive = ((frame.f_code,), kernel)
            site = Site("<unnamed: kname error>", "", "", "", None, alive, next(_order))
            if len(sites) >= MAX_SITES:
                _evict_oldest()
            sites[key] = site
        site.push = site.pop = site.launch = None
        if type(site.counter) is not itertools.count:
            site.counter = itertools.count()


def kind_of(code: CodeType, module: object) -> int:
    """USER, LIBRARY or WRAPPER for `code`, decided once per code object."""
    kind = _kinds.get(id(code))
    if kind is None:
        kind = LIBRARY if _is_library(code.co_filename, module) else USER
        with _lock:
            if len(_kinds) >= MAX_CODES:
                _kinds.clear()
                _codes.clear()
                for wrapper_id in _wrapper_code_ids:
                    _kinds[wrapper_id] = WRAPPER
            _kinds[id(code)] = kind
            _codes[id(code)] = code
    return kind


def site_name(depth: int = 1, kernel: str = "") -> str:
    """The name a launch made from the line calling this would get (for custom launchers).

    Frames of library code and KNAME_SKIP modules are passed over, as for a launch: called from
    a launch helper listed in KNAME_SKIP, it names the helper's caller.
    """
    frame = sys._getframe(1)
    user_frames, outermost_library = _walk(frame, max(1, int(depth)), stop_at_wrapper=False)
    site_frames = user_frames or [outermost_library or frame]
    key = _key(site_frames, ("site_name", kernel))
    site = sites.get(key)
    if site is None:
        site = _build(key, site_frames, kernel, kernel, "python")
    return site.name


def _walk(
    frame: FrameType | None, depth: int, stop_at_wrapper: bool = True
) -> tuple[list[FrameType] | None, FrameType | None]:
    user_frames: list[FrameType] = []
    outermost_library = None
    while frame is not None and len(user_frames) < depth:
        code = frame.f_code
        if id(code) in _wrapper_code_ids:
            if stop_at_wrapper and not user_frames:
                return None, None  # inside another kname launch: the outer one names it
        elif kind_of(code, frame.f_globals.get("__name__")) == USER:
            user_frames.append(frame)
        elif not user_frames:
            outermost_library = frame
        frame = frame.f_back
    return user_frames, outermost_library


def _library_path_pattern(modules: tuple[str, ...]) -> re.Pattern[str]:
    names = "|".join(re.escape(m) for m in modules)
    return re.compile(r"[/\\](?:site|dist)-packages[/\\](?:" + names + r")(?:[/\\]|\.py)")


_library_path = _library_path_pattern(_library_modules)


def _is_library(filename: str, module: object) -> bool:
    if isinstance(module, str):
        return _matches(module, _library_modules) or _matches(module, _skip)
    # No module name (code run by exec with bare globals): judge by where the file lives.
    return filename.startswith(_KNAME_DIR) or bool(_library_path.search(filename))


def _matches(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _key(frames: list[FrameType], kernel_key: Any) -> tuple:
    # The flat form is the launch wrapper's fast-path key: with KNAME_DEPTH > 1 a site that
    # found one user frame (no caller) must not answer it for a launch that has callers.
    if len(frames) == 1 and _depth == 1:
        return (id(frames[0].f_code), frames[0].f_lasti, kernel_key)
    return (*((id(f.f_code), f.f_lasti) for f in frames), kernel_key)


def _build(
    key: tuple, frames: list[FrameType], kernel: Any, kernel_name: str, lib: str, rename: Any = None
) -> Site:
    try:
        facts = [naming.frame_facts(f) for f in frames]
        name = naming.display_name(_template, kernel_name, lib, facts)
        identifier = naming.identifier_name(kernel_name, facts[0])
        attributes = ranges.attributes_for(name, kernel_name, lib) if _emit_nvtx else None
    except Exception as exc:
        # The site still launches, counted but without a range, and the fault is said once.
        report_fault("naming a call site", exc)
        name, identifier, attributes = f"{kernel_name} <unnamed: kname error>", "", None
    codes = tuple(f.f_code for f in frames)
    with _lock:
        site = sites.get(key)
        if site is None:
            alive = (codes, kernel)
            site = Site(name, identifier, kernel_name, lib, attributes, alive, next(_order))
            if rename is not None and identifier:
                site.launch = _renamed_launch(rename, kernel, site)
            if len(sites) >= MAX_SITES:
                _evict_oldest()
            sites[key] = site
    return site


def _renamed_launch(rename: Any, kernel: Any, site: Site) -> Any:
    """The target's launch of `site`'s renamed kernel; None (the kernel's own name) on failure."""
    try:
        return rename(kernel, site)
    except Exception as exc:
        warn_once(
            f"rename:{site.lib}:{type(exc).__name__}",
            f"KNAME_MODE=rename: could not rename {site.kernel} for {site.name} "
            f"({type(exc).__name__}: {exc}); such launches keep the kernel's own name",
        )
        return None


def _evict_oldest() -> None:
    oldest = next(iter(sites))
    _retire(sites.pop(oldest))


def _retire(site: Site) -> None:
    """Keep a site's launch count under its name, kernel and library, as the census reports it."""
    count = site.launches()
    if count:
        key = (site.name, site.kernel, site.lib)
        if key not in retired_launches and len(retired_launches) >= MAX_SITES:
            key = (ranges.OVERFLOW_NAME, "", "")  # past the bound: counted together, never dropped
        retired_launches[key] = retired_launches.get(key, 0) + count


def _counts_from_zero() -> None:
    """A forked child counts its own launches: the parent reports those made before the fork."""
    for site in list(sites.values()):
        site.counter = itertools.count()
    retired_launches.clear()


reset_in_child(_counts_from_zero)
