"""install() / uninstall() / enable() / disable() / paused() / profile(): kname in one process.

install() reads the configuration once and hands it down: the hot path to kname.hotpath, the
naming rules to kname.callsite, the NVTX domain to kname.ranges, and to each target an Options
record with this install's switch and hot path. It watches each target module; when one is
imported (at once if it already is) the target's changes are applied and recorded. disable()
restores every recorded change and enable() applies them again; uninstall() restores them for
good, forgets the hooks, the rules and the hot path, and switches off the wrappers of this
install that someone may still hold.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import TYPE_CHECKING

from kname import callsite, hotpath, ranges
from kname._locks import new_lock
from kname._warnings import warn_once
from kname.census import write_at_exit
from kname.config import Config, read_config
from kname.importhooks import Watch, unwatch, watch
from kname.launch import Switch
from kname.patching import Change
from kname.targets import (
    BUILTIN,
    Options,
    Target,
    TargetProblem,
    library,
    library_packages,
    user_target,
)

if TYPE_CHECKING:
    from kname.profiling.session import ProfileSession

# One lock for the whole lifecycle and the import hooks: a hook can fire on any thread that
# imports a target module. Re-entrant, because applying a change can import modules whose hooks
# fire in turn.
_lock = new_lock()


@dataclass
class _State:
    """What install() set up; reset by uninstall()."""

    config: Config | None = None  # None: not installed
    switch: Switch = field(default_factory=Switch)
    enabled: bool = True  # survives uninstall(): install() after disable() stays disabled
    watches: list[Watch] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    source: str = "KNAME_TARGETS"  # where this install's targets were given, for messages


_state = _State()
_ARGUMENT = "install(targets=...)"  # where targets come from, in messages, when not KNAME_TARGETS


def install(targets: Iterable[str] | str | None = None) -> None:
    """Name the launches of `targets` (default: KNAME_TARGETS, else every built-in target).

    `targets` is a list of names or one comma-separated string, as in KNAME_TARGETS. Targets
    whose modules are already imported are wrapped at once. Idempotent: a second install() does
    nothing (uninstall() first to change targets). Raises ConfigError only with KNAME_STRICT=1.
    """
    with _lock:
        if _state.config is not None:
            return
        config = read_config(builtin_targets=BUILTIN)
        for problem in config.problems:
            warn_once(problem, problem)
        if targets is not None:
            config = _with_targets(config, targets)
        # Decided once for this install, before anything makes a wrapper or a range.
        hot_path = hotpath.use(config.native)
        callsite.configure(
            config.skip, config.format, config.depth, config.mode != "census", library_packages()
        )
        ranges.configure(config.domain)
        _state.source = "KNAME_TARGETS" if targets is None else _ARGUMENT
        chosen = _chosen_targets(config.targets, _state.source)
        options = Options(
            switch=Switch(_state.enabled),
            renaming=config.mode == "rename",
            chosen=frozenset(t.name for t in chosen if t.name in BUILTIN),
            nesting=_can_nest(chosen),
            hot_path=hot_path,
        )
        _state.config, _state.switch = config, options.switch
        if config.mode == "profile":
            _start_profiling(config)  # KNAME_REPORT is then the profile's JSON
        elif config.report:
            write_at_exit(config.report, strict=config.strict)
        for module, module_targets in _by_module(chosen).items():
            hook = functools.partial(_on_import, module_targets, options)
            _state.watches.append(watch(module, hook))


def uninstall() -> None:
    """Put back every original launch callable, remove kname's import hooks and its rules.

    Launch counts so far are kept (kname.names(), the census).
    """
    with _lock:
        for change in reversed(_state.changes):
            _restore(change)
        unwatch(_state.watches)
        # A wrapper someone kept passes straight through from now on: its switch stays off for
        # good (enable() turns on a fresh one that no wrapper reads; install() makes its own).
        _state.switch.on = False
        _state.switch = Switch(False)
        _state.config = None
        _state.watches, _state.changes = [], []
        callsite.configure()
        ranges.configure()
        hotpath.reset()  # the next install() chooses again, from its own configuration


def enable() -> None:
    """Name launches again (after `disable()`), without a restart."""
    with _lock:
        _state.enabled = _state.switch.on = True
        for change in _state.changes:
            _apply(change)


def disable() -> None:
    """Stop naming launches. Every change kname made is undone, so a launch costs nothing; a
    reference to a wrapper taken earlier passes straight through after a flag check.
    """
    with _lock:
        _state.enabled = _state.switch.on = False
        for change in reversed(_state.changes):
            _restore(change)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No naming inside the block (process-wide), then the previous state again."""
    was_enabled = is_enabled()
    disable()
    try:
        yield
    finally:
        if was_enabled:
            enable()


