"""install() / uninstall() / enable() / disable() / paused() / profile(): kname in one process.

install() reads the configuration once and hands it down: the hot path to kname.hotpath, the
naming rules to kname.callsite, the NVTX domain to kname.ranges, and to each target an Options
record with this install's switch and hot path. It watches each target module; when one is
imported (at once if it already is) the target's changes are applied and recorded. disable()
restores every recorded change and enable() applies them again; uninstall() restores them for
good, forgets the hooks, the rules and the hot path, and switches off the wrappers of this
install that someone may still hold. At exit, a target's module that never came and a KNAME_SKIP
or KNAME_USER prefix that matched none are said where no module of that name can be imported (a
misspelling).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from kname import _sigterm, callsite, counters, driver_hook, hotpath, ranges, ranks
from kname._locks import new_lock, reset_in_child
from kname._warnings import exit_at_once, warn_once
from kname.census import write_at_exit
from kname.config import KNAME_SKIP, KNAME_TARGETS, KNAME_USER, Config, read_config
from kname.importhooks import Watch, unwatch, watch
from kname.launch import Switch
from kname.patching import Change, Rebind
from kname.targets import (
    BUILTIN,
    Options,
    Target,
    TargetProblem,
    library,
    library_code,
    user_target,
)

if TYPE_CHECKING:
    from kname.profiling.session import ProfileSession

# One lock for the whole lifecycle and the import hooks: a hook can fire on any thread that
# imports a target module. Re-entrant, because applying a change can import modules whose hooks
# fire in turn.
_lock = new_lock()
# A lifecycle call (install, uninstall, enable, disable, a watched module's changes) is running on
# the thread holding _lock. Another one entering on that thread (a signal handler's, or a hook
# fired by the running call) would see its state half made: it waits in `_deferred`, and the
# running call makes it when it has finished. Read and written only under _lock.
_running = False
_deferred: list[Callable[[], object]] = []
_Call = TypeVar("_Call", bound=Callable[..., None])


def _one_at_a_time(call: _Call) -> _Call:
    """`call`, run under the lock; entered again on its own thread, it is made after the call
    running there has finished, in the order asked."""

    @functools.wraps(call)
    def one_at_a_time(*args: Any, **kwargs: Any) -> None:
        with _lock:
            if _running:
                _deferred.append(functools.partial(call, *args, **kwargs))
                return
            _run_then_deferred(functools.partial(call, *args, **kwargs))

    return one_at_a_time  # type: ignore[return-value]


def _run_then_deferred(call: Callable[[], object]) -> None:
    """Run `call`, then every call deferred meanwhile (called under the lock)."""
    global _running
    _running = True
    try:
        call()
    finally:
        try:
            while _deferred:
                _deferred.pop(0)()
        finally:
            _running = False
        # A signal handler's call, deferred between the last look and `_running = False`.
        if _deferred:
            _run_then_deferred(_deferred.pop(0))


def _after_fork_in_child() -> None:
    """A thread of the parent that was inside a lifecycle call is gone from the child."""
    global _running
    _running = False
    _deferred.clear()


reset_in_child(_after_fork_in_child)


class _State:
    """What install() set up; reset by uninstall()."""

    def __init__(self) -> None:
        self.config: Config | None = None  # None: not installed
        self.switch = Switch()
        self.enabled = True  # survives uninstall(): install() after disable() stays disabled
        self.watches: list[Watch] = []
        self.changes: list[Change] = []
        # Those of the changes that put a launch wrapper in a library's call path (Target.
        # names_launches), and whether they are taken out now: while a profile names every
        # launch from CUPTI's callback (kname.profiling.wrappers), enable() and a module's
        # import leave them out.
        self.launch_changes: list[Change] = []
        self.wrappers_out = False
        # Where each module:qualname target was given (KNAME_TARGETS or install()), for messages.
        self.given: dict[str, str] = {}


_state = _State()
SUBINTERPRETER = (
    "not started in this subinterpreter (its C extensions and the nvtx package are for the main "
    "interpreter only); launches here are not named"
)
_ARGUMENT = "install(targets=...)"  # where targets come from, in messages, when not KNAME_TARGETS
_exit_check_registered = False
_exit_check_cancelled = False


@_one_at_a_time
def install(targets: Iterable[str] | str | None = None) -> None:
    """Name the launches of `targets` (default: KNAME_TARGETS, else every built-in target).

    `targets` is a list of names or one comma-separated string, as in KNAME_TARGETS. Targets
    whose modules are already imported are wrapped at once. Installed already (KNAME=1 started
    kname, say), targets not yet named are added to the running install; without targets, or
    with none new, it does nothing. Raises ConfigError only with KNAME_STRICT=1.
    """
    if _state.config is not None:
        if targets is not None:
            _add_targets(targets)
        return
    if not hotpath.is_main_interpreter():
        warn_once("subinterpreter", SUBINTERPRETER)
        return
    config = read_config(builtin_targets=BUILTIN)
    for problem in config.problems:
        warn_once(problem, problem)
    if targets is not None:
        config = _with_targets(config, targets)
    # Decided once for this install, before anything makes a wrapper or a range.
    hotpath.use(config.native)
    code = library_code()
    callsite.configure(
        config.skip, config.format, config.depth, config.mode != "census", code.packages,
        config.user, code.compile_modules, code.generated, code.compile_phases,
    )  # fmt: skip
    ranges.configure(config.domain)
    source = KNAME_TARGETS if targets is None else _ARGUMENT
    _state.given = dict.fromkeys(config.targets or (), source)
    _state.config = config
    _check_at_exit()  # before the census's: atexit runs it after, so strict's exit loses none
    outputs = config.mode == "profile" or config.report
    # A launcher, or a rank KNAME_RANKS leaves out, only names: nothing collected, no file.
    if outputs and _writes_outputs(config):
        if config.mode == "profile":
            _start_profiling(config)  # KNAME_REPORT is then the profile's JSON
        else:
            write_at_exit(config.report, strict=config.strict)
    _watch_targets(Switch(_state.enabled))
    if _state.enabled:
        driver_hook.install(config.mode)
    if _writes_outputs(config):
        _arm_on_demand(config)


def _arm_on_demand(config: Config) -> None:
    """`kname attach` and KNAME_PROFILE_TRIGGER answered (profiling/ondemand.py): a signal
    handler and, with a trigger, a thread that stats it; nothing on the launch path."""
    try:
        from kname.profiling import ondemand

        _serve_profiles()
        ondemand.arm(config.trigger)
    except Exception as exc:  # on-demand profiling must not stop the program, nor its naming
        warn_once("profile:attach", f"kname attach cannot be answered here ({exc})")


@_one_at_a_time
def uninstall() -> None:
    """Put back every original launch callable, remove kname's import hooks and its rules.

    Launch counts so far are kept (kname.names(), the census).
    """
    driver_hook.uninstall()
    for change in reversed(_state.changes):
        _restore(change)
    unwatch(_state.watches)
    # A wrapper someone kept passes straight through from now on: its switch stays off for
    # good (enable() turns on a fresh one that no wrapper reads; install() makes its own).
    _state.switch.on = False
    _state.switch = Switch(False)
    _state.config = None
    _state.watches, _state.changes, _state.given = [], [], {}
    _state.launch_changes = []
    callsite.configure()
    ranges.configure()
    hotpath.reset()  # the next install() chooses again, from its own configuration


@_one_at_a_time
def enable() -> None:
    """Name launches again (after `disable()`), without a restart."""
    _state.enabled = _state.switch.on = True
    for change in _state.changes:
        if not _left_out(change):
            _apply(change)
    if _state.config is not None:
        driver_hook.install(_state.config.mode)


@_one_at_a_time
def disable() -> None:
    """Stop naming launches. Every change kname made is undone, so a launch costs nothing; a
    reference to a wrapper taken earlier passes straight through after a flag check.
    """
    _state.enabled = _state.switch.on = False
    driver_hook.uninstall()
    for change in reversed(_state.changes):
        _restore(change)


@_one_at_a_time
def take_wrappers_out() -> None:
    """The library launch wrappers out of the call path (their changes undone; those of modules
    imported meanwhile not made) until put_wrappers_back(): kname profile names those launches
    from CUPTI's callback. The rest (backward scopes, KNAME_TARGETS launchers) stays."""
    if _state.wrappers_out or counters.read_while_running():
        return  # out already, or they alone count launches someone reads (a stretch)
    _state.wrappers_out = True
    if _state.enabled:
        for change in reversed(_state.launch_changes):
            _restore(change)


