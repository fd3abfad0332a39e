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
_attributes: dict[tuple[str, int, str], Any] = {}


def configure(domain_name: str = DEFAULT_DOMAIN) -> None:
    """Use `domain_name` for ranges created from now on."""
    global _domain_name, _domain
    with _lock:
        if domain_name != _domain_name:
            _domain_name, _domain = domain_name, None
            _attributes.clear()


def domain() -> Any:
    """The NVTX domain (a dummy one when no tool is attached); imports nvtx on first use."""
    global _domain
    if _domain is None:
        import nvtx  # deferred: it imports numpy, which a switched-off kname never pays for

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
    keyword handling of `Domain.push_range`: 150-220 ns less per launch under a profiler.
    """
    d = domain()
    try:
        from nvtx._lib import lib

        handle = d.handle
        return functools.partial(lib.push_range, attributes, handle), functools.partial(
            lib.pop_range, handle
        )
    except (ImportError, AttributeError):  # another nvtx release: its public methods
        return functools.partial(d.push_range, attributes), d.pop_range


def registered_names() -> int:
    """How many distinct range names kname has registered with NVTX."""
    return len(_attributes)
