"""The C hot path (kname._native): chosen where it is built, the same behaviour as the Python one.

The behavioural tests of launches (faults, exceptions, threads, fork, census, rename, lifecycle)
run on both paths (tests/conftest.py); the choice itself is test_hotpath's. Here: what only C can
get wrong (reference counts, the table of recent hits going stale), and the build: without a
compiler kname still installs, each C file compiles without warnings, setup.py lists every file
the extensions are built from, and each extension exports only its init function.
"""

from __future__ import annotations

import functools
import gc
import importlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from support import REPO, build_wheel_of, copy_checkout, extension_inputs, make_venv
from support.nvtx_capture import nvtx_include_dir

from kname import callsite, counters, hotpath, launch, site_faults, targets

WHY_NOT_NATIVE = hotpath.choose(True).why_python  # "" where the C hot path is in use
EXTENSION = None if WHY_NOT_NATIVE else sys.modules[hotpath.NATIVE]
COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def noop(*args, **kwargs):
    return args


def wrap(original, kernel_of=None, switch=None, kernel_name=lambda _kernel: "kernel"):
    callsite.configure()
    spec = launch.LaunchSpec("test", kernel_name, kernel_of)
    return launch.make_launch_wrapper(original, spec, switch or launch.Switch())


@pytest.mark.launches
def test_the_wrapper_passes_arguments_results_and_identity_through(hot_path) -> None:
    wrapper = wrap(noop)
    assert wrapper(1, 2, key=3) == (1, 2)
    assert wrapper.__wrapped__ is noop and wrapper.__name__ == "noop"
    assert callsite.sites and [s.launches() for s in callsite.sites.values()] == [1]


# --------------------------------------------------------------------------
# Reference counts and memory: every way through the wrapper leaves no reference behind
# --------------------------------------------------------------------------


class Kernel:
    """A launched kernel object (KernelArg(0)), with an attribute kernel_of may read."""

    dispatcher = None


def raising(*args):
    raise ValueError("from the launch")


class Scenario:
    """One way through a launch wrapper, taken `n` times by run(n)."""

    def __init__(self, name: str, slot: bool = False) -> None:
        self.name = name
        self.kernel, self.argument, self.switch = Kernel(), object(), launch.Switch()
        kernel_of = launch.KernelArg(0, "missing" if name == "kernel_of fails" else None)
        original = raising if name in ("launch raises", "pop interrupts") else noop
        if name == "nested":  # a launch made inside another one's launch: unnamed
            inner = wrap(noop, launch.KernelArg(0))
            self.inner = inner
            original = inner
        if slot:  # as on kname's CuPy subclasses: the wrapper as __call__, from kname's C slot
            self.launcher = launcher_class(kernel_of, self.switch)
            self.wrapper = self.launcher(original)
        else:
            self.wrapper = wrap(original, kernel_of, self.switch)
        self.switch.on = name != "switch off"
        self.pushes = self.pops = 0
        self.args = () if name == "not a launch" else (self.kernel, self.argument)

    def push(self) -> None:
        self.pushes += 1
        if self.name == "push fails":
            raise RuntimeError("push failed")

    def pop(self) -> None:
        self.pops += 1
        if self.name == "pop fails":
            raise RuntimeError("pop failed")
        if self.name == "pop interrupts":
            raise KeyboardInterrupt

    def run(self, n: int) -> None:
        for _ in range(n):
            for site in callsite.sites.values():  # a fault's pass_through took the range away
                site.push, site.pop = self.push, self.pop
                if self.name == "renamed":
                    site.launch = noop
            try:
                result = self.wrapper(*self.args)
            except (ValueError, KeyboardInterrupt):
                result = None
            del result

    def watched(self) -> list[object]:
        launcher = getattr(self, "launcher", None)
        slot = [] if launcher is None else [launcher, vars(launcher)["__call__"]]
        return [self.kernel, self.argument, self.switch, self.wrapper, noop, raising,
                *callsite.sites.values(), *slot]  # fmt: skip


SCENARIOS = [
    "named", "launch raises", "push fails", "pop fails", "pop interrupts", "kernel_of fails",
    "not a launch", "switch off", "nested", "renamed",
]  # fmt: skip


NATIVE = pytest.mark.skipif(EXTENSION is None, reason="no native hot path")


