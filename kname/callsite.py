"""The call site of a launch: the naming rules of the moment, what kind of code each code object
is, and the site record built, named and cached on a miss.

Per launch, the wrapper looks up `sites[(id(code), f_lasti, kernel_key)]` for its caller's frame
(see kname.launch). Everything here runs only when that look-up misses. The other jobs are
modules of their own: the cache and its bounds (kname.site_cache), the kernels' weak references
(kname.kernel_refs), the walk past library frames and the site's key (kname.walk), a fault at
a launch (kname.site_faults).

Code objects are never hashed (CPython hashes code by value, on every look-up): the decision on a
code object is keyed by its id, and taken away by a weak reference as the code is freed (a plain
dict pop: a callback that runs no bytecode, where nothing can be raised into it).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import re
import sys
import weakref
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, ClassVar

from kname import counters, faults, naming, ranges, site_cache, walk
from kname._locks import reset_in_child
from kname._warnings import report_fault, warn_once
from kname._watched import Watched
from kname.config import DEFAULT_FORMAT, MAX_NAME_LENGTH
from kname.site_cache import _lock, sites

# Re-exported: what other modules and the tests read here.
from kname.walk import (  # noqa: F401
    COMPILE,
    LIBRARY,
    PLUMBING,
    USER,
    WRAPPER,
    _wrapper_code_ids,
    register_wrapper_code,
)

MAX_CODES = 200_000

UNNAMED = "<unnamed: kname error>"

# Frames of these modules are never the call site: kname and wrapt, and the stdlib helpers that
# sit between a user's line and a launch. install() adds the GPU libraries' packages (each
# library unit names its own).
CORE_LIBRARY_MODULES = (
    "kname", "wrapt", "functools", "contextlib", "threading", "runpy", "importlib",
    "_frozen_importlib", "_frozen_importlib_external",
)  # fmt: skip

_CORE_LIBRARY_SET = frozenset(CORE_LIBRARY_MODULES)

_KNAME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    """Where the standard library lives: made at the first frame of a standard module's name
    that is judged (sysconfig's import is 0.5 ms of a start-up that may never need it)."""
    import sysconfig

    dirs = {os.path.dirname(os.__file__) + os.sep}
    # An interpreter without its _sysconfigdata module (seen under ncu) still names launches.
    with contextlib.suppress(Exception):
        dirs.add(sysconfig.get_paths()["stdlib"] + os.sep)
    return tuple(dirs)


# A launch beneath COMPILE code (kname.walk) is named apart, with this after its name.
COMPILE_MARK = " (compile)"

# is_generated(code, module): whether a library made `code` at run time, as its own code
# (a code object made to run in the user's module, or with no module of its own).
Generated = Callable[[CodeType, "str | None"], bool]
# Whether a function of a library module doing both builds and runs (Inductor's cudagraph trees)
# is build-time work: True COMPILE, False LIBRARY, None the module's own kind.
CompilePhase = Callable[[CodeType], "bool | None"]


class Site(Watched):
    """Everything a launch from one call site needs, built once.

    A Watched object: every change is told to the C wrapper, which remembers a cached launch's
    counter and range.
    """

    __slots__ = (
        "code_refs", "counter", "identifier", "kernel", "launch", "lib", "name", "pop", "push",
    )  # fmt: skip

    def __init__(self, name, identifier, kernel, lib, calls, code_refs, counter):
        # Set as plain slots, without telling (Watched): no launch has remembered a new site.
        # Through each slot's own setter (_SET_*: object.__setattr__ looks the name up, twice
        # the cost, at every new site).
        _SET_NAME(self, name)  # the display name, as the profiler shows it
        _SET_IDENTIFIER(self, identifier)  # identifier-safe form, for renamed kernels
        # The kernel's name (never the kernel: a site must not keep it).
        _SET_KERNEL(self, kernel)
        _SET_LIB(self, lib)
        # The range's prebuilt NVTX push and pop (ranges.range_for), None when none is emitted.
        push, pop = (None, None) if calls is None else calls
        _SET_PUSH(self, push)
        _SET_POP(self, pop)
        # Weak references to the code objects its key holds: as one is freed, the site leaves.
        _SET_CODE_REFS(self, code_refs)
        # Shared by every site of this name (kname.counters): next() is atomic, so no count is
        # lost across threads, nor when the site leaves the cache while a launch still holds it.
        _SET_COUNTER(self, counter)
        _SET_LAUNCH(self, None)  # KNAME_MODE=rename: launches the site's renamed kernel instead
        site_calls = _rules.site_calls
        if site_calls is not None:  # kname profile: the launch also hands its site over
            push, pop = site_calls(self)
            _SET_PUSH(self, push)
            _SET_POP(self, pop)

    def launches(self) -> int:
        """How many launches were counted under this site's name (by any site of that name)."""
        return counters.value(self.counter)


# Each slot's setter, as Site.__init__ sets them.
(
    _SET_CODE_REFS,
    _SET_COUNTER,
    _SET_IDENTIFIER,
    _SET_KERNEL,
    _SET_LAUNCH,
    _SET_LIB,
    _SET_NAME,
    _SET_POP,
    _SET_PUSH,
) = (
    Site.__dict__[slot].__set__
    for slot in ("code_refs", "counter", "identifier", "kernel", "launch", "lib", "name", "pop",
                 "push")
)  # fmt: skip


class Rules:
    """The naming rules of the moment: install() sets them (configure), kname profile hands
    sites over (use_site_calls); replaced whole, so a walk reads one set of them. Frozen."""

    # What __init__ takes, in order; the library path and the sets are made from them.
    _GIVEN = (
        "skip",  # KNAME_SKIP: modules passed over as library code
        "template",  # KNAME_FORMAT
        "depth",  # KNAME_DEPTH: user frames in a name
        "emit_nvtx",  # False in census mode: sites get no range
        "library_modules",  # never a call site
        # Sites take their push and pop from site_calls(site) (None: NVTX's alone).
        "site_calls",
        "user",  # KNAME_USER: modules whose frames are user code after all
        "compile_modules",  # library modules doing build-time work (COMPILE)
        # Code libraries make at run time, with the module making it: (module, is_generated).
        "generated",
        # Library modules judged function by function, build time or run: (module, phase).
        "compile_phases",
    )
    # The library modules' files, for code run with no module name; skip, user,
    # compile_modules and library_modules as sets (_kind_of_module).
    __slots__ = (*_GIVEN, "library_path", "sets")

    def __init__(
        self,
        skip: tuple[str, ...] = (),
        template: str = DEFAULT_FORMAT,
        depth: int = 1,
        emit_nvtx: bool = True,
        library_modules: tuple[str, ...] = CORE_LIBRARY_MODULES,
        site_calls: Callable[[Site], tuple[Any, Any]] | None = None,
        user: tuple[str, ...] = (),
        compile_modules: tuple[str, ...] = (),
        generated: tuple[tuple[str, Generated], ...] = (),
        compile_phases: tuple[tuple[str, CompilePhase], ...] = (),
    ) -> None:
        given = (skip, template, depth, emit_nvtx, library_modules, site_calls, user,
                 compile_modules, generated, compile_phases)  # fmt: skip
        for name, value in zip(self._GIVEN, given, strict=True):
            object.__setattr__(self, name, value)
        library = tuple(m for m in library_modules if not _matches(m, user))
        object.__setattr__(self, "library_path", _library_path_pattern(library))
        lists = (skip, user, compile_modules, library_modules)
        object.__setattr__(self, "sets", tuple(map(frozenset, lists)))

    def _given(self) -> tuple:
        return tuple(getattr(self, name) for name in self._GIVEN)

    def replace(self, **changes: Any) -> Rules:
        """These rules with `changes` (as dataclasses.replace)."""
        return Rules(**{**dict(zip(self._GIVEN, self._given(), strict=True)), **changes})

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Rules are replaced whole, not changed: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rules) and self._given() == other._given()

    def __hash__(self) -> int:
        return hash(self._given())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._GIVEN)
        return f"Rules({fields})"


