"""Run a callback when a module is imported (at once if it already is), and again on reload.

kname's own post-import hooks, after wrapt.importer's design: a registry of callbacks by module
name, and a sys.meta_path finder that gives each watched module a loader that calls them once
the module has run. Not wrapt's own: `import wrapt.importer` runs wrapt's package, which imports
asyncio and importlib.metadata, about 20 ms of every KNAME=1 start-up.

kname's finder is kept first on sys.meta_path: a finder inserted ahead of it that claims a
watched module itself (as pytest's assertion rewriter claims test modules) would otherwise
import it unseen. A module that got past it all the same is caught up with at the next import
kname's finder sees, and said once; one never caught up with is said at exit. A module still
being imported when watch() is called (on another thread, or by the code that called it) gets
its callback when its import has finished.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname._locks import new_lock
from kname._warnings import warn_once

# Guards the registry and kname's place on sys.meta_path. Hooks are called outside it: a hook
# may import, or start a thread that watches.
_lock = new_lock()
_watches: list[Watch] = []  # every active Watch, in the order watched
# The names of the modules watched, rebound whole under the lock: the finder reads it, lock-free,
# at every import the program makes.
_watched_names: frozenset[str] = frozenset()
_finder: _HookFinder | None = None  # kname's finder, on sys.meta_path while anything is watched
_overtaken_by: str | None = None  # the finder found ahead of kname's, for messages
_exit_check_registered = False


class Watch:
    """The hook for one module name; calls `callback(module)` until unwatched."""

    def __init__(self, module: str, callback: Callable[[ModuleType], None]) -> None:
        self.module = module
        self.callback = callback
        self.active = True
        self.seen: ModuleType | None = None  # the module object it last ran for

    def __call__(self, module: ModuleType) -> None:
        if not self.active:
            return
        self.seen = module  # first: a callback that imports cannot make the catch-up re-run it
        self.callback(module)


def watch(module: str, callback: Callable[[ModuleType], None]) -> Watch:
    """Call `callback(module)` when `module` is imported or reloaded; now if it is imported."""
    hook = Watch(module, callback)
    with _lock:
        _put_finder()
        # Registered even when the module is imported already: reload() and a retried import
        # go through the finder.
        _watches.append(hook)
        _renew_names()
        existing = sys.modules.get(module)
    if existing is not None and not _fire_when_run(existing, hook):
        hook(existing)
    return hook


def unwatch(hooks: list[Watch]) -> None:
    """Take `hooks` out of the registry (and kname's finder off sys.meta_path, once nothing is
    watched)."""
    global _finder, _overtaken_by
    for hook in hooks:
        hook.active = False
    if not hooks:
        return
    with _lock:
        _watches[:] = [w for w in _watches if w.active]
        _renew_names()
        if not _watches and _finder is not None:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not _finder]
            _finder, _overtaken_by = None, None


def _renew_names() -> None:
    """The finder's set of watched names, from the registry (called under the lock)."""
    global _watched_names
    _watched_names = frozenset(w.module for w in _watches)


def _call_hooks(name: str, module: ModuleType, hooks: list[Watch] | None = None) -> None:
    """Call `hooks` (default: every active one watching `name`) with the module just run."""
    if hooks is None:
        hooks = [w for w in list(_watches) if w.module == name]
    for hook in hooks:
        try:
            hook(module)
        except Exception as exc:  # must not fail the import that has just succeeded
            warn_once(f"hook:{name}", f"could not wrap {name!r} ({exc})")


def is_kname_finder(finder: object) -> bool:
    """Whether `finder` (an entry of sys.meta_path) is kname's."""
    return isinstance(finder, _HookFinder)


class _HookFinder:
    """kname's finder, kept first on sys.meta_path, catching up on what got past.

    For a watched module it asks the finders behind it for the module's spec and gives the spec
    a loader that calls the hooks once the module has run; it answers None for every other
    module, so being first costs the finders behind nothing.
    """

    def __init__(self) -> None:
        # The names this thread is finding: a finder behind that asks the whole import system
        # again (wrapt's does) must not get a second hooked loader for the same import.
        self._finding = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        _keep_first(self)
        _catch_up()
        if fullname not in _watched_names:
            return None
        finding: set[str] = self._finding.__dict__.setdefault("names", set())
        if fullname in finding:
            return None
        finding.add(fullname)
        try:
            spec = _spec_behind(self, fullname, path, target)
        finally:
            finding.discard(fullname)
        loader = getattr(spec, "loader", None)
        # A loader of the old protocol (load_module only) is left alone: the catch-up wraps its
        # module at the next import.
        hookable = hasattr(loader, "exec_module") and hasattr(loader, "create_module")
        if hookable and not isinstance(loader, _HookedLoader):
            spec.loader = _HookedLoader(loader, fullname)
        return spec

    def invalidate_caches(self) -> None:
        pass