def launcher_class(kernel_of=None, switch=None, kernel_name=lambda _kernel: "kernel") -> type:
    """A Python subclass of a C class with a __call__ slot (staticmethod: calls what it holds),
    whose __call__ is a launch wrapper of the C class's own slot, called from kname's C slot:
    what kname makes of CuPy's kernel classes."""
    native = EXTENSION

    class Launcher(staticmethod):
        pass

    Launcher.__call__ = wrap(native.BaseCall(staticmethod), kernel_of, switch, kernel_name)
    native.use_direct_call(Launcher)
    assert native.has_direct_call(Launcher)
    return Launcher


@pytest.mark.launches
@pytest.mark.parametrize("name", SCENARIOS)
def test_no_way_through_the_wrapper_leaks_a_reference(hot_path, name: str, capsys) -> None:
    check_no_leak(Scenario(name), capsys)


@NATIVE
@pytest.mark.parametrize("name", [name for name in SCENARIOS if name != "not a launch"])
def test_no_way_through_the_c_call_slot_leaks_a_reference(name: str, capsys) -> None:
    check_no_leak(Scenario(name, slot=True), capsys)


def check_no_leak(scenario: Scenario, capsys) -> None:
    scenario.run(50)  # warm: sites built, faults reported once
    gc.collect()
    watched = scenario.watched()
    before = [sys.getrefcount(o) for o in watched]
    blocks = sys.getallocatedblocks()
    scenario.run(20_000)
    gc.collect()
    assert [sys.getrefcount(o) for o in watched] == before
    assert sys.getallocatedblocks() - blocks < 50  # nothing kept per launch
    assert scenario.pushes == scenario.pops  # every push() call met by one pop() call
    capsys.readouterr()


# --------------------------------------------------------------------------
# The table of recent hits never answers for a dict that changed
# --------------------------------------------------------------------------


@pytest.mark.launches
def test_a_launch_after_its_site_was_dropped_gets_a_new_site(hot_path) -> None:
    wrapper = wrap(noop)
    seen = []
    for round_ in range(3):
        wrapper()  # one line: one site at a time
        (site,) = callsite.sites.values()
        seen.append(site)
        if round_ == 0:
            callsite.sites.clear()  # as eviction does
        else:
            callsite.configure(template="again {line}")  # new rules: sites forgotten
    assert seen[0] is not seen[1] and seen[1] is not seen[2]
    assert seen[2].name.startswith("again ") and seen[1].name == seen[0].name
    assert [site.launches() for site in seen] == [2, 2, 1]  # counted per name, none lost


@pytest.mark.launches
def test_a_site_changed_in_place_is_read_afresh_at_each_launch(hot_path) -> None:
    calls = []
    wrapper = wrap(noop)
    for push in [None, lambda: calls.append("push"), None, lambda: calls.append("again")]:
        for site in callsite.sites.values():
            site.push, site.pop = push, lambda: calls.append("pop")
        wrapper()  # one line: one site, built by the first launch
    assert len(callsite.sites) == 1
    assert calls == ["push", "pop", "again", "pop"]


THROUGH = pytest.mark.parametrize("through", ["vectorcall", "C call slot"])


def launcher_through(through: str, hot_path: str, original=noop, switch=None):
    """A launcher of `original` whose kernel is its first argument: a launch wrapper called
    through vectorcall, or an instance of a class with kname's C slot (its kernel the instance,
    as for CuPy's kernels), whose cached launches take the slot's short path."""
    if through == "vectorcall":
        return wrap(original, launch.KernelArg(0), switch)
    if hot_path != "native":
        pytest.skip("the C call slot is the extension's")
    return launcher_class(launch.KernelArg(0), switch)(original)


def launch_from_one_line(launcher, *args):
    return launcher(*args)  # one line, one kernel: one site, its launch cached after the first


@pytest.mark.launches
@THROUGH
def test_a_cached_launch_counts_on_the_counter_its_site_has_now(hot_path, through: str) -> None:
    """The C wrapper remembers a cached launch's counter; a site given another one (as a fork's
    child renews them) counts on that one from its next launch."""
    launcher = launcher_through(through, hot_path)
    made = []
    for _ in range(4):
        for _ in range(3):
            launch_from_one_line(launcher, 1)
        (site,) = callsite.sites.values()
        made.append(site.counter)
        site.counter = counters.new_counter()
    assert [counters.value(counter) for counter in made] == [3, 3, 3, 3]


