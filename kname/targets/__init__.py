"""The library units: for each GPU library, what kname changes when one of its modules is imported.

A unit (`kname.targets.<name>`) defines `LIBRARY`, a Library: its import packages (their frames
are library code, never a call site), its distributions (for `kname doctor`), and its targets.
A Target names one module to watch and a function that returns the changes to make in it, as
Patch records (kname.patching), so disable() and uninstall() undo all of them. Most targets wrap
one launch function: `wraps(qualname, spec)` builds that. Adding a library is one unit and one
name in BUILTIN. Units import no GPU library: they run when kname is installed, before any is.

A kernel launched inside a KNAME_TARGETS launcher (`mypkg.gpu:launch` calling a numba kernel) is
named by the launcher alone: see Options.nesting.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from kname import callsite, hotpath
from kname.launch import (
    LAUNCHER,
    UNNAMED_IN_LAUNCHERS,
    LaunchSpec,
    Switch,
    make_launch_wrapper,
)
from kname.patching import (
    Change,
    Patch,
    defined,
    is_wrapper,
    rebind,
    resolve,
    unbound,
)

BUILTIN = ("numba", "cupy", "triton", "pycuda", "cuda_core", "torch", "jax")


class TargetProblem(Exception):
    """A target cannot be wrapped in this module: the message says why, for the user."""


def inside_launcher() -> bool:
    """Whether this thread is running a KNAME_TARGETS launcher (of an install with nesting)."""
    return hotpath.current().inside_launcher()


class Options:
    """What a target's changes may depend on: handed down by install()."""

    __slots__ = ("chosen", "hot_path", "nesting", "renaming", "switch")

    def __init__(
        self,
        switch: Switch,
        renaming: bool,
        chosen: frozenset[str],
        nesting: bool = False,
        hot_path: hotpath.HotPath | None = None,
    ) -> None:
        self.switch = switch  # the on/off switch of this install()
        self.renaming = renaming  # KNAME_MODE=rename
        self.chosen = chosen  # the built-in targets in use
        # A launch can run inside a KNAME_TARGETS launcher (one is chosen, with other targets).
        # The launcher's range then names it, as the user asked by naming the launcher: a kernel
        # inside it is not a launch of its own (no range, not counted), as one under a library's
        # frames.
        self.nesting = nesting
        # The hot path of this install() (default: the one in effect): its launch wrappers, and
        # the C types or their Python twins a unit may use (Triton's SkipBeneath and
        # SubscriptLaunch, CuPy's BaseCall).
        self.hot_path = hotpath.current() if hot_path is None else hot_path

    def wrapper(
        self, original: Callable[..., Any], spec: LaunchSpec, launcher: bool = False
    ) -> Callable[..., Any]:
        """A launch wrapper of `original` (renaming per site only in rename mode); `launcher`:
        a KNAME_TARGETS launcher's."""
        if not self.renaming and spec.rename is not None:
            spec = spec._replace(rename=None)
        # Decided per launch, not per call site, by the hot path (in C on the C one): one line (a
        # helper) can launch both inside a launcher and outside, and a site's cached name must
        # not answer for the other.
        launchers = UNNAMED_IN_LAUNCHERS | (LAUNCHER if launcher else 0) if self.nesting else 0
        return make_launch_wrapper(original, spec, self.switch, self.hot_path, launchers)


class Target(NamedTuple):
    """One module to watch, and the changes to make in it when it is imported."""

    name: str  # what KNAME_TARGETS calls it: a unit's name, or `module:qualname`
    module: str  # the module whose import triggers the changes
    what: str  # the thing changed, as messages show it (`_LaunchConfiguration.__call__`)
    # (module, options) -> the changes to apply, none when the target does not apply to this
    # module (the simulator's dispatcher); TargetProblem when it cannot be wrapped.
    changes: Callable[[ModuleType, Options], list[Change]]
    # Its changes only name a library's launches (wrappers, launch hooks), as kname profile's
    # native callback names them from the frame: taken out of the call path while such a
    # profile collects (kname.profiling.wrappers). False: they do more (backward scopes, a
    # KNAME_TARGETS launcher named at its own call).
    names_launches: bool = True


