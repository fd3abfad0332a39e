"""Run a callback when a module is imported (at once if it already is), and again on reload.

Built on wrapt's post-import hooks, a sys.meta_path finder. Every use of wrapt's private
registry is in this module: keeping hooks registered after they fire (for importlib.reload),
taking exactly ours out again, and removing wrapt's finder when kname brought it and nobody
else uses it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import ModuleType

from kname._locks import reset_in_child

_added_finder = False


class Watch:
    """The hook for one module name; calls `callback(module)` until unwatched."""

    def __init__(self, module: str, callback: Callable[[ModuleType], None]) -> None:
        self.module = module
        self.callback = callback
        self.active = True

    def __call__(self, module: ModuleType) -> None:
        if not self.active:
            return
        try:
            self.callback(module)
        finally:
            _rearm(self)


def watch(module: str, callback: Callable[[ModuleType], None]) -> Watch:
    """Call `callback(module)` when `module` is imported or reloaded; now if it is imported."""
    global _added_finder
    from wrapt import importer  # deferred: wrapt costs tens of ms to import

    had_finder = importer._post_import_hooks_init
    hook = Watch(module, callback)
    # Fires at once when the module is already imported; either way wrapt's finder is now on
    # sys.meta_path, which reload() needs.
    importer.register_post_import_hook(hook, module)
    _added_finder = _added_finder or not had_finder
    return hook


def unwatch(hooks: list[Watch]) -> None:
    """Take `hooks` out of wrapt's registry (and wrapt's finder, if kname alone used it)."""
    global _added_finder
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
        if _added_finder and not importer._post_import_hooks:
            sys.meta_path[:] = [
                f for f in sys.meta_path if not isinstance(f, importer.ImportHookFinder)
            ]
            importer._post_import_hooks_init = False
            _added_finder = False


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
    if importer is not None and _added_finder:
        importer._post_import_hooks_lock = threading.RLock()


reset_in_child(_renew_wrapt_lock)