@pytest.mark.launches
@THROUGH
def test_a_cached_launch_follows_its_switch(hot_path, through: str) -> None:
    """The C wrapper remembers that a cached launch's switch was on; switched off, a launch from
    the same line is not counted, and switched on again it is."""
    switch = launch.Switch()
    launcher = launcher_through(through, hot_path, switch=switch)
    counted = []
    for on in [True, False, True, False]:
        switch.on = on
        for _ in range(3):
            launch_from_one_line(launcher, 1)
        counted.append(sum(counters.counts().values()))
    assert counted == [3, 3, 6, 6]


@pytest.mark.launches
@THROUGH
def test_a_site_whose_range_is_python_code_runs_it_at_every_launch(hot_path, through) -> None:
    """A cached launch is one whose range is NVTX's own (or none): one whose push and pop are
    Python callables takes every step at every launch, from the same line as often as not."""
    calls = []
    launcher = launcher_through(through, hot_path)
    launch_from_one_line(launcher, 1)  # the site made
    (site,) = callsite.sites.values()
    site.push, site.pop = (lambda: calls.append("push")), (lambda: calls.append("pop"))
    for _ in range(4):
        launch_from_one_line(launcher, 1)
    assert calls == ["push", "pop"] * 4
    assert site.launches() == 5


@pytest.mark.launches
@THROUGH
def test_a_launch_inside_a_cached_one_from_the_same_line_is_not_named(hot_path, through) -> None:
    """A launcher launched from a line, then again from C inside another launch from that line
    (no Python frame between): only the outer launch is named, though the inner one's launch from
    that line is a cached one."""
    if through == "vectorcall":
        inner = launcher_through(through, hot_path)
        outer = launcher_through(through, hot_path, original=functools.partial(inner))
    else:  # instances of one class, as CuPy's kernels are: the slot remembers that class
        if hot_path != "native":
            pytest.skip("the C call slot is the extension's")
        kernel_class = launcher_class(launch.KernelArg(0))
        inner = kernel_class(noop)
        outer = kernel_class(functools.partial(inner))
    for _ in range(3):
        for launcher in (inner, outer):
            launch_from_one_line(launcher, 1)
    assert sum(counters.counts().values()) == 6  # three of each, none of those nested


@pytest.mark.launches
@THROUGH
def test_a_cached_launch_keeps_no_reference(hot_path, through: str) -> None:
    """The leak scenarios above change their sites before each launch; here nothing changes,
    so all but the first launch are cached ones (the slot's short path, through the slot)."""
    argument = object()
    launcher = launcher_through(through, hot_path)
    for _ in range(50):
        launch_from_one_line(launcher, argument)
    (site,) = callsite.sites.values()
    watched = [launcher, argument, site, noop, type(launcher)]
    gc.collect()
    before, blocks = [sys.getrefcount(o) for o in watched], sys.getallocatedblocks()
    for _ in range(20_000):
        launch_from_one_line(launcher, argument)
    gc.collect()
    assert [sys.getrefcount(o) for o in watched] == before
    assert sys.getallocatedblocks() - blocks < 50
    assert site.launches() == 20_050


@NATIVE
def test_a_wrapper_made_where_a_freed_one_was_remembers_nothing_of_it() -> None:
    """Recent entries name their wrapper by its address: freeing one forgets them, so a new
    wrapper at that address, whose switch is off, does not launch from the same line as the
    freed one did."""
    callsite.configure()
    native = EXTENSION

    def resolve_site(frame, kernel):
        return callsite.resolve(frame, kernel, id(kernel), "kernel", "test", None)

    def make(switch):  # allocates nothing else of its size between a free and this
        return native.LaunchWrapper(
            noop, (0, None), switch, callsite.sites, resolve_site, site_faults.pass_through,
            callsite._kinds,
        )  # fmt: skip

    def launch_from_one_line(wrapper) -> None:
        wrapper(noop)

    on, off = launch.Switch(), launch.Switch(on=False)
    wrapper = make(on)
    for _ in range(3):
        launch_from_one_line(wrapper)  # cached
    address = id(wrapper)
    # The allocator hands the freed block out again once the free blocks of its size ahead of it
    # are taken: make wrappers, keeping each, until one lands there. The list is made first, so
    # that its growth takes no block; no other thread (pytest-xdist's I/O thread) may take the
    # GIL, nor the collector run, and allocate the freed block meanwhile.
    kept: list = [None] * 200_000
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    gc.disable()
    try:
        del wrapper
        for index in range(len(kept)):
            again = make(off)
            if id(again) == address:
                break
            kept[index] = again
    finally:
        gc.enable()
        sys.setswitchinterval(interval)
    assert id(again) == address, f"no wrapper made at the freed one's address in {len(kept)}"
    del kept
    counted = sum(counters.counts().values())
    launch_from_one_line(again)
    assert sum(counters.counts().values()) == counted  # switched off: not counted