class Library(NamedTuple):
    """Everything kname knows about one GPU library."""

    name: str  # the built-in target name
    packages: tuple[str, ...]  # top-level import packages: their frames are library code
    distributions: tuple[str, ...]  # installed distributions that provide them
    targets: tuple[Target, ...]
    renaming: str = "not renamed (named by NVTX ranges only)"  # what KNAME_MODE=rename does
    # Its own C in kname._native (types its launches need), files beside its unit that setup.py
    # builds into the extension.
    c_sources: tuple[str, ...] = ()
    # Its modules doing build-time work (compiling, autotuning): a launch beneath one of them is
    # named apart, marked callsite.COMPILE_MARK.
    compile_modules: tuple[str, ...] = ()
    # Code it makes at run time that has no module of its own, or the user's (callsite.Generated),
    # with the module making it: library code too, unless KNAME_USER names that module.
    generated: tuple[tuple[str, callsite.Generated], ...] = ()
    # Its modules that both build and run (callsite.CompilePhase): judged function by function.
    compile_phases: tuple[tuple[str, callsite.CompilePhase], ...] = ()


class LibraryCode(NamedTuple):
    """What every built-in unit declares library code, for callsite.configure."""

    packages: tuple[str, ...]
    compile_modules: tuple[str, ...]
    generated: tuple[tuple[str, callsite.Generated], ...]
    compile_phases: tuple[tuple[str, callsite.CompilePhase], ...] = ()


def library(name: str) -> Library:
    """The unit of built-in target `name` (imports kname's unit, not the GPU library)."""
    return importlib.import_module(f"kname.targets.{name}").LIBRARY


def library_code() -> LibraryCode:
    """Every built-in unit's packages, build-time modules and generated code."""
    units = [library(name) for name in BUILTIN]
    return LibraryCode(
        packages=tuple(p for unit in units for p in unit.packages),
        compile_modules=tuple(m for unit in units for m in unit.compile_modules),
        generated=tuple(g for unit in units for g in unit.generated),
        compile_phases=tuple(p for unit in units for p in unit.compile_phases),
    )


def wraps(
    qualname: str, spec: LaunchSpec, applies: Callable[[ModuleType], bool] | None = None
) -> Callable[[ModuleType, Options], list[Change]]:
    """The changes function of a target that wraps the launch callable `qualname`."""

    def changes(module: ModuleType, options: Options) -> list[Change]:
        if applies is not None and not applies(module):
            return []
        return wrap_attribute(module, qualname, lambda f: options.wrapper(f, spec))

    return changes


def wrap_attribute(
    module: ModuleType, qualname: str, make_wrapper: Callable[[Any], Any]
) -> list[Change]:
    """A Patch putting `make_wrapper(function)` where `qualname` is, keeping static/classmethods.

    An inherited method is set on the subclass named (its base stays as it is). Nothing when
    kname's wrapper is already there (a hook that fired twice).
    """
    try:
        owner, attribute = resolve(module, qualname)
    except AttributeError as exc:
        raise TargetProblem(
            f"was not found: {exc}; {_version_note(module)}that launch is not named, the rest "
            "still is"
        ) from None
    original = vars(owner)[attribute] if attribute in vars(owner) else defined(owner, attribute)
    if is_wrapper(original):
        return []
    wrapper = rebind(original, make_wrapper(unbound(original)))
    return [Patch(owner, attribute, wrapper)]


# --- KNAME_TARGETS module:qualname -----------------------------------------------------------

_FUNCTIONS = (
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
    types.WrapperDescriptorType,
)  # fmt: skip


# Packages kname runs on, besides the standard library: its own, its dependencies, and numpy
# (nvtx imports it, so do the GPU libraries' imports).
RUNS_ON = ("kname", "wrapt", "nvtx", "numpy")


