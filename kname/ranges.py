"""kname's NVTX domain, its registered strings and prebuilt event attributes.

One `EventAttributes` per distinct name, built once and never mutated. With no NVTX tool attached
the `nvtx` package hands back a dummy domain; then there are no attributes and no ranges.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from typing import Any

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
_attributes: dict[tuple[str, int, str], Any] = {}


def configure(domain_name: str | None = None) -> None:
    """Use `domain_name` for ranges from now on, and open it at once (install() does this).

    Opening imports nvtx (and makes NVTX load its tool) now, not at a first launch: a child
    forked while another thread imports would wait forever for that import's lock. None: the
    default domain, opened on first use (after uninstall(), for site_name()).
    """
    global _domain_name, _domain
    with _lock:
        name = DEFAULT_DOMAIN if domain_name is None else domain_name
        if name != _domain_name:
            _domain_name, _domain = name, None
            _attributes.clear()
    if domain_name is not None:
        domain()


def domain() -> Any:
    """The NVTX domain (a dummy one when no tool is attached); imports nvtx on first use."""
    global _domain, _range_functions
    if _domain is None:
        # Deferred to install(): nvtx imports numpy, which a switched-off kname never pays for.
        import nvtx

        try:
            from nvtx._lib import lib

            _range_functions = (lib.push_range, lib.pop_range)
        except (ImportError, AttributeError):  # another nvtx release: its public methods
            _range_functions = None
        _domain = nvtx.get_domain(_domain_name)
    return _domain


def tool_attached() -> bool:
    """True when an NVTX tool (Nsight, an injection library) receives kname's ranges."""
    return type(domain()).__name__ != "DummyDomain"


def colour_of(kernel: str) -> int:
    """A colour that depends only on the kernel name, the same in every run."""
    return PALETTE[zlib.crc32(kernel.encode("utf-8", "replace")) % len(PALETTE)]


def attributes_for(name: str, kernel: str, lib: str) -> Any:
    """Prebuilt attributes for a range called `name`, or None when no tool is attached."""
    if not tool_attached():
        return None
    key = (name, colour_of(kernel), lib)
    attributes = _attributes.get(key)
    if attributes is not None:
        return attributes
    with _lock:
        if len(_attributes) >= MAX_NAMES:
            # NVTX strings cannot be unregistered: past the bound every new site shares one name.
            key = (OVERFLOW_NAME, PALETTE[0], lib)
        attributes = _attributes.get(key)
        if attributes is None:
            d = domain()
            attributes = d.get_event_attributes(message=key[0], color=key[1], category=lib)
            _attributes[key] = attributes
    return attributes


def range_calls(attributes: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    """Zero-argument push and pop of a range with `attributes`, the cheapest the nvtx package has.

    Its module-level Cython `push_range(attributes, handle)` (what nvtx.annotate uses) skips the
    keyword handling of `Domain.push_range`: 150-220 ns less per launch under a profiler. Both are
    C functions bound to arguments of the types they take: no bytecode runs inside them, so once
    push() is called the range is open, async exceptions or not (kname.launch relies on it).
    """
    d = domain()
    handle = getattr(d, "handle", None)
    if _range_functions is not None and handle is not None:
        push_range, pop_range = _range_functions
        return functools.partial(push_range, attributes, handle), functools.partial(
            pop_range, handle
        )
    return functools.partial(d.push_range, attributes), d.pop_range


def registered_names() -> int:
    """How many distinct range names kname has registered with NVTX."""
    return len(_attributes)