@pytest.mark.launches
def test_a_launch_inside_a_switched_off_wrapper_is_left_to_it(hot_path) -> None:
    """A wrapper whose switch is off (one kept after its install was undone) still marks its
    launch as in progress, on both paths: a live wrapper called from inside it, with only
    library code between, names nothing (the outer call is the launch), as it would had the
    outer one been on."""
    calls = []
    inner = wrap(lambda: calls.append("inner"))
    off = launch.Switch()
    off.on = False
    outer = wrap(functools.partial(inner), switch=off)  # C calls `inner`: no frame between
    outer()
    assert calls == ["inner"]
    assert sum(count for count in counters.counts().values()) == 0


@pytest.mark.skipif(EXTENSION is None, reason="no native hot path here")
def test_base_call_calls_the_class_own_slot_as_its_slot_wrapper_does() -> None:
    """kname._native.BaseCall(base)(self, ...) is base.__call__(self, ...) (the original of the
    launch wrapper on kname's CuPy subclasses), errors included, and keeps no reference."""
    native = EXTENSION

    def f(*args, **kwargs):
        return args, kwargs

    class Sub(functools.partial):  # a C class with a __call__ slot, and a Python subclass
        pass

    call, slot = native.BaseCall(functools.partial), functools.partial.__call__
    for obj in (functools.partial(f, 1), Sub(f, 2)):
        for args, kwargs in [((), {}), ((3, 4), {}), ((5,), {"x": 6, "y": 7})]:
            assert call(obj, *args, **kwargs) == slot(obj, *args, **kwargs)
    for bad in [(), (object(),)]:
        with pytest.raises(TypeError, match="__call__"):
            call(*bad)
        with pytest.raises(TypeError):
            slot(*bad)
    with pytest.raises(TypeError, match="not callable"):
        native.BaseCall(object)
    obj, value = functools.partial(f), object()
    before = [sys.getrefcount(o) for o in (obj, value, f)]
    for _ in range(10_000):
        call(obj, value, key=value)
    assert [sys.getrefcount(o) for o in (obj, value, f)] == before


@NATIVE
def test_the_c_call_slot_passes_every_call_shape_through_as_cpythons_slot_does() -> None:
    """Instances of a class given kname's C slot (use_direct_call) are called as with CPython's
    slot for its __call__: the same results, keywords, many arguments and errors, each named."""
    held = functools.partial(lambda *args, **kwargs: (args, kwargs))
    launcher = launcher_class()
    python_slot = type("PythonSlot", (staticmethod,), {"__call__": staticmethod.__call__})
    shapes = [((), {}), ((1,), {}), ((1, 2), {"key": 3}), (tuple(range(20)), {"k": 1, "j": 2})]
    for args, kwargs in shapes:
        assert launcher(held)(*args, **kwargs) == python_slot(held)(*args, **kwargs)
    assert sum(site.launches() for site in callsite.sites.values()) == len(shapes)
    with pytest.raises(ValueError, match="from the launch"):
        launcher(raising)(1)
    with pytest.raises(TypeError, match="not callable"):
        launcher(None)()


@NATIVE
def test_setting_or_deleting_call_gives_cpythons_slot_back() -> None:
    native = EXTENSION
    launcher = launcher_class()
    # A subclass made later gets CPython's slot, which finds the same wrapper.
    child = type("Child", (launcher,), {})
    own = type("Own", (launcher,), {"__call__": lambda self, *args: "own"})
    assert not native.has_direct_call(child) and not native.has_direct_call(own)
    assert child(noop)(1) == (1,) and own(noop)(1) == "own"
    assert sum(site.launches() for site in callsite.sites.values()) == 1
    launcher.__call__ = lambda self, *args: ("replaced", args)
    assert not native.has_direct_call(launcher)
    assert launcher(noop)(2) == child(noop)(2) == ("replaced", (2,))
    del launcher.__call__
    assert launcher(noop)(3) == (3,) and not native.has_direct_call(launcher)
    for refused in (staticmethod, launcher, 1):  # not made in Python; no launch wrapper there
        with pytest.raises(TypeError, match="use_direct_call"):
            native.use_direct_call(refused)


