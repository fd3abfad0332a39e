# kname._native: the C hot path (kname/_native_c/). Imported by kname.hotpath only; each type has
# a Python twin in kname.pyhotpath, and both satisfy the protocols of kname.hotpath.

from collections.abc import Callable
from types import FrameType
from typing import Any, final

from kname.hotpath import RangeCalls

USER: int  # callsite.USER: the kinds a walk in C tells apart
LIBRARY: int

@final
class LaunchWrapper:
    """kname's per-launch wrapper (hotpath.LaunchWrapperFactory); binds like a function."""

    __wrapped__: Callable[..., Any]
    def __init__(
        self,
        original: Callable[..., Any],
        kernel: tuple[int, str | None] | Callable[[tuple], Any] | None,
        switch: Any,
        sites: dict[tuple, Any],
        resolve: Callable[[FrameType, Any], Any],
        fault: Callable[..., bool],
        kinds: dict[int, int],
        launchers: int = 0,
        miss: Any = None,  # callsite.NativeMiss: a miss from a user's line is named in C
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: Any, owner: type | None = None) -> Any: ...

@final
class Counter:
    """A launch counter counting as itertools.count() does, from 0 (hotpath.Counter)."""

    value: int  # launches counted so far (read-only)
    def __init__(self) -> None: ...
    def __iter__(self) -> Counter: ...
    def __next__(self) -> int: ...

@final
class SkipBeneath:
    """SkipBeneath(hook, kinds): hook, except beneath a kname launch (returns None there)."""

    __wrapped__: Callable[..., Any]
    def __init__(self, hook: Callable[..., Any], kinds: dict[int, int]) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

@final
class SubscriptLaunch:
    """A __getitem__: obj[key](*args, **kwargs) calls
    launch(obj.<method>, *args, **kwargs, <key_keyword>=key, **fixed), with no frame between."""

    def __init__(
        self, launch: Callable[..., Any], method: str, key_keyword: str, fixed: dict[str, Any]
    ) -> None: ...
    def __call__(self, obj: Any, key: Any) -> BoundLaunch: ...
    def __get__(self, obj: Any, owner: type | None = None) -> Any: ...

@final
class BoundLaunch:
    """obj[key] of a SubscriptLaunch: call it to launch."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

@final
class BaseCall:
    """BaseCall(base): base.__call__(self, *args, **kwargs), straight to base's C slot."""

    base: type
    def __init__(self, base: type) -> None: ...
    def __call__(self, instance: Any, *args: Any, **kwargs: Any) -> Any: ...

def forget_launches() -> None: ...
def watch_changes_of(cls: type, /) -> None: ...
def is_launch_caller(frame: FrameType, /) -> bool: ...
def inside_launcher() -> bool: ...
def use_direct_call(cls: type, /) -> None: ...
def has_direct_call(cls: type, /) -> bool: ...

# Only where the extension was built with NVTX's headers (hotpath: nvtx_range, nvtx_domain).
def nvtx_domain(name: str, /) -> bool: ...
def nvtx_range(domain: str, message: str, argb: int, category: str, /) -> RangeCalls | None: ...

# Only where the driver hook is built (NVTX's headers, Linux x86-64/aarch64): kname.driver_hook.
def driver_hook_install(
    namer: Callable[[FrameType | None], Any], kinds: dict[int, int], /
) -> str: ...
def driver_hook_uninstall() -> None: ...
def driver_hook_set_frameless(push: Any, /) -> None: ...
def driver_hook_forget() -> None: ...
def driver_hook_state() -> dict[str, Any]: ...
