"""Run a callback when a module is imported (at once if it already is), and again on reload.

Built on wrapt's post-import hooks: a registry of callbacks by module name, and a sys.meta_path
finder that gives each watched module a loader that calls them once the module has run. Every
use of wrapt's private registry is in this module.

wrapt is put to work at the first need, not at watch(): `import wrapt.importer` runs wrapt's
package, which imports asyncio (about 20 ms), and most KNAME=1 start-ups import no watched module.
Until then kname's front finder holds the watched names itself, and a hook for a module already
imported is called at once; the first watched module imported (or reloaded) gets a loader that,
once the module has run, imports wrapt, hands every watch to wrapt's registry and has wrapt's
notify_module_loaded call its hooks. From then on the front finder hands watched modules to
wrapt's finder.

kname keeps its front finder first on sys.meta_path: a finder inserted ahead of it that claims a
watched module itself (as pytest's assertion rewriter claims test modules) would otherwise
import it unseen. A module that got past it all the same is caught up with at the next import
kname's finder sees, and said once; one never caught up with is said at exit. A module still
being imported when watch() is called (on another thread, or by the code that called it) gets
its callback when its import has finished.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname import _sigterm
from kname._locks import new_lock, reset_in_child
from kname._warnings import warn_once

# Guards kname's registry, its place on sys.meta_path and the hand-over to wrapt. Taken before
# wrapt's lock, never after it; never held while importing (another thread's import may be
# waiting for this one's module lock) nor while a hook runs (a hook may import, or watch).
_lock = new_lock()
_watches: list[Watch] = []  # every active Watch, in the order watched
# The names of the modules watched, rebound whole under the lock: the front finder reads it,
# lock-free, at every import the program makes.
_watched_names: frozenset[str] = frozenset()
_front: _FrontFinder | None = None  # kname's finder, on sys.meta_path while anything is watched
_overtaken_by: str | None = None  # the finder found ahead of kname's, for messages
_exit_check_registered = False

# wrapt.importer once it holds every watch, and the wrapt finder kname's front finder hands
# watched modules to (None: not needed yet).
_importer: Any = None
_wrapt_finder: Any = None
# The threads importing wrapt for kname now; a thread meeting a watched module inside that import
# leaves it to the catch-up (its import of wrapt has not finished).
_importing_wrapt: set[int] = set()
# Set in a child forked while another thread imported wrapt: that thread's module locks stay held
# in the child, whose own import of wrapt would wait forever; its modules are caught up with.
_wrapt_unsafe = False


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
        except Exception as exc:  # wrapt would fail the import that has just succeeded
            warn_once(f"hook:{self.module}", f"could not wrap {self.module!r} ({exc})")
        finally:
            _rearm(self)


def watch(module: str, callback: Callable[[ModuleType], None]) -> Watch:
    """Call `callback(module)` when `module` is imported or reloaded; now if it is imported."""
    hook = Watch(module, callback)
    with _lock:
        _put_front_finder()
        # Registered even when the module is imported already: reload() and a retried import
        # go through the finders, which act only for names that have hooks.
        _watches.append(hook)
        _renew_names()
        # Until wrapt is in use, kname's registry alone holds it: _use_wrapt() hands it over.
        if _importer is not None:
            _register(_importer, hook)
        existing = sys.modules.get(module)
    # Called outside the locks, as wrapt calls hooks: a callback may import, or start a thread
    # that watches.
    if existing is not None and not _fire_when_run(existing, hook):
        hook(existing)
    return hook


def unwatch(hooks: list[Watch]) -> None:
    """Take `hooks` out of the registries (and kname's finder off sys.meta_path, once nothing is
    watched)."""
    global _front, _overtaken_by
    for hook in hooks:
        hook.active = False
    if not hooks:
        return
    with _lock:
        _watches[:] = [w for w in _watches if w.active]
        _renew_names()
        if _importer is not None:
            with _importer._post_import_hooks_lock:
                for hook in hooks:
                    _take_out_of_wrapt(_importer, hook)
        if not _watches and _front is not None:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not _front]
            _front, _overtaken_by = None, None


def is_kname_finder(finder: object) -> bool:
    """Whether `finder` (an entry of sys.meta_path) is kname's."""
    return isinstance(finder, _FrontFinder)


def _renew_names() -> None:
    """The front finder's set of watched names, from the registry (called under the lock)."""
    global _watched_names
    _watched_names = frozenset(w.module for w in _watches)


# --- wrapt's registry --------------------------------------------------------------------------


def _register(importer: Any, hook: Watch) -> None:
    """Put `hook` in wrapt's registry, once (called under kname's lock)."""
    if not hook.active:
        return
    with importer._post_import_hooks_lock:
        hooks = importer._post_import_hooks.setdefault(hook.module, [])
        if hook not in hooks:
            hooks.append(hook)


def _take_out_of_wrapt(importer: Any, hook: Watch) -> None:
    """Remove `hook` from wrapt's registry, leaving other hooks of its module be."""
    registered = importer._post_import_hooks.get(hook.module, [])
    remaining = [h for h in registered if h is not hook]
    if remaining:
        importer._post_import_hooks[hook.module] = remaining
    else:
        importer._post_import_hooks.pop(hook.module, None)


