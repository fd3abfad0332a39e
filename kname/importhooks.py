"""Run a callback when a module is imported (at once if it already is), and again on reload.

Built on wrapt's post-import hooks: a registry of callbacks by module name, and a sys.meta_path
finder that gives each watched module a loader that calls them once the module has run. Every
use of wrapt's private registry is in this module.

kname puts its own finder (wrapt's, behind a small front) on sys.meta_path and keeps it first:
a finder inserted ahead of it that claims a watched module itself (as pytest's assertion
rewriter claims test modules) would otherwise import it unseen. A module that got past it all
the same is caught up with at the next import kname's finder sees, and said once; one never
caught up with is said at exit. A module still being imported when watch() is called (on
another thread, or by the code that called it) gets its callback when its import has finished.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname._locks import reset_in_child
from kname._warnings import warn_once

_watches: list[Watch] = []  # every active Watch, in the order watched
_front: _FrontFinder | None = None  # kname's finder, on sys.meta_path while anything is watched
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
        try:
            self.callback(module)
        finally:
            _rearm(self)


def watch(module: str, callback: Callable[[ModuleType], None]) -> Watch:
    """Call `callback(module)` when `module` is imported or reloaded; now if it is imported."""
    from wrapt import importer  # deferred: wrapt costs tens of ms to import

    hook = Watch(module, callback)
    with importer._post_import_hooks_lock:
        _put_front_finder(importer)
        # Registered even when the module is imported already: reload() and a retried import
        # go through the finder, which acts only for names that have hooks.
        importer._post_import_hooks.setdefault(module, []).append(hook)
        _watches.append(hook)
        existing = sys.modules.get(module)
    # Called outside wrapt's lock, as wrapt calls hooks: a callback may import, or start a
    # thread that registers hooks.
    if existing is not None and not _fire_when_run(existing, hook):
        hook(existing)
    return hook


def unwatch(hooks: list[Watch]) -> None:
    """Take `hooks` out of wrapt's registry (and kname's finder, once nothing is watched)."""
    global _front, _overtaken_by
    for hook in hooks:
        hook.active = False
    if not hooks:
        return
    from wrapt import importer

    with importer._post_import_hooks_lock:
        for hook in hooks:
            registered = importer._post_import_hooks.get(hook.module, [])
            remaining = [h for h in registered if h is not hook]
            if remaining:
                importer._post_import_hooks[hook.module] = remaining
            else:
                importer._post_import_hooks.pop(hook.module, None)
        _watches[:] = [w for w in _watches if w.active]
        if not _watches and _front is not None:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not _front]
            _front, _overtaken_by = None, None


def is_kname_finder(finder: object) -> bool:
    """Whether `finder` (an entry of sys.meta_path) is kname's."""
    return isinstance(finder, _FrontFinder)


class _FrontFinder:
    """wrapt's post-import finder, kept first on sys.meta_path, catching up on what got past.

    Being first costs the finders behind nothing: for a watched module wrapt's finder asks the
    whole sys.meta_path again (them included) and only wraps the loader of the spec it gets; it
    answers None for every other module.
    """

    def __init__(self, hook_finder: Any) -> None:
        self.hook_finder = hook_finder

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        _keep_first(self)
        _catch_up()
        return self.hook_finder.find_spec(fullname, path, target)

    def invalidate_caches(self) -> None:
        pass


def _put_front_finder(importer: Any) -> None:
    """kname's finder on sys.meta_path, first (called under wrapt's lock)."""
    global _front, _exit_check_registered
    if _front is None:
        _front = _FrontFinder(importer.ImportHookFinder())
        sys.meta_path.insert(0, _front)
    _keep_first(_front)
    if not _exit_check_registered:
        atexit.register(_say_missed_at_exit)
        _exit_check_registered = True


def _keep_first(finder: _FrontFinder) -> None:
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
    ahead = _front is not None and bool(sys.meta_path) and sys.meta_path[0] is not _front
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
    on the importing thread, as wrapt's loader calls them. Then the spec is a ModuleSpec again.
    """

    @property
    def _initializing(self) -> bool:
        return self.__dict__.get("_initializing", False)

    @_initializing.setter
    def _initializing(self, value: bool) -> None:
        if not value:
            # Still marked as running while the hooks run: another thread importing the module
            # meanwhile waits for them, as for wrapt's loader.
            self._call_waiting_hooks()
            self.__class__ = importlib.machinery.ModuleSpec
        self.__dict__["_initializing"] = value

    def _call_waiting_hooks(self) -> None:
        hooks = self.__dict__.pop("_kname_waiting", [])
        module = sys.modules.get(self.name)
        if module is None or getattr(module, "__spec__", None) is not self:
            return  # the import failed: the hooks stay registered for the next attempt
        for hook in hooks:
            try:
                hook(module)
            except Exception as exc:  # must not fail the import that has just succeeded
                warn_once(f"hook:{self.name}", f"could not wrap {self.name!r} ({exc})")


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


def _rearm(hook: Watch) -> None:
    """Leave the hook registered after it fired, so importlib.reload() wraps the new module.

    wrapt drops a module's hooks once they have run; reload() consults the meta_path finders
    again, and wrapt's finder only intervenes for module names that still have hooks.
    """
    from wrapt import importer

    # Checked under wrapt's lock, which unwatch() takes after clearing `active`: a hook firing
    # while it is unwatched is either removed by unwatch() or never put back.
    with importer._post_import_hooks_lock:
        if not hook.active:
            return
        hooks = importer._post_import_hooks.setdefault(hook.module, [])
        if hook not in hooks:
            hooks.append(hook)


def _renew_wrapt_lock() -> None:
    # wrapt's finder takes this lock on every import a forked child makes; another thread of the
    # parent may have held it at the fork.
    importer = sys.modules.get("wrapt.importer")
    if importer is not None and _front is not None:
        importer._post_import_hooks_lock = threading.RLock()


reset_in_child(_renew_wrapt_lock)