@_one_at_a_time
def put_wrappers_back() -> None:
    """The launch wrappers take_wrappers_out() took out, in the call path again (if enabled)."""
    if not _state.wrappers_out:
        return  # in already: applied twice, a launch would be wrapped twice
    _state.wrappers_out = False
    if _state.enabled:
        for change in _state.launch_changes:
            _apply(change)


def wrappers_are_out() -> bool:
    """Whether take_wrappers_out() is in effect."""
    return _state.wrappers_out


def _serve_profiles() -> None:
    """kname profile's sessions may take the library launch wrappers out of the call path through
    this install (kname.profiling.wrappers, a layer below, which cannot import this module)."""
    from kname.profiling import wrappers

    wrappers.serve(wrappers.Install(current_config, take_wrappers_out, put_wrappers_back))
    counters.when_first_read(put_wrappers_back)  # a stretch begun while a profile has them out


def _left_out(change: Change) -> bool:
    return _state.wrappers_out and any(change is c for c in _state.launch_changes)


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
    _serve_profiles()
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


def _writes_outputs(config: Config) -> bool:
    """Whether this process profiles and writes its census or profile: not a job's launcher
    (torchrun's agent: its workers are the ranks), nor a rank that KNAME_RANKS leaves out. A
    launcher's problems with its variables are said here, once."""
    rank = ranks.find_rank()
    for problem in rank.problems:
        warn_once(problem, problem)
    return ranks.is_launcher() is None and ranks.selected(rank, config.ranks)


