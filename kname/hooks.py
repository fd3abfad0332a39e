"""install() / uninstall(): post-import hooks that wrap each target's launch callable.

wrapt's post-import hooks (a sys.meta_path finder) call us when a target module is imported,
or at once if it already is. Every change kname makes is recorded, so uninstall() puts back the
very objects it replaced.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from kname import callsite, launch
from kname import nvtx as kname_nvtx
from kname._warnings import warn_once
from kname.config import Config, read_config
from kname.report import write_at_exit  # not `kname.report`: __init__ rebinds that name
from kname.targets import BUILTIN, Target, builtin_targets, user_target

# One lock for install, uninstall and the hooks: a hook can fire on any thread that imports a
# target module. Re-entrant, because patching can import modules whose hooks fire in turn.
_lock = threading.RLock()
_installed = False
_config: Config | None = None
_hooks: dict[str, Any] = {}  # module name -> the hook kname registered for it
_patches: list[Patch | Callable[[], None]] = []  # the callables: undos of Target.install
_added_wrapt_finder = False
_FUNCTIONS = (
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
    types.WrapperDescriptorType,
)  # fmt: skip


@dataclass(frozen=True)
class Patch:
    """One attribute kname replaced: put `original` back, or delete it if it was inherited."""

    owner: Any
    attribute: str
    original: Any
    wrapper: Any
    owned: bool  # the attribute was in owner.__dict__ (not inherited)


def install(targets: Iterable[str] | str | None = None) -> None:
    """Name the launches of `targets` (default: KNAME_TARGETS, else every built-in target).

    `targets` is a list of names or one comma-separated string, as in KNAME_TARGETS. Targets
    whose modules are already imported are wrapped at once. Idempotent: a second install() does
    nothing (uninstall() first to change targets). Raises ConfigError only with KNAME_STRICT=1.
    """
    global _installed, _config
    import kname._fork  # noqa: F401  (forked children get free locks: registered once, at import)

    with _lock:
        if _installed:
            return
        config = read_config(builtin_targets=tuple(BUILTIN))
        for problem in config.problems:
            warn_once(problem, problem)
        if targets is not None:
            config = _with_targets(config, targets)
        callsite.configure(config.skip, config.format, config.depth, config.mode != "census")
        kname_nvtx.configure(config.domain)
        _config = config
        _installed = True
        launch.enable()
        if config.report:
            write_at_exit(config.report)
        for target in _chosen_targets(config.targets):
            _watch(target)


def enable() -> None:
    """Name launches again (after `disable()`), without a restart."""
    with _lock:
        launch.enable()
        for patch in _patches:
            if isinstance(patch, Patch):
                _reapply(patch)


def disable() -> None:
    """Stop naming launches. The original launch functions go back in place, so a launch costs
    nothing; a reference to a wrapper taken earlier passes straight through after a flag check.
    """
    with _lock:
        launch.disable()
        for patch in _patches:
            if isinstance(patch, Patch):
                _restore(patch)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No naming inside the block (process-wide), then the previous state again."""
    was_enabled = launch.is_enabled()
    disable()
    try:
        yield
    finally:
        if was_enabled:
            enable()


def uninstall() -> None:
    """Put back every original launch callable and remove kname's import hooks."""
    global _installed
    with _lock:
        for patch in reversed(_patches):
            if isinstance(patch, Patch):
                _restore(patch)
            else:
                _undo(patch)
        _patches.clear()
        _remove_hooks()
        _installed = False


def is_installed() -> bool:
    """Whether install() is in effect."""
    return _installed


def current_config() -> Config | None:
    """The configuration install() read, or None before install()."""
    return _config


def _with_targets(config: Config, targets: Iterable[str] | str) -> Config:
    entries = targets if isinstance(targets, str) else ",".join(targets)
    parsed = read_config({"KNAME_TARGETS": entries}, builtin_targets=tuple(BUILTIN))
    for problem in parsed.problems:
        warn_once(problem, problem.replace("KNAME_TARGETS", "install(targets=...)"))
    return replace(config, targets=parsed.targets or ())


