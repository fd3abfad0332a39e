"""kname's library launch wrappers out of the call path while kname profile names every launch.

Beneath a profile collecting through the native callback, a launch is named at CUPTI's callback
from the running frame, by the same rules as the wrapper names it from its caller. Where nothing
else reads what the wrappers add (no NVTX tool takes their ranges, KNAME_FORMAT asks for neither
`{kernel}` nor `{lib}`, no census is written, not rename mode), they only cost the launch a call
through C: +0.2 to +0.4 µs a launch in a mixed program, passing through or naming
(docs/benchmarks.md, issue 43). So the session takes them out when it starts
(lifecycle.take_wrappers_out: the targets' changes that name launches undone) and puts them
back when it stops. What stays: torch's and JAX's backward scopes, KNAME_TARGETS launchers (named
at their own call), CuPy's kernel classes bound as kname's subclasses. What a profile gives up
meanwhile: kname.names()'s counts of those launches (the profile counts them itself).
"""

from __future__ import annotations

from kname import lifecycle, ranges

LAUNCH_FIELDS = frozenset({"kernel", "lib"})  # what only a wrapper knows of a launch


def why_kept(native_callback: bool) -> str | None:
    """Why the launch wrappers stay in the call path while this profile collects (None: they
    can go). `native_callback`: the native callback collects (the Python one's look-up from the
    frame costs a Python call a launch, more than the wrapper)."""
    config = lifecycle.current_config()
    if config is None:
        return "kname is not installed"
    if not native_callback:
        return "the Python callback collects"
    if config.mode == "rename":
        return "KNAME_MODE=rename renames kernels in the wrappers"
    if config.report is not None and config.mode != "profile":
        return "a census is written at exit (its counts are the wrappers')"
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
    if why_kept(native_callback) is not None:
        return False
    lifecycle.take_wrappers_out()
    return True


def put_back() -> None:
    """The wrappers take_out() took out, back in the call path."""
    lifecycle.put_wrappers_back()