@NATIVE
def test_the_c_call_slot_calls_each_class_through_its_own_base() -> None:
    """kname's C slot remembers, with the class it last called, that class's base slot (CuPy's,
    called straight): instances of two such classes, called in turn, each reach their own."""
    native = EXTENSION

    class Partial(functools.partial):
        pass

    Partial.__call__ = wrap(native.BaseCall(functools.partial), launch.KernelArg(0))
    native.use_direct_call(Partial)
    held, bound = launcher_class()(noop), Partial(noop, "bound")
    calls = [held, bound, held, bound]
    assert [kernel(1) for kernel in calls] == [(1,), ("bound", 1), (1,), ("bound", 1)]
    assert sum(counters.counts().values()) == len(calls)


@NATIVE
def test_the_c_call_slot_calls_the_call_its_class_has_now() -> None:
    """disable() then enable() take a CuPy class's __call__ away and set a new one, and give the
    class kname's slot again: the slot calls the new wrapper, not the one it remembered."""
    native = EXTENSION
    launcher = launcher_class()
    held = launcher(noop)
    assert held(1) == (1,)  # the slot remembers the class's wrapper
    del launcher.__call__
    off = launch.Switch()
    off.on = False
    launcher.__call__ = wrap(native.BaseCall(staticmethod), switch=off)
    native.use_direct_call(launcher)
    gc.collect()  # the wrapper remembered before is freed
    assert held(2) == (2,)
    assert sum(counters.counts().values()) == 1  # the new wrapper, switched off, counted none


@NATIVE
def test_a_cached_launch_through_the_slot_calls_the_call_its_class_has_now() -> None:
    """A launch from the same line after the class was given another __call__ is not the
    cached launch of the one before, which lives on (held elsewhere) with its switch on."""
    native = EXTENSION
    launcher = launcher_class(launch.KernelArg(0))
    before = vars(launcher)["__call__"]
    # Made first: a new switch, like any change to a switch, makes every recent entry stale.
    replacement = wrap(native.BaseCall(staticmethod), launch.KernelArg(0), launch.Switch(False))
    held = launcher(noop)
    for _ in range(3):
        launch_from_one_line(held, 1)  # the slot's short path from the second
    launcher.__call__ = replacement
    native.use_direct_call(launcher)
    assert launch_from_one_line(held, 2) == (2,)
    assert sum(counters.counts().values()) == 3  # the new wrapper, switched off, counted none
    assert before(held, 3) == (3,) and sum(counters.counts().values()) == 4  # it lives on


@NATIVE
def test_a_slot_launch_whose_kernel_is_an_argument_is_keyed_by_that_argument() -> None:
    """The slot's short path keys a launch by the instance it is called on, which is the kernel
    of CuPy's classes only. A class whose kernel is another argument takes the general path:
    two kernels launched in turn from one line through one instance are each counted as
    themselves."""

    def kernel_name(kernel) -> str:
        return "instance" if isinstance(kernel, staticmethod) else "argument"

    launcher = launcher_class(launch.KernelArg(1), kernel_name=kernel_name)  # (self, first, ...)
    held, other = launcher(noop), object()
    for _ in range(3):
        for kernel in (held, other):
            launch_from_one_line(held, kernel)
    counted = {key[1]: launches for key, launches in counters.counts().items()}
    assert counted == {"instance": 3, "argument": 3}


@NATIVE
@pytest.mark.parametrize("at", [1, 3], ids=["a first launch", "a cached launch"])
def test_a_class_changed_during_its_launch_finishes_that_launch(at: int) -> None:
    """The slot needs nothing of the wrapper once CuPy's slot is called: the launch may take
    __call__ away meanwhile and free it, on the slot's full path (a first launch from a line)
    and on its short one (a cached launch)."""
    launcher = launcher_class(launch.KernelArg(0))
    calls = []

    def take_call_away(*args):
        calls.append(args)
        if len(calls) == at:
            del launcher.__call__
            gc.collect()
        return args

    held = launcher(take_call_away)
    assert [launch_from_one_line(held, 1) for _ in range(4)] == [(1,)] * 4
    assert sum(site.launches() for site in callsite.sites.values()) == at  # none after