def runs_on(module: str) -> bool:
    """Whether kname itself runs on `module`: a launch wrapper there would call itself."""
    top = module.split(".", 1)[0]
    return top in sys.stdlib_module_names or top in RUNS_ON


def user_target(entry: str) -> Target:
    """A Target for a `module:qualname` entry of KNAME_TARGETS (already validated).

    TargetProblem for a module kname runs on: wrapping builtins.len made kname's own call of
    len() recurse for ever, and a wrapped isinstance broke numpy's import.
    """
    module_name, qualname = entry.split(":", 1)
    if runs_on(module_name):
        raise TargetProblem(
            f"is refused: kname itself runs on {module_name.split('.', 1)[0]} (the standard "
            f"library, {', '.join(RUNS_ON)}); name a launch function of a GPU library or of "
            "your own code"
        )
    spec = LaunchSpec(lib=module_name.split(".", 1)[0], kernel_name=lambda _callable: qualname)

    def changes(module: ModuleType, options: Options) -> list[Change]:
        def make_wrapper(function: Any) -> Any:
            if not _is_function(function):
                # A function standing in for a class, a kernel object or a constant changes
                # the program.
                raise TargetProblem(_not_a_function(module, qualname, function))
            return options.wrapper(function, spec, launcher=True)

        return wrap_attribute(module, qualname, make_wrapper)

    # A launcher names the launches inside it after its own caller: kept while profiling.
    return Target(entry, module_name, qualname, changes, names_launches=False)


def _not_a_function(module: ModuleType, qualname: str, found: Any) -> str:
    """Why `found` (at `qualname` in `module`) is left alone, and what to name instead."""
    owner, attribute = resolve(module, qualname)
    where = ".".join([module.__name__, *qualname.split(".")[:-1]])
    if isinstance(owner, type) and not any(attribute in vars(c) for c in owner.__mro__):
        # Found on the metaclass (after `del Runner.__call__`, type.__call__, which makes
        # instances): nothing of the class's own launches there.
        problem = f"class {where} has no {attribute} of its own (it is {type(owner).__name__}'s)"
        return f"is not a function or method: {problem}; it is left as it is, not named"
    suggestion = _call_method(found)
    such_as = f", such as {suggestion}" if suggestion else ""
    return (
        f"is not a function or method ({type(found).__name__}); it is left as it is, not named "
        f"(name a launch function or method{such_as})"
    )


def _call_method(found: Any) -> str | None:
    """The `module:Class.__call__` target that calling `found` (a class's instances, or an
    instance) runs, where its class has one of its own and is reachable by name."""
    cls = found if isinstance(found, type) else type(found)
    if not any("__call__" in vars(c) for c in cls.__mro__[:-1]):  # [:-1]: not object's
        return None
    module_name, qualname = getattr(cls, "__module__", None), getattr(cls, "__qualname__", "")
    if not isinstance(module_name, str) or "<" in qualname or runs_on(module_name):
        return None
    return f"{module_name}:{qualname}.__call__"


def _is_function(candidate: Any) -> bool:
    cython = type(candidate).__name__ == "cython_function_or_method"
    return cython or isinstance(candidate, _FUNCTIONS)


def _version_note(module: ModuleType) -> str:
    top = sys.modules.get(module.__name__.split(".", 1)[0])
    version = getattr(top, "__version__", None)
    return f"unsupported version {version} of {top.__name__}? " if version and top else ""


# --- versions, for doctor and rename mode ----------------------------------------------------


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: '0.30.4rc1' -> (0, 30, 4)."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else (0,)


def installed_version(module: str, distributions: tuple[str, ...]) -> str | None:
    """The imported `module`'s __version__, else the first of `distributions` installed."""
    version = getattr(sys.modules.get(module), "__version__", None)
    if isinstance(version, str):
        return version
    import importlib.metadata  # deferred: about 10 ms of every KNAME=1 start-up otherwise

    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
