"""Objects that tell kname's C hot path of every change to them: call sites and switches.

The C wrapper (its recent table: kname/_native_c/callsite.h) remembers, for each recent call
site, what a cached launch from it reads: that its wrapper's switch is on, and the site's
counter and NVTX range. So a launch reads one remembered entry instead of the site and the
switch. Whatever changes a site or a switch, or their classes (a slot replaced, a method set),
first makes it forget all of that, and again once the change is made, for anything remembered
while it was being made; the next launch from each site reads afresh. The pure-Python wrapper
reads them at every launch and has nothing to forget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The C extension's forget_launches, given by kname.hotpath once it has imported the extension:
# before that no launch of it has remembered anything.
_forget_launches: Callable[[], None] | None = None


def forget_with(forget_launches: Callable[[], None]) -> None:
    """From now on every change calls `forget_launches()` (the C extension's)."""
    global _forget_launches
    _forget_launches = forget_launches


def forget() -> None:
    """Make the C wrapper forget what its cached launches remember."""
    forget_launches = _forget_launches
    if forget_launches is not None:
        forget_launches()


class WatchedClass(type):
    """A class that tells of changes to itself (an attribute set or deleted, bases set)."""

    def __setattr__(cls, name: str, value: Any) -> None:
        forget()
        super().__setattr__(name, value)
        forget()

    def __delattr__(cls, name: str) -> None:
        forget()
        super().__delattr__(name)
        forget()


class Watched(metaclass=WatchedClass):
    """An object that tells of changes to itself (an attribute set or deleted)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        forget()
        object.__setattr__(self, name, value)
        forget()

    def __delattr__(self, name: str) -> None:
        forget()
        object.__delattr__(self, name)
        forget()