def _start_profiling(config: Config) -> None:
    from kname.profiling import mode

    try:
        _serve_profiles()
        mode.start(config)
    except Exception as exc:  # profiling must not stop the program, nor its naming
        warn_once("profile:mode", f"KNAME_MODE=profile could not start ({exc}); naming goes on")


def _with_targets(config: Config, targets: Iterable[str] | str) -> Config:
    entries = targets if isinstance(targets, str) else ",".join(targets)
    parsed = read_config({KNAME_TARGETS: entries}, builtin_targets=BUILTIN)
    for problem in parsed.problems:
        warn_once(problem, problem.replace(KNAME_TARGETS, _ARGUMENT))
    return config._replace(targets=parsed.targets or ())


def cancel_exit_check() -> None:
    """Check nothing at exit (the `kname` command itself runs no program of the user's)."""
    global _exit_check_cancelled
    _exit_check_cancelled = True


def _check_at_exit() -> None:
    global _exit_check_registered
    if not _exit_check_registered:
        _sigterm.shielded_at_exit(_say_unmet_at_exit)
        _exit_check_registered = True


def _say_unmet_at_exit() -> None:
    """Say which KNAME_TARGETS modules never came and which KNAME_SKIP and KNAME_USER prefixes
    matched no module, where none of that name can be imported either (a misspelling, most
    likely); KNAME_STRICT=1 makes the exit status 2. One that can be imported but was not is
    this run's choice."""
    with _lock:
        config, watches, given = _state.config, list(_state.watches), dict(_state.given)
    if config is None or _exit_check_cancelled:
        return
    ran = {watched.module for watched in watches if watched.seen is not None}
    try:
        targets = _unmet_targets([entry for entry in given if ":" in entry], ran)
        problems = [
            *targets,
            *_unmet_prefixes(KNAME_SKIP, config.skip),
            *_unmet_prefixes(KNAME_USER, config.user),
        ]
    except Exception:  # a finder that fails: never a traceback at exit, for a message
        return
    strict = " (KNAME_STRICT is on: exit status 2)" if config.strict else ""
    for problem in problems:
        warn_once(problem, problem + strict)
    if problems and config.strict:
        exit_at_once(2)