def _rearm(hook: Watch) -> None:
    """Leave the hook registered after it fired, so importlib.reload() wraps the new module.

    wrapt drops a module's hooks once they have run; reload() consults the meta_path finders
    again, and wrapt's finder only intervenes for module names that still have hooks.
    """
    # Checked under kname's lock, which unwatch() takes after clearing `active`: a hook firing
    # while it is unwatched is either removed by unwatch() or never put back.
    with _lock:
        if _importer is not None:
            _register(_importer, hook)


def _use_wrapt() -> Any:
    """wrapt.importer, holding every watch; imported the first time (None: not usable now).

    Called by a loader, never in a find_spec: see _first_spec.
    """
    global _importer, _wrapt_finder
    if _importer is not None:
        return _importer
    me = threading.get_ident()
    # A watched module met while this thread imports wrapt (one wrapt itself imports) is left to
    # the catch-up: wrapt.importer, half run here, has no registry yet.
    if me in _importing_wrapt or _wrapt_unsafe:
        return None
    # Imported outside kname's lock: another thread importing a watched module at the same
    # moment waits for this import in importlib, which sees a deadlock where kname's lock could not.
    _importing_wrapt.add(me)
    try:
        from wrapt import importer
    except Exception as exc:  # a broken wrapt must not fail the program's import
        warn_once("wrapt", f"could not import wrapt ({exc}); modules are wrapped late")
        return None
    finally:
        _importing_wrapt.discard(me)
    with _lock:
        if _importer is None:
            for hook in _watches:
                _register(importer, hook)
            # Published last: a thread that reads _importer without the lock finds every watch
            # in wrapt's registry and a finder to hand imports to.
            _wrapt_finder = importer.ImportHookFinder()
            _importer = importer
    return _importer


# --- kname's front finder ----------------------------------------------------------------------


class _FrontFinder:
    """kname's finder, kept first on sys.meta_path: hands watched modules to wrapt's finder and
    catches up on what got past.

    Being first costs the finders behind nothing: it answers None for a module not watched (a set
    look-up); for a watched one wrapt's finder (before wrapt is in use, _first_spec) asks the
    whole sys.meta_path again, them included, and only wraps the loader of the spec it gets.
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        _keep_first(self)
        _catch_up()
        # A name _first_spec is finding is left to the finders behind, even if wrapt came into
        # use meanwhile (on another thread): its spec gets one hooked loader, not two.
        if fullname not in _watched_names or fullname in _finding:
            return None
        if _importer is not None:
            return _wrapt_finder.find_spec(fullname, path, target)
        return _first_spec(fullname)

    def invalidate_caches(self) -> None:
        pass


# The watched names _first_spec is asking the import system for (the front finder answers None
# for them). One set for all threads: importlib calls every find_spec under its global import lock.
_finding: set[str] = set()


def _first_spec(fullname: str) -> Any:
    """The spec of a watched module met before wrapt is in use, with a loader that brings it in.

    Not imported here: importlib holds its global import lock through every find_spec, and a
    thread importing a module wrapt imports would wait for that lock while this one waited for it.
    """
    _finding.add(fullname)
    try:
        spec = importlib.util.find_spec(fullname)
    finally:
        _finding.discard(fullname)
    loader = getattr(spec, "loader", None)
    # A loader of the old protocol (load_module only) is left alone: the catch-up wraps its
    # module at the next import.
    if hasattr(loader, "exec_module") and not isinstance(loader, _WraptLater):
        spec.loader = _WraptLater(loader)
    return spec


class _WraptLater:
    """The loader of a watched module imported before wrapt is in use: it runs the module, then
    imports wrapt (under the module's own import lock only) and has wrapt call its hooks.

    Only the import system sees this one: before the module runs, its `__loader__` and
    `__spec__.loader` are its own loader again, as with wrapt's loader.
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader

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
        # wrapt imported once the module has run: a watched module that wrapt imports itself
        # would otherwise give wrapt a module half run.
        importer = _use_wrapt()
        if importer is not None:  # else the catch-up calls its hooks, at the next import
            importer.notify_module_loaded(module)


def _put_front_finder() -> None:
    """kname's finder on sys.meta_path, first (called under kname's lock)."""
    global _front, _exit_check_registered
    if _front is None:
        _front = _FrontFinder()
        sys.meta_path.insert(0, _front)
    _keep_first(_front)
    if not _exit_check_registered:
        _sigterm.shielded_at_exit(_say_missed_at_exit)
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
            hook(module)


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


# --- a forked child --------------------------------------------------------------------------


def _after_fork_in_child() -> None:
    global _wrapt_unsafe
    # A thread of the parent importing wrapt at the fork is gone, its module locks held for good:
    # the child's own import of wrapt would wait forever, so its watched modules are caught up.
    if _importing_wrapt - {threading.get_ident()}:
        _wrapt_unsafe = True
    _importing_wrapt.clear()
    # wrapt's finder and loader take this lock at every watched import a forked child makes;
    # another thread of the parent may have held it at the fork.
    importer = sys.modules.get("wrapt.importer")
    kname_uses_it = _front is not None or _importer is not None
    if kname_uses_it and hasattr(importer, "_post_import_hooks_lock"):
        importer._post_import_hooks_lock = threading.RLock()


reset_in_child(_after_fork_in_child)