# --------------------------------------------------------------------------
# Fields read in place are read as getattr reads them, also after their class changed
# --------------------------------------------------------------------------


@pytest.mark.parametrize("changed", ["Site", "Switch"])
def test_a_class_changed_after_its_fields_were_learned_is_read_through_its_new_attributes(
    monkeypatch, changed: str
) -> None:
    """The C wrapper learns where a site's and a switch's fields live once; a change to their
    class afterwards (a slot replaced by a property) must be seen at the next launch."""
    if EXTENSION is None:
        pytest.skip(f"no native hot path here: {WHY_NOT_NATIVE}")
    wrapper = wrap(noop)

    def launch_once() -> None:
        wrapper(1)  # one call site

    def launches() -> int:
        (site,) = callsite.sites.values()
        return site.launches()

    for _ in range(3):
        launch_once()  # cached, its layouts learned
    calls: list[str] = []
    if changed == "Site":
        for field in ("push", "pop"):
            call = functools.partial(calls.append, field)
            monkeypatch.setattr(callsite.Site, field, property(lambda _site, c=call: c))
        launch_once()
        assert calls == ["push", "pop"] and launches() == 4
    else:
        monkeypatch.setattr(launch.Switch, "on", property(lambda _switch: False))
        launch_once()
        assert launches() == 3  # switched off by the property: not counted
    monkeypatch.undo()  # the slots back: read in place again
    calls.clear()
    launch_once()
    assert calls == [] and launches() == (5 if changed == "Site" else 4)


NO_WATCHERS = """
import ctypes
import json

# Every dict and type watcher id taken before kname._native is imported.
dict_callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, *[ctypes.c_void_p] * 3)
type_callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
held = []
for add, make in ((ctypes.pythonapi.PyDict_AddWatcher, dict_callback),
                  (ctypes.pythonapi.PyType_AddWatcher, type_callback)):
    add.argtypes, add.restype = [make], ctypes.c_int
    while True:
        held.append(make(lambda *args: 0))
        try:
            add(held[-1])
        except RuntimeError:  # no id left
            break

from kname import callsite, counters, hotpath, launch

hot_path = hotpath.current()  # imports kname._native now, with no watcher id left
callsite.configure()
spec = launch.LaunchSpec("test", lambda _kernel: "kernel", launch.KernelArg(0))
wrapper = launch.make_launch_wrapper(lambda *args: args, spec, launch.Switch())


class Launcher(staticmethod):
    pass


Launcher.__call__ = launch.make_launch_wrapper(
    hot_path.base_call(staticmethod), spec, launch.Switch()
)
hot_path.use_direct_call(Launcher)
held_kernel = Launcher(lambda *args: args)


def launches():
    wrapper(1)
    held_kernel(2)
    return sum(counters.counts().values())


counts = [launches() for _ in range(3)]
member = launch.Switch.__dict__["on"]
launch.Switch.on = property(lambda _switch: False)  # the class changed: switched off
counts.append(launches())
launch.Switch.on = member
counts.append(launches())
print(json.dumps(counts))
"""