def _unmet_targets(entries: list[str], ran: set[str]) -> list[str]:
    """A line for each module:qualname entry whose module was never imported, nor can be."""
    problems = []
    for entry in entries:
        module, qualname = entry.split(":", 1)
        if module in ran or module in sys.modules:
            continue
        # Only for a module not imported: difflib and pkgutil are no run's cost at its exit.
        from kname import importable

        if importable.find(module) is not None:
            continue
        meant = importable.nearest(module)
        hint = f" (did you mean {meant}:{qualname}?)" if meant else ""
        problems.append(
            f"{_entry(entry)} named nothing: module {module!r} was never imported, and no module "
            f"of that name can be imported here{hint}"
        )
    return problems


def _unmet_prefixes(variable: str, prefixes: tuple[str, ...]) -> list[str]:
    """A line for each KNAME_SKIP (or KNAME_USER) prefix that no module imported had, nor any
    importable one."""
    imported = list(sys.modules)
    problems = []
    for prefix in prefixes:
        if any(m == prefix or m.startswith(prefix + ".") for m in imported):
            continue
        from kname import importable  # as in _unmet_targets

        if importable.find(prefix) is not None:
            continue
        meant = importable.nearest(prefix)
        problems.append(
            f"{variable} entry {prefix!r} matched no module: none of that name was imported, "
            f"nor can one be imported here{f' (did you mean {meant!r}?)' if meant else ''}"
        )
    return problems


def _add_targets(targets: Iterable[str] | str) -> None:
    """Add `targets` to the running install: every change is made anew, with the same switch.

    Anew, not only the new targets': a launcher among them changes how the other targets wrap
    (Options.nesting). A wrapper the program holds keeps naming: its switch is unchanged.
    """
    config = _state.config
    assert config is not None
    named = BUILTIN if config.targets is None else config.targets
    added = [t for t in _with_targets(config, targets).targets or () if t not in named]
    if not added:
        return
    for change in reversed(_state.changes):
        _restore(change)
    unwatch(_state.watches)
    _state.watches, _state.changes, _state.launch_changes = [], [], []
    _state.config = config._replace(targets=(*named, *added))
    _state.given.update(dict.fromkeys(added, _ARGUMENT))
    _watch_targets(_state.switch)


def _watch_targets(switch: Switch) -> None:
    """Watch the modules of the install's targets; their wrappers read `switch`."""
    assert _state.config is not None
    chosen = _chosen_targets(_state.config.targets)
    options = Options(
        switch=switch,
        renaming=_state.config.mode == "rename",
        chosen=frozenset(t.name for t in chosen if t.name in BUILTIN),
        nesting=_can_nest(chosen),
        hot_path=hotpath.current(),
    )
    _state.switch = switch  # first: a hook that fires at once checks it
    for module, module_targets in _by_module(chosen).items():
        hook = functools.partial(_on_import, module_targets, options)
        _state.watches.append(watch(module, hook))


def _chosen_targets(names: tuple[str, ...] | None) -> list[Target]:
    """The Targets of `names` (default: every built-in one)."""
    chosen: list[Target] = []
    for name in BUILTIN if names is None else names:
        try:
            chosen.extend(library(name).targets if name in BUILTIN else [user_target(name)])
        except TargetProblem as exc:
            warn_once(f"target:{name}", f"{_entry(name)} {exc}")
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


@_one_at_a_time
def _on_import(targets: list[Target], options: Options, module: ModuleType) -> None:
    if options.switch is not _state.switch or _state.config is None:
        return  # uninstalled meanwhile
    for target in targets:
        for change in _changes_of(target, module, options):
            launch = target.names_launches and in_call_path(change)
            made = not (_state.wrappers_out and launch)
            if _state.enabled and made and not _apply(change, target):
                continue
            _state.changes.append(change)
            if launch:
                _state.launch_changes.append(change)


def in_call_path(change: Change) -> bool:
    """Whether `change` puts something of kname's in a launch's call path: all but a class bound
    in place of a library's (CuPy's kernel classes), whose instances launch through the class's
    own `__call__`, a change of its own."""
    return not (isinstance(change, Rebind) and isinstance(change.replacement, type))


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
    return _entry(target.name)


def _entry(name: str) -> str:
    """`KNAME_TARGETS entry 'fakegpu:launch'`, or `install(targets=...) entry ...`."""
    return f"{_state.given.get(name, 'KNAME_TARGETS')} entry {name!r}"
