"""A fault at a launch: kname's own (said once, the launch counted and its line unnamed from then
on) or raised into kname from outside (it reaches the program, before the launch).

kname.faults tells the two apart; this is what the launch wrapper calls on its error path
(`pass_through`), and how a line gives up.
"""

from __future__ import annotations

from types import CodeType, FrameType
from typing import Any

from kname import callsite, counters, faults, hotpath, site_cache, walk
from kname._warnings import report_fault, warn_once


def pass_through(
    frame: FrameType,
    kernel: Any,
    site: callsite.Site | None,
    exc: BaseException,
    where: str,
    again: BaseException | None,
) -> bool:
    """After `exc` while `where` at a launch of `kernel` from `frame`: whether it was kname's own
    fault (kname.faults). If it was: count the launch, say so once, and from then on launch
    from its call site as if kname were off; the launch runs. If not (raised into kname from
    outside), nothing changes: the wrapper raises `exc`, before the launch.

    `again`: what the failed step raised when taken once more (None: nothing), or `exc` itself
    where it was not taken again. `site` is the site the launch had found (it was counted then),
    or None; `kernel` is None if even the kernel is unknown. Only the launch's own call site
    gives up, never a library line that others call through. At the recursion limit nothing
    gives up: a launch from higher up is named. The launch wrapper calls this from its error
    path only; what it raises was raised into it from outside.
    """
    if isinstance(exc, RecursionError):
        try:
            # Counted here and at once: at the limit there may be no room for another call.
            if site is None or not hotpath.is_counter(site.counter):
                next(counters.at_recursion_limit)
            _say_recursion_limit()
        except RecursionError:  # at the limit even this may fail: the launch must still run
            pass
        return True
    if not faults.is_kname_fault(exc, again, walk._wrapper_code_ids):
        return False
    try:
        report_fault(where, exc)
        _give_up(frame, kernel, site)
    except RecursionError:
        pass
    return True


def _give_up(frame: FrameType, kernel: Any, site: callsite.Site | None) -> None:
    with site_cache._lock:
        if site is None:  # the fault came while finding the site: the launch is not counted
            if kernel is None:
                return  # not even the kernel is known: nothing to count it under
            site = _fault_site(frame, kernel)
            if site is None:
                return  # nested in another kname launch, which counts it
            counted = False
        else:
            counted = hotpath.is_counter(site.counter)  # next() on one cannot fail
            if not counted:
                site.counter = counters.counter_for(site.name, site.kernel, site.lib)
        site.push = site.pop = site.launch = None
        if not counted:
            next(site.counter)


def _fault_site(frame: FrameType, kernel: Any) -> callsite.Site | None:
    """The site a launch from `frame` belongs to, found with the decisions made before the fault
    (a frame not yet judged counts as the user's); a pass-through one if none is cached."""
    depth = callsite._rules.depth
    user_frames, library_frame, compiling = walk.stack(frame, depth, _known_kind)
    if user_frames is None:
        return None
    key, site_frames = walk.site_key(user_frames, library_frame, id(kernel), depth, compiling)
    site = site_cache.sites.get(key)
    if site is None:
        codes = tuple(f.f_code for f in site_frames)
        counter = counters.counter_for(callsite.UNNAMED, "", "")
        refs = site_cache.code_refs(key, codes)
        site = callsite.Site(callsite.UNNAMED, "", "", "", None, refs, counter)
        site_cache.store(key, site, kernel, id(kernel))
    return site


def _known_kind(code: CodeType, module: object) -> int:
    return callsite._kinds.get(id(code), walk.USER)


def _say_recursion_limit() -> None:
    warn_once(
        "recursion-limit",
        f"a launch made near the recursion limit ran unnamed (no room on the stack to find its "
        f"call site); such launches are counted as {counters.AT_RECURSION_LIMIT!r}",
    )