def _spec_behind(finder: _HookFinder, fullname: str, path: Any, target: Any) -> Any:
    """The spec the other finders on sys.meta_path give, in their order (None: not found)."""
    for other in list(sys.meta_path):
        find_spec = getattr(other, "find_spec", None)
        if other is finder or find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _HookedLoader:
    """A watched module's loader: its own loader runs it, then its hooks are called.

    Only the import system sees this one: before the module runs, its `__loader__` and
    `__spec__.loader` are its own loader again, as with wrapt's loader.
    """

    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def __getattr__(self, attribute: str) -> Any:  # whatever else is asked of a loader
        if attribute == "loader":  # not set yet (a copy being made): no endless recursion
            raise AttributeError(attribute)
        return getattr(self.loader, attribute)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if getattr(module, "__loader__", None) is self:
            with contextlib.suppress(AttributeError):  # a module type that refuses attributes
                module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if getattr(spec, "loader", None) is self:
            spec.loader = self.loader
        self.loader.exec_module(module)
        _call_hooks(self.name, module)


def _put_finder() -> None:
    """kname's finder on sys.meta_path, first (called under the lock)."""
    global _finder, _exit_check_registered
    if _finder is None:
        _finder = _HookFinder()
        sys.meta_path.insert(0, _finder)
    _keep_first(_finder)
    if not _exit_check_registered:
        atexit.register(_say_missed_at_exit)
        _exit_check_registered = True


def _keep_first(finder: _HookFinder) -> None:
    """Move kname's finder back to the front if another was put ahead of it.

    Safe while the import system iterates sys.meta_path: the finders that were ahead have been
    asked, and the iteration goes on with the one that followed kname's.
    """
    global _overtaken_by
    meta_path = sys.meta_path
    if meta_path and meta_path[0] is not finder:
        ahead = meta_path[0]
        try:
            meta_path.remove(finder)
        except ValueError:  # uninstalled meanwhile, on another thread
            return
        meta_path.insert(0, finder)
        _overtaken_by = _describe(ahead)


def _catch_up() -> None:
    """Run the hooks of watched modules that were imported without kname's finder seeing them."""
    for hook in list(_watches):
        module = sys.modules.get(hook.module)
        if module is None or module is hook.seen or not hook.active or _running(module):
            continue
        if _overtaken_by is not None and _imported_by_name(module, hook.module):
            warn_once(
                f"overtaken:{hook.module}",
                f"module {hook.module!r} was imported by another import hook ahead of kname's "
                f"({_loader_of(module)}); kname wrapped it only now, so its launches until now "
                "were not named",
            )
        hook(module)


def _say_missed_at_exit() -> None:
    """Say which watched modules an import hook ahead of kname's imported for good unseen."""
    ahead = _finder is not None and bool(sys.meta_path) and sys.meta_path[0] is not _finder
    for hook in list(_watches):
        module = sys.modules.get(hook.module)
        if module is None or module is hook.seen or not hook.active:
            continue
        if (ahead or _overtaken_by is not None) and _imported_by_name(module, hook.module):
            warn_once(
                f"overtaken:{hook.module}",
                f"module {hook.module!r} was imported by another import hook ahead of kname's "
                f"({_loader_of(module)}), so its launches were not named; call kname.install() "
                "after that hook is set up",
            )


def _imported_by_name(module: ModuleType, name: str) -> bool:
    """Whether `module` was imported as `name` (not another module bound to it by hand, as
    numba's simulator binds its dispatcher to numba.cuda.dispatcher)."""
    spec = getattr(module, "__spec__", None)
    return getattr(spec, "name", None) == name and getattr(spec, "loader", None) is not None


# --- a module still being imported -----------------------------------------------------------


class _RunningSpec(importlib.machinery.ModuleSpec):
    """The spec of a module that was still being imported when it was watched.

    importlib sets `spec._initializing` True while the module runs and False when it has run
    (in a finally, so also when it failed); that is the moment its waiting hooks are called,
    on the importing thread, as kname's loader calls them. Then the spec is a ModuleSpec again.
    """

    @property
    def _initializing(self) -> bool:
        return self.__dict__.get("_initializing", False)

    @_initializing.setter
    def _initializing(self, value: bool) -> None:
        if not value:
            # Still marked as running while the hooks run: another thread importing the module
            # meanwhile waits for them, as for kname's loader.
            self._call_waiting_hooks()
            self.__class__ = importlib.machinery.ModuleSpec
        self.__dict__["_initializing"] = value

    def _call_waiting_hooks(self) -> None:
        hooks = self.__dict__.pop("_kname_waiting", [])
        module = sys.modules.get(self.name)
        if module is None or getattr(module, "__spec__", None) is not self:
            return  # the import failed: the hooks stay registered for the next attempt
        _call_hooks(self.name, module, hooks)


def _running(module: ModuleType) -> bool:
    """Whether `module` is still being imported (its code has not finished running)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _fire_when_run(module: ModuleType, hook: Watch) -> bool:
    """If `module` is still being imported, have `hook` called once it has run; else False."""
    if not _running(module):
        return False
    spec = module.__spec__
    if type(spec) is importlib.machinery.ModuleSpec:
        spec.__class__ = _RunningSpec
    if type(spec) is _RunningSpec:
        spec.__dict__.setdefault("_kname_waiting", []).append(hook)
    # Any other spec: the catch-up runs the hook at the next import after the module has run.
    return True


# --- messages --------------------------------------------------------------------------------


def _describe(finder: object) -> str:
    kind = finder if isinstance(finder, type) else type(finder)
    return f"{kind.__module__}.{kind.__qualname__}"


def _loader_of(module: ModuleType) -> str:
    loader = getattr(getattr(module, "__spec__", None), "loader", None)
    return f"its loader: {_describe(loader)}" if loader is not None else "no loader"
