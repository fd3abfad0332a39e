"""Objects that tell kname's C hot path of every change to them: call sites and switches.

The C wrapper (kname/_native_launch.h) remembers, for each recent call site, what a cached
launch from it reads: that its wrapper's switch is on, and the site's counter and NVTX range. So
a launch reads one remembered entry instead of the site and the switch. Whatever changes a site or a
switch, or their classes (a slot replaced, a method set), first makes it forget all of that,
and again once the change is made, for anything remembered while it was being made; the next
launch from each site reads afresh. The pure-Python wrapper reads them at every launch and has
nothing to forget.
"""

from __future__ import annotations

import sys
from typing import Any

HOT_PATH = "kname._native"


def forget() -> None:
    """Make the C wrapper forget what its cached launches remember (nothing to do before the
    extension is imported: no launch of it has remembered anything)."""
    native = sys.modules.get(HOT_PATH)  # never imports: a change must not import
    if native is not None:
        native.forget_launches()


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