@pytest.mark.skipif(sys.version_info < (3, 12), reason="dict and type watchers are 3.12+")
@NATIVE
def test_with_no_watcher_left_every_launch_is_read_afresh(tmp_path: Path) -> None:
    """Where another extension took every dict and type watcher id, kname remembers no look-up
    and reads each launch's fields and class anew: the same counts, a class change still seen."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", NO_WATCHERS], env=env, cwd=tmp_path, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [2, 4, 6, 6, 8]


# --------------------------------------------------------------------------
# Launch counters
# --------------------------------------------------------------------------


@NATIVE
def test_the_c_counter_counts_as_itertools_count_does() -> None:
    counter, reference = EXTENSION.Counter(), itertools.count()
    assert [next(counter) for _ in range(3)] == [next(reference) for _ in range(3)] == [0, 1, 2]
    assert repr(counter) == repr(reference) == "count(3)"
    assert counter.value == 3 and iter(counter) is counter
    with pytest.raises(TypeError):
        type(counter)(5)  # always from 0


@pytest.mark.launches
def test_a_site_counts_with_the_counter_of_its_hot_path(hot_path) -> None:
    wrapper = wrap(noop)
    for _ in range(4):
        wrapper()  # one line: one site
    (site,) = callsite.sites.values()
    expected = itertools.count if hot_path == "python" else EXTENSION.Counter
    assert type(site.counter) is expected  # either path advances either kind
    assert site.launches() == 4 and sum(counters.counts().values()) == 4


def test_with_kname_native_0_nothing_of_the_extension_is_imported(tmp_path: Path) -> None:
    """The pure-Python path is pure: its counters are itertools.count, and kname._native stays
    unimported, in a process that asked for that path from the start."""
    program = textwrap.dedent(
        """
        import sys
        import kname
        from kname import callsite
        kname.install(targets=["kname_probe:launch"])
        import kname_probe
        for _ in range(3):
            kname_probe.launch()
        (site,) = callsite.sites.values()
        print(type(site.counter).__name__, site.launches(), "kname._native" in sys.modules)
        """
    )
    (tmp_path / "kname_probe.py").write_text("def launch():\n    return None\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    env.update(KNAME_NATIVE="0", PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "count 3 False\n"


# --------------------------------------------------------------------------
# The caller's frame, read without making a frame object
# --------------------------------------------------------------------------

INTERPRETER_FRAMES = pytest.mark.skipif(
    EXTENSION is None or not (3, 11) <= sys.version_info < (3, 14),
    reason="the C wrapper reads the interpreter's frames on CPython 3.11 to 3.13",
)


@INTERPRETER_FRAMES
def test_a_cached_launch_from_a_function_makes_no_frame_object() -> None:
    """PyEval_GetFrame() would make the calling function's frame object at every call of that
    function (an allocation, and a copy as it returns): a step() called once per launch."""
    wrapper = wrap(noop)
    assert type(wrapper).__module__ == "kname._native"

    def step(launch) -> int:
        before = sys.getallocatedblocks()
        launch()
        return sys.getallocatedblocks() - before  # `before` itself is a block

    step(wrapper)  # a new site: Python's resolve() is handed the frame object
    unwrapped = [step(noop) for _ in range(5)]
    assert [step(wrapper) for _ in range(5)] == unwrapped
    assert sum(site.launches() for site in callsite.sites.values()) == 6


@NATIVE
def test_the_caller_of_the_running_native_launch_is_known_by_its_frame() -> None:
    is_launch_caller = EXTENSION.is_launch_caller
    seen = []

    def original() -> None:  # called from C: the frame above is the wrapper's caller's
        here = sys._getframe()
        seen.append((is_launch_caller(here.f_back), is_launch_caller(here)))

    wrapper = wrap(original)

    def caller():
        wrapper()
        return sys._getframe()

    frame = caller()
    assert seen == [(True, False)]
    assert is_launch_caller(frame) is False  # that launch has ended
    with pytest.raises(TypeError, match="takes a frame, not int"):
        is_launch_caller(1)


@pytest.mark.launches
def test_a_guarded_hook_runs_except_inside_a_native_launch(hot_path) -> None:
    """Triton's launch hooks are guarded so: a launch kname's C wrapper names costs them nothing
    (on the Python path the hook runs and its walk finds the wrapper's frame)."""
    calls = []

    def hook(*args, **kwargs) -> None:
        calls.append((args, kwargs))

    guarded = hotpath.current().skip_beneath(hook, callsite._kinds)
    assert guarded(1, x=2) is None and calls == [((1,), {"x": 2})]  # outside a launch: runs
    wrap(guarded)(3)  # the hook called from within a launch (straight from C, here)
    assert calls == [((1,), {"x": 2})] + ([] if hot_path == "native" else [((3,), {})])


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


NATIVE_SOURCES = [path for path in extension_inputs()["kname._native"] if path.suffix == ".c"]


@pytest.mark.skipif(COMPILER is None, reason="no C compiler")
@pytest.mark.parametrize("with_nvtx", [False, True], ids=["nvtx package", "NVTX C API"])
@pytest.mark.parametrize("source", NATIVE_SOURCES, ids=lambda path: path.name)
def test_each_c_file_compiles_without_warnings(tmp_path: Path, with_nvtx: bool, source) -> None:
    """Every file kname._native is built from (setup.py's list), the library units' too."""
    include = sysconfig.get_paths()["include"]
    nvtx = []
    if with_nvtx:
        headers = nvtx_include_dir()
        if headers is None:
            pytest.skip("no NVTX headers here (nvidia-nvtx is a test requirement)")
        nvtx = ["-DKNAME_NVTX=1", f"-I{headers}"]
    # Compiled for real (-fsyntax-only says nothing of functions left unused), optimised.
    done = subprocess.run(
        [COMPILER, "-c", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{include}",
         f"-I{REPO / 'kname'}", *nvtx, str(source), "-o", str(tmp_path / "native.o")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_without_a_compiler_kname_still_installs_and_says_so(tmp_path: Path, monkeypatch) -> None:
    source = copy_checkout(tmp_path / "source")
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    wheel = build_wheel_of(source, tmp_path / "dist")
    monkeypatch.undo()
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if "_native" in n and ".so" in n]
    venv = make_venv(tmp_path / "env")
    venv.install(str(wheel))
    done = venv.python_run("-m", "kname", "doctor")
    line = next(x for x in done.stdout.splitlines() if "hot path" in x)
    assert "pure Python (the extension kname._native was not built" in line, done.stdout


def test_a_librarys_c_is_beside_its_unit_named_by_it_and_built_into_the_extension() -> None:
    """A library's C lives in its unit's folder under the library's name, its unit's Library
    names it (c_sources), and setup.py builds it into kname._native; no C file under
    kname/targets/ is left out of either."""
    built = set(extension_inputs()["kname._native"])
    named = set()
    for name in targets.BUILTIN:
        folder = Path(importlib.import_module(f"kname.targets.{name}").__file__).parent
        for source in targets.library(name).c_sources:
            assert source == f"_native_{name}.c", f"{name}'s C is named for another: {source}"
            named.add(folder / source)
    assert named, "no library has C of its own: then this test checks nothing"
    assert named <= built, sorted(map(str, named - built))
    assert set((REPO / "kname" / "targets").rglob("*.c")) == named


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm (binutils) to read the symbols")
@pytest.mark.parametrize("extension", list(extension_inputs()))
def test_an_extension_exports_nothing_but_its_init_function(extension: str) -> None:
    """What one file of an extension defines for its others is hidden (INTERNAL in
    kname/_common_c/common.h): no other library's symbol of the same name can stand in for it, and a
    call or a read across its files is as direct as within one."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = REPO / f"{extension.replace('.', '/')}{suffix}"
    if not built.exists():
        pytest.skip(f"{extension} is not built here")
    done = subprocess.run(
        ["nm", "-D", "--defined-only", str(built)], capture_output=True, text=True, check=True
    )
    exported = [line.split()[-1] for line in done.stdout.splitlines() if line.strip()]
    assert exported == [f"PyInit_{extension.rsplit('.', 1)[1]}"]


def included_headers(path: Path) -> set[Path]:
    """kname's headers that `path` includes, as the build finds them: beside it, else in kname/
    (setup.py's include folder); CPython's own (`internal/pycore_frame.h`) are not kname's."""
    found = set()
    for name in re.findall(r'^#include "([^"]+)"', path.read_text(), re.M):
        for place in (path.parent / name, REPO / "kname" / name):
            if place.exists():
                found.add(place)
                break
    return found


@pytest.mark.parametrize("extension", list(extension_inputs()))
def test_setup_lists_every_header_an_extensions_files_include(extension: str) -> None:
    """What setup.py lists is what a rebuild is decided by (setuptools', and the tests' session
    start): a header left out would leave a stale extension after it changed."""
    inputs = set(extension_inputs()[extension])
    included = set().union(*(included_headers(path) for path in inputs))
    assert included <= inputs, sorted(map(str, included - inputs))


@pytest.mark.slow
def test_the_sdist_holds_every_file_the_extensions_are_built_from(tmp_path: Path) -> None:
    """Built from the source distribution (as pip does from PyPI), each extension finds its
    sources and the headers they include."""
    import tarfile

    source = copy_checkout(tmp_path / "source")
    subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], cwd=source,
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        held = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    needed = set()
    for inputs in extension_inputs().values():
        for path in inputs:
            needed |= {path, *included_headers(path)}
    needed = {str(path.relative_to(REPO)) for path in needed}
    assert {"kname/profiling/_cupti_c/cupti_abi.h", "kname/targets/cupy/_native_cupy.c"} <= needed
    assert needed <= held, sorted(needed - held)