def _matches(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _dotted_prefixes(module: str) -> frozenset[str]:
    """`a`, `a.b` and `a.b.c` for `a.b.c`: _matches(module, p) is whether one of them is in p,
    a set look-up each, however many modules the rules name."""
    prefixes, at = [module], module.find(".")
    while at >= 0:
        prefixes.append(module[:at])
        at = module.find(".", at + 1)
    return frozenset(prefixes)


def _library_path_pattern(modules: tuple[str, ...]) -> re.Pattern[str]:
    names = "|".join(re.escape(m) for m in modules)
    return re.compile(r"[/\\](?:site|dist)-packages[/\\](?:" + names + r")(?:[/\\]|\.py)")


_rules = Rules()
_kinds: dict[int, int] = {}
# id(code) -> a weak reference to the code decided on, which takes its decision away with it
_codes: dict[int, weakref.ref] = {}
# The kind of code of each (module name, file) judged by its module alone (None: by the code):
# a new line in a module seen before is judged at once.
_module_kinds: dict[tuple[str, str], int | None] = {}
# Sites being named: what each step of the naming has computed, kept as soon as it is, so that
# an attempt interrupted from outside (a timer's TimeoutError every few microseconds) is resumed
# by the next one instead of begun again. Taken out once the site is cached; the oldest go first.
MAX_IN_PROGRESS = 256
_in_progress: dict[tuple, _Progress] = {}


class _Progress:
    """The steps of naming one site done so far: each frame's facts, the name, the range."""

    __slots__ = ("calls", "codes", "facts", "identifier", "kernel_name", "lib", "name", "rules")

    def __init__(self, codes: tuple, kernel_name: str, lib: str, rules: Rules) -> None:
        # The code objects keying the site, held: their ids cannot be reused while it waits.
        self.codes = codes
        self.kernel_name, self.lib, self.rules = kernel_name, lib, rules
        # Each frame's facts, set by index: a signal handler naming the same site meanwhile
        # sets the same ones. (Each fact of a frame is also kept by naming, per file.)
        self.facts: list[naming.FrameFacts | None] = [None] * len(codes)
        self.name: str | None = None
        self.identifier: str | None = None  # made only for a renamed kernel
        self.calls: tuple[Any] | None = None

    def is_for(self, codes: tuple, kernel_name: str, lib: str, rules: Rules) -> bool:
        same_codes = len(codes) == len(self.codes) and all(map(operator.is_, codes, self.codes))
        return (
            same_codes
            and (kernel_name, lib) == (self.kernel_name, self.lib)
            and rules is self.rules
        )


def configure(
    skip: tuple[str, ...] = (),
    template: str = DEFAULT_FORMAT,
    depth: int = 1,
    emit_nvtx: bool = True,
    library_modules: tuple[str, ...] = (),
    user: tuple[str, ...] = (),
    compile_modules: tuple[str, ...] = (),
    generated: tuple[tuple[str, Generated], ...] = (),
    compile_phases: tuple[tuple[str, CompilePhase], ...] = (),
) -> None:
    """Set the rules (no arguments: the defaults); forget every decision and site made under the
    old ones, but keep their launch counts. Sites keep being handed over (use_site_calls).

    `user` (KNAME_USER) makes library modules user code again, with the code they generate;
    KNAME_SKIP still wins over it, and kname's own and the standard library stay plumbing.
    """
    global _rules
    with _lock:
        library = (*CORE_LIBRARY_MODULES, *library_modules)
        site_calls = _rules.site_calls
        makers = tuple((m, rule) for m, rule in generated if not _matches(m, tuple(user)))
        _rules = Rules(
            tuple(skip), template, depth, emit_nvtx, library, site_calls, tuple(user),
            tuple(compile_modules), makers, tuple(compile_phases),
        )  # fmt: skip
        _forget_sites()
        _forget_kinds()
        _native_rules(_rules)


def use_site_calls(factory: Callable[[Site], tuple[Any, Any]] | None = None) -> None:
    """Sites built from now on take their push and pop from `factory(site)` (None: NVTX's alone).

    `kname profile` hands each wrapped launch's site to its collector this way, at no cost to a
    launch when it is not profiling. Cached sites are dropped, so every site is built anew; their
    launch counts are kept. `factory` must not raise.
    """
    global _rules
    with _lock:
        _rules = _rules.replace(site_calls=factory)
        _forget_sites()


def clear() -> None:
    """Forget cached code classifications and call sites, and their counts."""
    with _lock:
        _forget_sites()
        _forget_kinds()
        counters.clear()


def resolve(
    frame: FrameType,
    kernel: Any,
    kernel_key: Any,
    kernel_name: str | Callable[[Any], str],
    lib: str,
    rename: Any = None,
) -> Site | None:
    """The site for a launch whose wrapper was called from `frame`; None if it is nested.

    Walks past library frames to the first user frame (or `depth` of them), then looks the key
    up again and builds the site on a miss (with `rename(kernel, site)` as its `launch`).
    `kernel_name` may be a function of the kernel: it is then asked only when a site is built.
    `kernel_key` is `id(kernel)` (the site then lives only as long as the kernel) or a value.
    """
    rules = _rules
    user_frames, library_frame, compiling = walk.stack(frame, rules.depth, kind_of)
    if user_frames is None:
        return None
    key, site_frames = walk.site_key(user_frames, library_frame, kernel_key, rules.depth, compiling)
    site = sites.get(key)
    if site is None:
        if callable(kernel_name):
            kernel_name = kernel_name(kernel)
        site = _build(
            key, site_frames, kernel, kernel_key, kernel_name, lib, rules, rename, compiling
        )
    return site


def kind_of(code: CodeType, module: object) -> int:
    """USER, LIBRARY or PLUMBING for `code`, decided once per code object."""
    kind = _kinds.get(id(code))
    if kind is None:
        kind = _judge(code, module)
        with _lock:
            if len(_codes) >= MAX_CODES:  # the decisions on freed code are counted too
                _forget_kinds()
                for wrapper_id in _wrapper_code_ids:
                    _kinds[wrapper_id] = WRAPPER
            # First: no decision on a code object that could be freed unseen.
            _codes[id(code)] = weakref.ref(code, functools.partial(_kinds.pop, id(code)))
            _kinds[id(code)] = kind
    return kind


class NativeMiss:
    """What the C wrapper reads to name a miss itself (kname/_native_c/miss.c): the common
    miss, a launch straight from a line of user code, named by that one frame. One per wrapper
    (its kernel's name, library and renaming); the class holds what every wrapper shares, set
    by the rules of the moment. The Python rules decide: C only looks their answers up."""

    __slots__ = ("kernel_name", "lib", "rename")

    # Whether C may name a miss: the rules name a site by one user frame (KNAME_DEPTH 1), and C
    # met no fault of its own since they were set (failed()).
    in_c: ClassVar[bool] = True
    # The modules whose import makes user code's kind a question for Python (generated code).
    makers: ClassVar[tuple[str, ...]] = ()
    # (module, file name) -> the file's `{path}`, where its code is named in C (place_of): a user
    # module's real file, no IPython loaded. None: every launch from it is named in Python.
    places: ClassVar[dict[tuple[str, str], str | None]] = {}
    # KNAME_FORMAT as naming.template_fields parts (None: Python renders every name), and the
    # longest name C gives as it is (naming.display_name cuts a longer one, or one not ASCII).
    template: ClassVar[tuple[str | int, ...] | None] = naming.template_fields(DEFAULT_FORMAT)
    max_length: ClassVar[int] = MAX_NAME_LENGTH
    judge = staticmethod(kind_of)  # a code object's kind, where makers are imported

    def __init__(self, kernel_name: str | Callable[[Any], str], lib: str, rename: Any) -> None:
        self.kernel_name, self.lib, self.rename = kernel_name, lib, rename

    @staticmethod
    def place_of(code: CodeType, module: str) -> str | None:
        """The `{path}` of `code`'s file where C names its launches (None: Python does), kept in
        `places`: once per file and module."""
        filename = code.co_filename
        key, place = (module, filename), None
        # A cell's, or code timed in one, and files IPython may run as cells: named in Python.
        if not filename.startswith("<") and "IPython" not in sys.modules:
            kind = _module_kinds.get(key, False)
            if kind is False:  # as _judge decides it
                kind = _module_kinds[key] = _kind_of_module(module, filename, _rules)
            if kind is None or kind == USER:
                place = naming.file_path(filename)
        NativeMiss.places[key] = place
        return place

    @staticmethod
    def failed(exc: BaseException) -> None:
        """C's naming of a miss failed on its own: said once; Python names every miss from now
        on, until the rules are set again."""
        NativeMiss.in_c = False
        report_fault("naming a new call site in C", exc, "Python names new call sites from now on")

    def build(
        self,
        code: CodeType,
        lasti: int,
        kernel: Any,
        kernel_key: Any,
        kernel_name: Any,
        name: str | None,
        *facts: Any,
    ) -> Site | None:
        """The site of a launch from `code` at `lasti`, a user frame C read: its FrameFacts'
        fields `facts`, as naming.frame_facts reads them, the kernel's name and the site's, as
        naming.display_name makes it (None: not made in C)."""
        rules = _rules
        if rules.depth != 1:  # the rules changed since C read them: Python walks
            return resolve(sys._getframe(1), kernel, kernel_key, self.kernel_name, self.lib,
                           self.rename)  # fmt: skip
        key = (id(code), lasti, kernel_key)
        site = sites.get(key)
        if site is not None:
            return site
        frame = _new_facts(naming.FrameFacts, facts)
        return _build(key, [frame], kernel, kernel_key, kernel_name, self.lib, rules, self.rename,
                      codes=(code,), name=name)  # fmt: skip


def _native_rules(rules: Rules) -> None:
    """What C reads of `rules` (NativeMiss), and the files it named under the old ones gone."""
    NativeMiss.in_c = rules.depth == 1
    NativeMiss.makers = tuple(maker for maker, _ in rules.generated)
    NativeMiss.template = naming.template_fields(rules.template)
    NativeMiss.places.clear()


_new_facts = tuple.__new__


def site_name(depth: int = 1, kernel: Any = "") -> str:
    """The name a launch made from the line calling this would get (for custom launchers).

    Frames of library code and KNAME_SKIP modules are passed over, as for a launch: called from
    a launch helper listed in KNAME_SKIP, it names the helper's caller. `kernel` is the kernel's
    name, or the kernel object itself.
    """
    frame = sys._getframe(1)
    label = naming.kernel_label(kernel)
    depth, rules = max(1, int(depth)), _rules
    user_frames, library_frame, compiling = walk.stack(frame, depth, kind_of, stop_at_wrapper=False)
    key, site_frames = walk.site_key(
        user_frames or [], library_frame, ("site_name", label), depth, compiling
    )
    site = sites.get(key)
    if site is None:
        site = _build(key, site_frames, None, None, label, "python", rules, None, compiling)
    return site.name


def _forget_sites() -> None:
    _in_progress.clear()
    site_cache.forget_sites()


def _forget_kinds() -> None:
    _kinds.clear()
    _codes.clear()
    _module_kinds.clear()
    NativeMiss.places.clear()


def _judge(code: CodeType, module: object) -> int:
    rules = _rules
    filename = code.co_filename
    if isinstance(module, str):
        place = (module, filename)
        kind = _module_kinds.get(place, False)
        if kind is False:  # a module and file not seen before
            kind = _module_kinds[place] = _kind_of_module(module, filename, rules)
        if kind in (LIBRARY, COMPILE) and rules.compile_phases:
            kind = _phase_of(code, module, rules.compile_phases, kind)
        if kind is not None:
            return kind
    # No module name (code run by exec with bare globals): judge by where the file lives. A
    # pseudo-file (`<string>`) is code made at run time, which has no line to show.
    elif filename.startswith(_KNAME_DIR):
        return PLUMBING
    elif filename.startswith("<") or rules.library_path.search(filename):
        return LIBRARY
    # Code a library made at run time: asked only of the libraries imported so far, as a library
    # makes code only once it is (most programs import none of them).
    modules = sys.modules
    for maker, is_generated in rules.generated:
        if maker in modules and is_generated(code, module):
            return LIBRARY
    return USER


def _phase_of(
    code: CodeType, module: str, phases: tuple[tuple[str, CompilePhase], ...], kind: int
) -> int:
    """COMPILE or LIBRARY for a function of a module judged function by function, else `kind`."""
    for owner, phase in phases:
        if module == owner:
            compiling = phase(code)
            if compiling is not None:
                return COMPILE if compiling else LIBRARY
    return kind


def _kind_of_module(module: str, filename: str, rules: Rules) -> int | None:
    """The kind of all code of `module` (from `filename`), or None: judged by the code."""
    prefixes = _dotted_prefixes(module)
    if not prefixes.isdisjoint(_CORE_LIBRARY_SET) or _is_stdlib(module, filename):
        return PLUMBING
    skip, user, compile_modules, library_modules = rules.sets
    if not prefixes.isdisjoint(skip):
        return LIBRARY
    if not prefixes.isdisjoint(user):
        return USER
    if not prefixes.isdisjoint(compile_modules):
        return COMPILE
    if not prefixes.isdisjoint(library_modules):
        return LIBRARY
    return None


def _is_stdlib(module: str, filename: str) -> bool:
    """A module of the standard library, where the standard library lives (a user's own module
    named `test` or `code` is not)."""
    if module.partition(".")[0] not in sys.stdlib_module_names:
        return False
    return filename.startswith(_stdlib_dirs()) or filename.startswith("<frozen ")


def _build(
    key: tuple,
    frames: list[FrameType | naming.FrameFacts],
    kernel: Any,
    kernel_key: Any,
    kernel_name: str,
    lib: str,
    rules: Rules,
    rename: Any = None,
    compiling: bool = False,
    codes: tuple[CodeType, ...] | None = None,
    name: str | None = None,
) -> Site:
    """The site for `key`, built and cached (another thread's, if it was first). `frames` may be
    their facts, read already (by the C wrapper), with their `codes` (and the `name` it made).

    An exception raised into naming from outside is raised once the site is cached with the name
    it should have; a fault of kname's own caches it unnamed, said once."""
    if codes is None:
        codes = (frames[0].f_code,) if len(frames) == 1 else tuple([f.f_code for f in frames])
    renaming = rename is not None
    try:
        if name is not None and not renaming:  # by the C wrapper: the range is all that is left
            made = ranges.range_for(name, kernel_name, lib) if rules.emit_nvtx else None
            identifier, calls = "", made
        else:
            name, identifier, calls = _naming(
                key, frames, codes, kernel_name, lib, rules, compiling, renaming, name
            )
        outside = None
    except RecursionError:
        raise  # no room on the stack to name it here: not a fault, and not cached
    except Exception as exc:
        failed = _naming_failed(
            exc, key, frames, codes, kernel_name, lib, rules, compiling, renaming, name
        )
        name, identifier, calls, outside = failed
    with _lock:
        site = sites.get(key)
        if site is None:
            counter = counters.counter_for(name, kernel_name, lib)
            refs = site_cache.code_refs(key, codes)
            site = Site(name, identifier, kernel_name, lib, calls, refs, counter)
            if renaming and identifier:
                site.launch, raised = _renamed_launch(rename, kernel, site)
                outside = raised if outside is None else outside
            site_cache.store(key, site, kernel, kernel_key)
    _in_progress.pop(key, None)
    if outside is not None:
        raise outside
    return site


def _naming_failed(
    exc: Exception,
    key: tuple,
    frames: list[FrameType | naming.FrameFacts],
    codes: tuple[CodeType, ...],
    kernel_name: str,
    lib: str,
    rules: Rules,
    compiling: bool,
    renaming: bool,
    name: str | None,
) -> tuple[str, str, Any, BaseException | None]:
    """After naming a new site raised `exc`: its name, identifier and range calls, and `exc`
    where it was raised into naming from outside (None: it was kname's fault), to raise once
    the site is cached."""
    own, done, named = faults.take_again(
        exc, _naming, key, frames, codes, kernel_name, lib, rules, compiling, renaming, name
    )
    if not own:
        if not done:
            raise exc
        return (*named, exc)
    # The site still launches, counted but without a range, and the fault is said once.
    report_fault("naming a call site", exc)
    return f"{kernel_name} {UNNAMED}", "", None, None


def _naming(
    key: tuple,
    frames: list[FrameType | naming.FrameFacts],
    codes: tuple[CodeType, ...],
    kernel_name: str,
    lib: str,
    rules: Rules,
    compiling: bool,
    renaming: bool,
    name: str | None = None,
) -> tuple[str, str, Any]:
    """The name, identifier ("" unless `renaming`) and range calls of the site at `key` (the
    code of `frames` is `codes`), resuming an attempt that was interrupted: each step's result
    is kept as soon as it is computed. `name`: made already (by the C wrapper)."""
    progress = _progress_of(key, codes, kernel_name, lib, rules)
    facts = progress.facts
    for index, frame in enumerate(frames):  # each step kept by index as soon as it is made
        if facts[index] is None:
            is_facts = type(frame) is naming.FrameFacts  # read by the C wrapper
            facts[index] = frame if is_facts else naming.frame_facts(frame)
    if progress.name is None:
        if name is None:  # not made by the C wrapper
            name = _display_name(facts, kernel_name, lib, rules.template, compiling)
        progress.name = name
    if renaming and progress.identifier is None:
        # Only a renamed kernel is named by it: no other launch reads it.
        progress.identifier = naming.identifier_name(kernel_name, facts[0]) if facts else ""
    if progress.calls is None:
        name = progress.name
        progress.calls = (ranges.range_for(name, kernel_name, lib) if rules.emit_nvtx else None,)
    return progress.name, progress.identifier or "", progress.calls[0]


def _progress_of(
    key: tuple, codes: tuple[CodeType, ...], kernel_name: str, lib: str, rules: Rules
) -> _Progress:
    """The naming of the site at `key` done so far (a new one if none, or another's)."""
    progress = _in_progress.get(key)
    if progress is not None and progress.is_for(codes, kernel_name, lib, rules):
        return progress
    if len(_in_progress) >= MAX_IN_PROGRESS:
        # The oldest: one no attempt came back for. A signal handler may empty it meanwhile.
        with contextlib.suppress(StopIteration, RuntimeError):
            _in_progress.pop(next(iter(_in_progress)), None)
    progress = _in_progress[key] = _Progress(codes, kernel_name, lib, rules)
    return progress


def _display_name(
    facts: list[Any], kernel_name: str, lib: str, template: str, compiling: bool
) -> str:
    """The display name (by the kernel alone where there is no frame to name it by)."""
    if not facts:
        return naming.kernel_only_name(kernel_name)
    name = naming.display_name(template, kernel_name, lib, facts)
    return name + COMPILE_MARK if compiling else name


def _renamed_launch(rename: Any, kernel: Any, site: Site) -> tuple[Any, BaseException | None]:
    """The target's launch of `site`'s renamed kernel (None: the kernel's own name, on a fault
    of kname's), and an exception raised into renaming from outside (None: none)."""
    try:
        return rename(kernel, site), None
    except RecursionError:
        raise
    except Exception as exc:
        own, done, launch = faults.take_again(exc, rename, kernel, site)
        if not own:
            if not done:
                raise
            return launch, exc
        warn_once(
            f"rename:{site.lib}:{type(exc).__name__}",
            f"KNAME_MODE=rename: could not rename {site.kernel} for {site.name} "
            f"({type(exc).__name__}: {exc}); such launches keep the kernel's own name",
        )
        return None, None


def _counts_from_zero() -> None:
    """A forked child counts its own launches: the parent reports those made before the fork."""
    renewed = counters.start_from_zero()
    for site in list(sites.values()):
        counter = renewed.get(site.counter)
        site.counter = counter or counters.counter_for(site.name, site.kernel, site.lib)


reset_in_child(_counts_from_zero)