def profile(keep_streams: bool = False) -> ProfileSession:
    """A GPU profile of a block, by call site: `with kname.profile() as p:`, then `p.table()`,
    `p.sites`, `p.save(path)` (and `p.save_trace(path)` with keep_streams=True).

    Installs kname first if it is not (its rules name the call sites). Needs the CUPTI binding
    (`pip install 'kname[profile]'`); without it, one line says so and the block runs as usual.
    """
    from kname.profiling.session import ProfileSession

    install()
    return ProfileSession(keep_streams=keep_streams)


def is_installed() -> bool:
    """Whether install() is in effect."""
    return _state.config is not None


def is_enabled() -> bool:
    """Whether launches are named right now (once installed); disable() and enable() set it."""
    return _state.enabled


def current_config() -> Config | None:
    """The configuration install() read, or None when not installed."""
    return _state.config


def _start_profiling(config: Config) -> None:
    from kname.profiling import mode

    try:
        mode.start(config)
    except Exception as exc:  # profiling must not stop the program, nor its naming
        warn_once("profile:mode", f"KNAME_MODE=profile could not start ({exc}); naming goes on")


def _with_targets(config: Config, targets: Iterable[str] | str) -> Config:
    entries = targets if isinstance(targets, str) else ",".join(targets)
    parsed = read_config({"KNAME_TARGETS": entries}, builtin_targets=BUILTIN)
    for problem in parsed.problems:
        warn_once(problem, problem.replace("KNAME_TARGETS", _ARGUMENT))
    return replace(config, targets=parsed.targets or ())


def _chosen_targets(names: tuple[str, ...] | None, source: str) -> list[Target]:
    """The Targets of `names` (default: every built-in one); `source` is where they were given."""
    chosen: list[Target] = []
    for name in BUILTIN if names is None else names:
        try:
            chosen.extend(library(name).targets if name in BUILTIN else [user_target(name)])
        except TargetProblem as exc:
            warn_once(f"target:{name}", f"{source} entry {name!r} {exc}")
        except Exception as exc:  # a broken unit must not stop the others
            warn_once(f"target:{name}", f"target {name!r} could not be loaded ({exc}); skipped")
    return chosen


def _can_nest(targets: list[Target]) -> bool:
    """Whether a launch can run inside a KNAME_TARGETS launcher: one is chosen, with others."""
    launchers = [t for t in targets if t.name not in BUILTIN]
    return bool(launchers) and len(targets) > 1


def _by_module(targets: list[Target]) -> dict[str, list[Target]]:
    """Targets grouped by the module they watch, in the order given (a unit's order matters)."""
    grouped: dict[str, list[Target]] = {}
    for target in targets:
        grouped.setdefault(target.module, []).append(target)
    return grouped


def _on_import(targets: list[Target], options: Options, module: ModuleType) -> None:
    with _lock:
        if options.switch is not _state.switch or _state.config is None:
            return  # uninstalled meanwhile
        for target in targets:
            for change in _changes_of(target, module, options):
                if _state.enabled and not _apply(change, target):
                    continue
                _state.changes.append(change)


def _changes_of(target: Target, module: ModuleType, options: Options) -> list[Change]:
    try:
        return target.changes(module, options)
    except TargetProblem as exc:
        problem = str(exc)
    except Exception as exc:  # a broken target must not stop the import or the other targets
        problem = f"could not be wrapped ({type(exc).__name__}: {exc})"
    # KNAME_STRICT=1: a KNAME_TARGETS entry of the user's that cannot be wrapped stops the program.
    stop = ":" in target.name and _state.config is not None and _state.config.strict
    warn_once(
        f"target:{target.name}:{target.module}:{target.what}",
        f"{_origin(target)} {problem}" + (" (KNAME_STRICT is on: stopping)" if stop else ""),
    )
    if stop:
        raise SystemExit(2)
    return []


def _apply(change: Change, target: Target | None = None) -> bool:
    try:
        change.apply()
        return True
    except Exception as exc:  # an immutable type, say: that launch is not named
        where = f"{target.module}:{target.what}" if target else repr(change)
        warn_once(f"apply:{where}", f"cannot wrap {where} ({exc}); that launch is not named")
        return False


def _restore(change: Change) -> None:
    try:
        change.restore()
    except Exception as exc:
        warn_once(f"restore:{change!r}", f"could not undo {change!r} ({exc})")


def _origin(target: Target) -> str:
    """Which target a message is about: `KNAME_TARGETS entry 'fakegpu:launch'`, say."""
    if target.name in BUILTIN:
        return f"built-in target {target.name!r}: {target.module}:{target.what}"
    return f"{_state.source} entry {target.name!r}"
