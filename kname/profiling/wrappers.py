"""kname's library launch wrappers out of the call path while kname profile names every launch.

Beneath a profile collecting through the native callback, a launch is named at CUPTI's callback
from the running frame, by the same rules as the wrapper names it from its caller. Where nothing
else reads what the wrappers add (no NVTX tool takes their ranges, KNAME_FORMAT asks for neither
`{kernel}` nor `{lib}`, no census is written, no stretch reads the counts as the program runs
(`%%kname`, `kname_census`), not rename mode), they only cost the launch a call through C: +0.2
to +0.4 µs a launch in a mixed program, passing through or naming (docs/benchmarks.md, issue
43). So the session takes them out when it starts and puts them back when it stops, through the
install (lifecycle.take_wrappers_out: the targets' changes that name launches undone), which
serves itself here as kname.profile(), KNAME_MODE=profile and the on-demand windows make
sessions (a layer below it, this module cannot import it). A stretch begun meanwhile puts them
back at once (counters.read_from_now_on); a collector tagging launches with CUPTI external
correlation ids keeps them (they push the ids: session.start). What stays: torch's and JAX's
backward scopes, KNAME_TARGETS launchers (named at their own call), CuPy's kernel classes bound
as kname's subclasses. What a profile gives up meanwhile: kname.names()'s counts of those
launches (the profile counts them itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from kname import counters, ranges

LAUNCH_FIELDS = frozenset({"kernel", "lib"})  # what only a wrapper knows of a launch


class Install(NamedTuple):
    """What the running install lends a profile (lifecycle: current_config and its wrappers)."""

    config: Callable[[], Any]  # the install's Config, None when not installed
    take_out: Callable[[], None]
    put_back: Callable[[], None]


_install: Install | None = None


def serve(install: Install) -> None:
    """Sessions from now on move the wrappers through `install` (lifecycle's)."""
    global _install
    _install = install


def why_kept(native_callback: bool) -> str | None:
    """Why the launch wrappers stay in the call path while this profile collects (None: they
    can go). `native_callback`: the native callback collects (the Python one's look-up from the
    frame costs a Python call a launch, more than the wrapper)."""
    install = _install
    config = install.config() if install is not None else None
    if config is None:
        return "kname is not installed"
    if not native_callback:
        return "the Python callback collects"
    if config.mode == "rename":
        return "KNAME_MODE=rename renames kernels in the wrappers"
    if config.report is not None and config.mode != "profile":
        return "a census is written at exit (its counts are the wrappers')"
    if counters.read_while_running():
        return "launch counts are read as the program runs (a notebook cell's or a test's census)"
    if LAUNCH_FIELDS & format_fields(config.format):
        return "KNAME_FORMAT names the kernel or the library"
    if ranges.tool_attached():
        return "an NVTX tool takes the wrappers' ranges"
    return None


def format_fields(template: str) -> set[str]:
    """The names of the fields of a KNAME_FORMAT template (`kernel` of `{kernel!r:>10}`)."""
    import _string  # str.format's own parser, built in

    try:
        fields = [field for _, field, _, _ in _string.formatter_parser(template) if field]
    except ValueError:
        return set()
    return {field.split(".", 1)[0].split("[", 1)[0] for field in fields}


def take_out(native_callback: bool) -> bool:
    """The launch wrappers out of the call path where why_kept says nothing; whether they were
    taken out (then put_back() at the session's end)."""
    install = _install
    if install is None or why_kept(native_callback) is not None:
        return False
    install.take_out()
    return True


def put_back() -> None:
    """The wrappers take_out() took out, back in the call path."""
    if _install is not None:
        _install.put_back()
