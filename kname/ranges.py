"""kname's NVTX domain and its ranges: one prebuilt push and pop per distinct range name.

Each name's attributes (a registered string, a colour, the library as category) are built once
and never mutated. Where the hot path in effect has them (kname._native built with the NVTX
headers; kname.hotpath), push and pop are its C objects, which call the NVTX C API (and which its
launch wrapper calls without a Python call), and the nvtx package (which imports numpy) is never
imported; otherwise, and with KNAME_NATIVE=0, the nvtx package's calls. With no NVTX tool
attached there are no ranges.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

from kname import hotpath
from kname._locks import new_lock
from kname.config import DEFAULT_DOMAIN

MAX_NAMES = 100_000
OVERFLOW_NAME = "kname: call-site limit reached"

# Twelve colours that stay apart on a dark or light timeline (ARGB).
PALETTE = (
    0xFF4E79A7, 0xFFF28E2B, 0xFFE15759, 0xFF76B7B2, 0xFF59A14F, 0xFFEDC948,
    0xFFB07AA1, 0xFFFF9DA7, 0xFF9C755F, 0xFFBAB0AC, 0xFF1F9E89, 0xFF8C6BB1,
)  # fmt: skip

_lock = new_lock()
_domain_name = DEFAULT_DOMAIN
_domain: Any = None
_range_functions: Any = None  # nvtx's module-level Cython (push_range, pop_range), if it has them
Calls = hotpath.RangeCalls  # a range's push and pop
_ranges: dict[tuple[str, int, str, Any], Calls] = {}  # (name, colour, library, maker) -> calls


def configure(domain_name: str | None = None) -> None:
    """Use `domain_name` for ranges from now on, and open it at once (install() does this).

    Opening makes NVTX load its tool now, not at a first launch; on the nvtx package's calls it
    also imports nvtx now: a child forked while another thread imports would wait forever for
    that import's lock. None: the default domain, opened on first use (after uninstall(), for
    site_name()).
    """
    global _domain_name, _domain
    with _lock:
        name = DEFAULT_DOMAIN if domain_name is None else domain_name
        if name != _domain_name:
            _domain_name, _domain = name, None
            _ranges.clear()
    if domain_name is not None:
        tool_attached()


def domain_name() -> str:
    """The NVTX domain of kname's ranges (configure())."""
    return _domain_name


def domain() -> Any:
    """The nvtx package's domain (a dummy one when no tool is attached); imports nvtx on first
    use. Only the nvtx package's range calls need it."""
    global _domain, _range_functions
    if _domain is None:
        # Deferred to a need: nvtx imports numpy, which the C calls and a switched-off kname
        # never pay for.
        import nvtx

        try:
            from nvtx._lib import lib

            _range_functions = (lib.push_range, lib.pop_range)
        except (ImportError, AttributeError):  # another nvtx release: its public methods
            _range_functions = None
        _domain = nvtx.get_domain(_domain_name)
    return _domain


def tool_attached() -> bool:
    """True when an NVTX tool (Nsight, an injection library) receives kname's ranges.

    Asked of the NVTX table whose calls the hot path makes ranges with: the extension's own
    where it has one (no nvtx import), else the nvtx package's. Both load the same tool.
    """
    open_domain = hotpath.current().nvtx_domain
    if open_domain is not None:
        return bool(open_domain(_domain_name))
    return type(domain()).__name__ != "DummyDomain"


def colour_of(kernel: str) -> int:
    """A colour that depends only on the kernel name, the same in every run."""
    return PALETTE[zlib.crc32(kernel.encode("utf-8", "replace")) % len(PALETTE)]


def range_for(name: str, kernel: str, lib: str) -> Calls | None:
    """Zero-argument push and pop of a range called `name`, or None when no tool is attached."""
    if not tool_attached():
        return None
    maker = hotpath.current().nvtx_range
    # Keyed by the maker too: KNAME_NATIVE=0 then gets the nvtx package's calls even for a name
    # an earlier install() gave C calls.
    key = (name, colour_of(kernel), lib, maker)
    calls = _ranges.get(key)
    if calls is not None:
        return calls
    with _lock:
        if len(_ranges) >= MAX_NAMES:
            # NVTX strings cannot be unregistered: past the bound every new site shares one name.
            key = (OVERFLOW_NAME, PALETTE[0], lib, maker)
        calls = _ranges.get(key)
        if calls is None:
            calls = _range_calls(maker, *key[:3])
            _ranges[key] = calls
    return calls


def _range_calls(
    maker: hotpath.NvtxRangeMaker | None, message: str, colour: int, lib: str
) -> Calls:
    """push and pop of one range, the cheapest there are.

    The C extension's calls where the hot path has them (`maker`). Else the nvtx package's
    module-level Cython `push_range(attributes, handle)` (what nvtx.annotate uses), which skips
    the keyword handling of `Domain.push_range`: 150-220 ns less per launch under a profiler.
    Either way the calls are C functions bound to their arguments: no bytecode runs inside them,
    so once push() is called the range is open, async exceptions or not (kname.launch relies on
    it).
    """
    if maker is not None:
        calls = maker(_domain_name, message, colour, lib)
        if calls is not None:
            return calls
    d = domain()
    attributes = d.get_event_attributes(message=message, color=colour, category=lib)
    handle = getattr(d, "handle", None)
    if _range_functions is not None and handle is not None:
        push_range, pop_range = _range_functions
        return functools.partial(push_range, attributes, handle), functools.partial(
            pop_range, handle
        )
    return functools.partial(d.push_range, attributes), d.pop_range


def registered_names() -> int:
    """How many range names kname has registered with NVTX (a name registered through both
    the C calls and the nvtx package's counts twice)."""
    return len(_ranges)