def _chosen_targets(names: tuple[str, ...] | None) -> list[Target]:
    chosen: list[Target] = []
    for name in BUILTIN if names is None else names:
        try:
            chosen.extend(builtin_targets(name) if name in BUILTIN else [user_target(name)])
        except Exception as exc:  # a broken target definition must not stop the others
            warn_once(f"target:{name}", f"target {name!r} could not be loaded ({exc}); skipped")
    return chosen


def _watch(target: Target) -> None:
    """Wrap `target` now if its module is imported, else when it is (and again on reload)."""
    hook = _hooks.get(target.module)
    if hook is None:
        hook = _ModuleHook(target.module)
        _hooks[target.module] = hook
    hook.targets.append(target)
    _register(hook)


class _ModuleHook:
    """The post-import hook for one module; it wraps every target defined in that module."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.targets: list[Target] = []

    def __call__(self, module: ModuleType) -> None:
        with _lock:
            if _hooks.get(self.module) is not self:
                return  # uninstalled meanwhile
            for target in self.targets:
                _patch(module, target)
            _rearm(self)


def _register(hook: _ModuleHook) -> None:
    global _added_wrapt_finder
    from wrapt import importer  # deferred: wrapt costs tens of ms to import

    had_finder = importer._post_import_hooks_init
    # Fires at once when the module is already imported; either way wrapt's finder is now on
    # sys.meta_path, which reload() needs.
    importer.register_post_import_hook(hook, hook.module)
    _added_wrapt_finder = _added_wrapt_finder or not had_finder


def _rearm(hook: _ModuleHook) -> None:
    """Leave the hook registered after it fired, so importlib.reload() wraps the new module.

    wrapt drops a module's hooks once they have run; reload() consults the meta_path finders
    again, and wrapt's finder only intervenes for module names that still have hooks.
    """
    from wrapt import importer

    with importer._post_import_hooks_lock:
        hooks = importer._post_import_hooks.setdefault(hook.module, [])
        if hook not in hooks:
            hooks.append(hook)


def _remove_hooks() -> None:
    global _added_wrapt_finder
    if not _hooks:
        return
    from wrapt import importer

    with importer._post_import_hooks_lock:
        for name, hook in _hooks.items():
            remaining = [h for h in importer._post_import_hooks.get(name, []) if h is not hook]
            if remaining:
                importer._post_import_hooks[name] = remaining
            else:
                importer._post_import_hooks.pop(name, None)
        if _added_wrapt_finder and not importer._post_import_hooks:
            # kname brought wrapt's finder in and nobody else uses it: take it out again.
            sys.meta_path[:] = [
                f for f in sys.meta_path if not isinstance(f, importer.ImportHookFinder)
            ]
            importer._post_import_hooks_init = False
            _added_wrapt_finder = False
    _hooks.clear()


def _patch(module: ModuleType, target: Target) -> None:
    if target.applies is not None and not target.applies(module):
        return
    if target.install is not None:
        _install(module, target)
        return
    try:
        owner, attribute = _resolve_owner(module, target.qualname)
        owned = attribute in vars(owner)
        original = vars(owner)[attribute] if owned else _inherited(owner, attribute)
    except (AttributeError, TypeError) as exc:
        warn_once(
            f"unresolved:{target.name}:{target.module}",
            f"{_origin(target)} {target.module}:{target.qualname} was not found "
            f"({exc}); {_version_note(module)}that launch is not named, the rest still is",
        )
        return
    if getattr(_unbound(original), "_kname_wrapper", False):
        return  # already wrapped (install() twice, or a hook that fired twice)
    if ":" in target.name and not _is_function(_unbound(original)):
        # A function standing in for a class, a kernel object or a constant changes the program.
        warn_once(
            f"not-function:{target.name}",
            f"{_origin(target)} {target.name} is not a function or method "
            f"({type(_unbound(original)).__name__}); it is left as it is, not named "
            f"(name a launch function or method, such as {target.name}.__call__)",
        )
        return
    wrapper = launch.make_launch_wrapper(
        _unbound(original), target.lib, target.kernel_name, target.kernel_of, target.rename
    )
    wrapper = _rebind(original, wrapper)
    try:
        setattr(owner, attribute, wrapper)
    except (AttributeError, TypeError) as exc:
        warn_once(
            f"immutable:{target.name}:{target.qualname}",
            f"cannot wrap {target.module}:{target.qualname} ({exc}); that launch is not named",
        )
        return
    patch = Patch(owner, attribute, original, wrapper, owned)
    _patches.append(patch)
    if not launch.is_enabled():
        _restore(patch)  # imported while disabled: enable() puts the wrapper in place


def _install(module: ModuleType, target: Target) -> None:
    """Let the target make its own changes to `module`; keep its undos for uninstall()."""
    try:
        undos = list(target.install(module))
    except Exception as exc:  # a broken target must not stop the import or the other targets
        warn_once(
            f"install:{target.name}:{target.module}",
            f"{_origin(target)} {target.module}:{target.qualname} could not be wrapped "
            f"({exc}); {_version_note(module)}that launch is not named, the rest still is",
        )
        return
    _patches.extend(undos)


def _undo(undo: Callable[[], None]) -> None:
    try:
        undo()
    except Exception as exc:
        warn_once(f"undo:{undo!r}", f"uninstall could not undo a change ({exc})")


def _restore(patch: Patch) -> None:
    current = vars(patch.owner).get(patch.attribute)
    if current is not patch.wrapper:
        return  # someone replaced it after us (or the module was reloaded): leave theirs
    if patch.owned:
        setattr(patch.owner, patch.attribute, patch.original)
    else:
        delattr(patch.owner, patch.attribute)


def _reapply(patch: Patch) -> None:
    """Put `patch.wrapper` back where disable() restored the original."""
    current = vars(patch.owner).get(patch.attribute)
    expected = patch.original if patch.owned else None
    if current is expected:  # untouched since: not replaced or reloaded by someone else
        setattr(patch.owner, patch.attribute, patch.wrapper)


def _is_function(candidate: Any) -> bool:
    cython = type(candidate).__name__ == "cython_function_or_method"
    return cython or isinstance(candidate, _FUNCTIONS)


def _resolve_owner(module: ModuleType, qualname: str) -> tuple[Any, str]:
    *path, attribute = qualname.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part)
    if not hasattr(owner, attribute):
        raise AttributeError(f"{qualname!r} has no attribute {attribute!r}")
    return owner, attribute


def _inherited(owner: Any, attribute: str) -> Any:
    """An inherited attribute as its class defines it: a staticmethod or classmethod stays one.

    getattr() would give a plain function or a method bound to the base class, and a wrapper
    of that, set on the subclass, would be called with the instance as an extra argument.
    """
    defined = inspect.getattr_static(owner, attribute, None)
    if isinstance(defined, (staticmethod, classmethod)):
        return defined
    return getattr(owner, attribute)


def _unbound(original: Any) -> Any:
    """The function inside a staticmethod/classmethod, else `original` itself."""
    if isinstance(original, (staticmethod, classmethod)):
        return original.__func__
    return original


def _rebind(original: Any, wrapper: Any) -> Any:
    if isinstance(original, staticmethod):
        wrapper = staticmethod(wrapper)
    elif isinstance(original, classmethod):
        wrapper = classmethod(wrapper)
    return wrapper


def _origin(target: Target) -> str:
    return "KNAME_TARGETS entry" if ":" in target.name else f"built-in target {target.name!r}:"


def _version_note(module: ModuleType) -> str:
    top = sys.modules.get(module.__name__.split(".", 1)[0])
    version = getattr(top, "__version__", None)
    return f"unsupported version {version} of {top.__name__}? " if version and top else ""
