"""kname._native's NVTX calls: a site's push and pop call the NVTX C API from C.

A profiler must see the same ranges whichever hot path made them: the same names, in the same
order, with the same colours and category names, balanced. The extension has these calls where
it was built with the NVTX headers, which the test environment installs (nvidia-nvtx), so here
it must have them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, line_of
from support.nvtx_capture import Capture, nvtx_include_dir, run_captured

from kname import hotpath, ranges

WHY_NOT = hotpath.choose(True).why_python
NATIVE = None if WHY_NOT else sys.modules[hotpath.NATIVE]
needs_native = pytest.mark.skipif(NATIVE is None, reason=f"no native hot path here: {WHY_NOT}")

GPULIB = """
def launch(kernel, *args):
    return kernel
"""

APP = """
import json

import kname

kname.install(targets=["gpulib:launch"])
import gpulib
from kname import callsite


def step():
    gpulib.launch("axpy")  # L:axpy
    gpulib.launch("scale")  # L:scale


for _ in range(3):
    step()
calls = sorted({type(site.push).__name__ for site in callsite.sites.values()})
print(json.dumps(calls))
"""


def captured_run(
    tmp_path: Path, inject_lib: Path, native: str, lib: str = GPULIB, app: str = APP
) -> tuple[list[str], Capture]:
    """The app run under the capturing NVTX tool with KNAME_NATIVE=`native`: the types of its
    sites' push calls, and what the tool saw."""
    work = tmp_path / f"native-{native}"
    work.mkdir()
    (work / "gpulib.py").write_text(lib)
    (work / "app.py").write_text(app)
    done, capture = run_captured(
        [sys.executable, "app.py"], inject_lib, tmp_path, cwd=work, timeout=120,
        env={"KNAME_NATIVE": native, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), capture


def pushes(capture: Capture) -> list[tuple[str, str, int]]:
    """(name, category name, colour) of each range kname pushed."""
    categories = capture.categories("kname")
    return [(e.message, categories.get(e.category, "?"), e.color) for e in capture.of("push")]


@needs_native
def test_the_extension_calls_nvtx_itself_where_the_headers_are_installed() -> None:
    if nvtx_include_dir() is None:
        pytest.skip("no NVTX headers here (nvidia-nvtx is a test requirement)")
    assert hasattr(NATIVE, "nvtx_range"), "kname._native was built without the NVTX headers"


@needs_native
def test_both_hot_paths_give_a_profiler_the_same_ranges(inject_lib: Path, tmp_path: Path) -> None:
    native_calls, native = captured_run(tmp_path, inject_lib, "1")
    python_calls, python = captured_run(tmp_path, inject_lib, "0")
    if hasattr(NATIVE, "nvtx_range"):
        assert native_calls == ["NvtxCall"]
    assert python_calls == ["partial"]
    axpy, scale = line_of(APP, "L:axpy"), line_of(APP, "L:scale")
    names = [f"step app.py:{axpy}", f"step app.py:{scale}"] * 3
    assert [name for name, _, _ in pushes(native)] == names
    assert pushes(native) == pushes(python)
    assert {category for _, category, _ in pushes(native)} == {"gpulib"}
    # A user target's kernel is the function it names: its name picks the colour.
    assert {colour for _, _, colour in pushes(native)} == {ranges.colour_of("launch")}
    assert native.balanced(), native.stack_errors()
    assert sorted(set(native.registered_strings("kname"))) == sorted(set(names))


@needs_native
def test_push_and_pop_take_no_arguments_and_say_what_they_are(
    inject_lib: Path, tmp_path: Path
) -> None:
    if not hasattr(NATIVE, "nvtx_range"):
        pytest.skip("kname._native was built without the NVTX headers")
    program = (
        "import kname._native as n\n"
        "assert n.nvtx_domain('mine') is True\n"
        "push, pop = n.nvtx_range('mine', 'a range', 0xFF112233, 'lib')\n"
        "print(repr(push), repr(pop))\n"
        "for call in (push, pop):\n"
        "    try:\n"
        "        call(1)\n"
        "    except TypeError as exc:\n"
        "        print(exc)\n"
        "push(); push(); pop(); pop()\n"
        "for domain, category in (('other', 'lib2'), ('mine', 'lib2'), ('mine', 'lib')):\n"
        "    push, pop = n.nvtx_range(domain, 'b', 1, category)\n"
        "    push(); pop()\n"
    )
    done, capture = run_captured(
        [sys.executable, "-c", program], inject_lib, tmp_path, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "<kname NVTX push 'a range'> <kname NVTX pop>",
        "push() takes no arguments",
        "pop() takes no arguments",
    ]
    assert capture.ranges("mine") == ["a range", "a range", "b", "b"]
    # Category ids count from 1 in each domain, in first-use order.
    assert capture.categories("mine") == {1: "lib", 2: "lib2"}
    assert capture.categories("other") == {1: "lib2"}
    assert {e.color for e in capture.of("push") if e.message == "a range"} == {0xFF112233}
    assert capture.balanced() and capture.max_depth("mine") == 2


@needs_native
def test_without_a_tool_there_is_no_range_to_make() -> None:
    if not hasattr(NATIVE, "nvtx_range"):
        pytest.skip("kname._native was built without the NVTX headers")
    program = (
        "import kname._native as n\n"
        "print(n.nvtx_domain('mine'), n.nvtx_range('mine', 'a range', 1, 'lib'))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "None"]


@needs_native
def test_doctor_says_how_the_ranges_are_made() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kname", "doctor"], cwd=REPO, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    (line,) = [x for x in done.stdout.splitlines() if "NVTX ranges:" in x]
    if hasattr(NATIVE, "nvtx_range"):
        assert "through the NVTX C API" in line
    else:
        assert "built without the NVTX headers" in line


@needs_native
def test_launches_under_a_tool_leave_every_reference_count_as_it_was(
    inject_lib: Path, tmp_path: Path
) -> None:
    """The C wrapper's NVTX calls take and give back references exactly (None too, which is
    counted before CPython 3.12)."""
    app = APP.replace(
        "for _ in range(3):\n    step()\n",
        "step()\n"
        "import sys\n"
        "(site,) = {s for s in callsite.sites.values() if s.name.endswith(':'\n"
        "           + str(step.__code__.co_firstlineno + 1))}\n"
        "def counts():\n"
        "    return [sys.getrefcount(x) for x in (None, site, site.push, site.pop)]\n"
        "before = counts()\n"
        "for _ in range(20000):\n"
        "    step()\n"
        "after = counts()\n"
        "print(json.dumps([before, after]))\n",
    )
    (tmp_path / "gpulib.py").write_text(GPULIB)
    (tmp_path / "app.py").write_text(app)
    done, capture = run_captured(
        [sys.executable, "app.py"], inject_lib, tmp_path, cwd=tmp_path, timeout=120,
        env={"KNAME_NATIVE": "1", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout.splitlines()[0])
    assert [a - b for a, b in zip(after, before, strict=True)] == [0, 0, 0, 0]
    assert len(capture.of("push")) == 2 * 20001 and capture.balanced()


GIVES_UP_LIB = """
def launch(kernel, then=None):
    if then is not None:
        then()
    return kernel
"""

GIVES_UP = """
import gc
import json

import kname

kname.install(targets=["gpulib:launch"])
import gpulib
from kname import callsite, ranges


def give_up_meanwhile():
    # As another thread's give-up does while this launch runs; the range calls freed.
    for site in list(callsite.sites.values()):
        site.push = site.pop = None
    ranges._ranges.clear()
    gc.collect()


def step(then):
    gpulib.launch("axpy", then)


for then in (None, None, give_up_meanwhile, None):
    step(then)
print(json.dumps(sorted({type(site.push).__name__ for site in callsite.sites.values()})))
"""


@pytest.mark.parametrize("native", ["0", "1"])
def test_a_range_given_up_during_its_launch_is_still_closed(
    inject_lib: Path, tmp_path: Path, native: str
) -> None:
    """The launch in progress closes the range it opened, though its site's push and pop are
    cleared and freed meanwhile; the next launch opens none."""
    if native == "1" and NATIVE is None:
        pytest.skip(f"no native hot path here: {WHY_NOT}")
    calls, capture = captured_run(tmp_path, inject_lib, native, GIVES_UP_LIB, GIVES_UP)
    assert calls == ["NoneType"]
    assert len(capture.of("push")) == 3 and len(capture.of("pop")) == 3
    assert capture.balanced(), capture.stack_errors()


SWAPS_POP = """
import json

import kname

kname.install(targets=["gpulib:launch"])
import gpulib
from kname import _native, callsite


def step():
    gpulib.launch("axpy")


for _ in range(3):
    step()
# Each site's range now closes with another range's pop, in another domain.
_, other_pop = _native.nvtx_range("other", "another range", 1, "lib")
for site in callsite.sites.values():
    site.pop = other_pop
for _ in range(2):
    step()
print(json.dumps(sorted({type(site.push).__name__ for site in callsite.sites.values()})))
"""


@needs_native
def test_a_range_is_closed_by_its_sites_pop_whatever_its_push(
    inject_lib: Path, tmp_path: Path
) -> None:
    """The cached launch closes a push's range with that push's own pop only while the site's
    pop is it; a site given another pop closes with that one."""
    if not hasattr(NATIVE, "nvtx_range"):
        pytest.skip("kname._native was built without the NVTX headers")
    calls, capture = captured_run(tmp_path, inject_lib, "1", GIVES_UP_LIB, SWAPS_POP)
    assert calls == ["NvtxCall"]
    assert len(capture.of("push", "kname")) == 5
    assert len(capture.of("pop", "kname")) == 3
    assert len(capture.of("pop", "other")) == 2
