"""Reliability: a fault inside kname never breaks, stops or changes the launch it names.

Real programs run in a venv with kname's wheel installed, switched on by KNAME=1 at start-up, and
their NVTX events are captured by the injection library. The "kernel" is a user-named target
(`KNAME_TARGETS=noop:launch`), a plain function, so each program is fast and its results exact;
faults are forced by the program itself, by replacing one of kname's internals.

Shared by the other test_reliability_* modules: NOOP, write_program, run_program, expect_names.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from support import Venv, cleaned, line_of
from support.nvtx_capture import Capture, run_captured

pytestmark = [pytest.mark.slow, pytest.mark.launches]

NOOP = '''\
"""A user-named launch target (KNAME_TARGETS=noop:launch): a kernel that runs on the CPU."""

last_error = None


def launch(x):
    global last_error
    if x == "raise":
        last_error = ValueError("boom from the launch", 42)
        raise last_error
    if x == "interrupt":
        last_error = KeyboardInterrupt("stop")
        raise last_error
    return 2 * x + 1
'''

NOOP_TARGET = {"KNAME": "1", "KNAME_TARGETS": "noop:launch"}


def write_program(tmp_path: Path, source: str, files: dict[str, str] | None = None) -> Path:
    """A fresh folder holding prog.py (`source`), noop.py and `files`; returns prog.py."""
    folder = tmp_path / f"prog-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    for name, text in {"noop.py": NOOP, **(files or {})}.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    program = folder / "prog.py"
    program.write_text(source)
    return program


def run_program(
    venv: Venv,
    inject_lib: Path,
    tmp_path: Path,
    source: str,
    *args: str,
    env: dict[str, str | bytes | None] | None = None,
    files: dict[str, str] | None = None,
    python_args: tuple[str, ...] = (),
    timeout: float = 120,
):
    """Run `source` as prog.py with the venv's python, under NVTX capture.

    The environment is the test's, less every KNAME*/PYTHONPATH variable, plus `env`.
    Returns (CompletedProcess, Capture).
    """
    program = write_program(tmp_path, source, files)
    environ: dict[str, str | bytes | None] = {
        k: None for k in os.environ if cleaned(k, ("KNAME", "_KNAME", "NUMBA_ENABLE_CUDASIM"))
    }
    environ["PYTHONPATH"] = None
    environ.update(env or {})
    return run_captured(
        [str(venv.python), *python_args, str(program), *args],
        inject_lib,
        tmp_path,
        env=environ,
        cwd=program.parent,
        timeout=timeout,
    )


def kname_lines(stderr: str) -> list[str]:
    """The lines kname said on stderr (every one of them starts with 'kname: ')."""
    return [line for line in stderr.splitlines() if line.startswith("kname: ")]


def count_ranges(capture: Capture) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in capture.ranges("kname"):
        counts[name] = counts.get(name, 0) + 1
    return counts


# --------------------------------------------------------------------------
# Faults inside kname
# --------------------------------------------------------------------------

FAULTS = """\
import json
import sys

import kname
from kname import callsite, census, naming

fault = sys.argv[1]
fired = []  # one entry each time the forced fault fires


class Injected(RuntimeError):
    pass


def fire(what):
    fired.append(what)
    raise Injected(f"forced fault in {what}")


if fault == "resolve":  # before noop is imported: the launch wrapper binds resolve when made
    real_resolve = callsite.resolve

    def resolve(frame, *rest):
        if frame.f_code.co_name == "a":
            fire("resolve")
        return real_resolve(frame, *rest)

    callsite.resolve = resolve
elif fault == "kind_of":
    real_kind_of = callsite.kind_of

    def kind_of(code, module):
        if code.co_name == "a":
            fire("kind_of")
        return real_kind_of(code, module)

    callsite.kind_of = kind_of
elif fault == "display_name":
    real_display_name = naming.display_name

    def display_name(template, kernel, lib, frames):
        if frames[0].function == "a":
            fire("display_name")
        return real_display_name(template, kernel, lib, frames)

    naming.display_name = display_name
elif fault == "census":
    census.census = lambda: fire("census")
elif fault == "bad_str":  # an exception that cannot even be printed
    class Unprintable(RuntimeError):
        def __str__(self):
            raise RuntimeError("no str for you")

    real_kind_of = callsite.kind_of

    def kind_of(code, module):
        if code.co_name == "a":
            fired.append("bad_str")
            raise Unprintable()
        return real_kind_of(code, module)

    callsite.kind_of = kind_of

if fault in ("resolve", "kind_of", "display_name", "bad_str"):
    # The C wrapper names a common miss itself, in one Python step: there it fails alike.
    real_build = callsite.NativeMiss.build

    def build(self, code, *args):
        if code.co_name == "a" and fault == "bad_str":
            fired.append("bad_str")
            raise Unprintable()
        if code.co_name == "a":
            fire(fault)
        return real_build(self, code, *args)

    callsite.NativeMiss.build = build

import noop


def a(i):
    return noop.launch(i)  # line-a


def b(i):
    return noop.launch(i)  # line-b


results = [a(0), b(0)]
if fault in ("push", "pop", "counter"):  # site a exists (and is named): now break it
    site_a = next(s for s in list(callsite.sites.values()) if s.name.startswith("a "))
    if fault == "push":
        real_push = site_a.push

        def push():
            real_push()  # the range is open, then the call fails: it must still be closed
            fire("push")

        site_a.push = push
    elif fault == "pop":
        real_pop = site_a.pop

        def pop():
            real_pop()  # the range is closed, then the call fails
            fire("pop")

        site_a.pop = pop
    else:

        class Counter:
            def __next__(self):
                fire("counter")

        site_a.counter = Counter()
for i in range(1, 100):
    results += [a(i), b(i)]
print(json.dumps({"results": results, "fired": fired, "names": kname.names()}))
"""

# fault -> how many of site a's 100 launches are still named (those before the fault).
NAMED_BEFORE_FAULT = {
    "resolve": 0, "kind_of": 0, "display_name": 0, "push": 2, "pop": 2, "counter": 1,
    "bad_str": 0,
}  # fmt: skip


# fault -> how often it fires: finding a new site (or naming it) is taken again once.
FIRED = {"resolve": 2, "kind_of": 2, "display_name": 2, "bad_str": 2}


@pytest.mark.parametrize("fault", sorted(NAMED_BEFORE_FAULT))
def test_a_fault_in_kname_is_said_once_and_that_site_runs_unnamed(
    kname_venv, inject_lib, tmp_path, fault
) -> None:
    done, capture = run_program(kname_venv, inject_lib, tmp_path, FAULTS, fault, env=NOOP_TARGET)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # Every launch ran, with the same result.
    assert out["results"] == [2 * i + 1 for i in range(100) for _ in "ab"]
    # The fault fired once, or twice where the failed step was taken again (a fault of kname's
    # recurs): from then on site a is pass-through, nothing there is retried.
    assert out["fired"] == [fault] * FIRED.get(fault, 1)
    # Said once, on one line, with what to do; not once per launch.
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("kname: internal error while "), lines
    assert "KNAME=0" in lines[0] and "report" in lines[0]
    if fault == "bad_str":
        assert "Unprintable" in lines[0]
    # Site a goes unnamed after the fault; site b, untouched, is named at every launch.
    name_a = f"a prog.py:{line_of(FAULTS, 'line-a')}"
    name_b = f"b prog.py:{line_of(FAULTS, 'line-b')}"
    assert count_ranges(capture) == {
        name_b: 100,
        **({name_a: NAMED_BEFORE_FAULT[fault]} if NAMED_BEFORE_FAULT[fault] else {}),
    }
    assert capture.balanced(), capture.stack_errors()
    assert capture.max_depth("kname") == 1
    assert out["names"][name_b] == 100


def test_a_fault_in_the_census_at_exit_is_said_once_and_keeps_the_exit_code(
    kname_venv, inject_lib, tmp_path
) -> None:
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, FAULTS + "raise SystemExit(3)\n", "census",
        env={**NOOP_TARGET, "KNAME_REPORT": "-"},
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    out = json.loads(done.stdout)
    assert out["results"] == [2 * i + 1 for i in range(100) for _ in "ab"]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kname: KNAME_REPORT='-'"), lines
    assert "Traceback" not in done.stderr
    assert sorted(count_ranges(capture).values()) == [100, 100]
    assert capture.balanced(), capture.stack_errors()


# --------------------------------------------------------------------------
# Exceptions from the launch itself
# --------------------------------------------------------------------------

RAISING = """\
import json
import sys
import traceback

import noop


def inner(what):
    return noop.launch(what)  # raise-line


def outer(what):
    return inner(what)


try:
    outer(sys.argv[1])
except BaseException as exc:
    frames = [
        ("kname" if "/kname/" in f.filename else f.filename.rsplit("/", 1)[-1], f.name, f.lineno)
        for f in traceback.extract_tb(exc.__traceback__)
    ]
    print(json.dumps({
        "same_object": exc is noop.last_error,
        "type": type(exc).__name__,
        "args": list(exc.args),
        "context": repr(exc.__context__),
        "cause": repr(exc.__cause__),
        "suppress_context": exc.__suppress_context__,
        "frames": frames,
        "tail": traceback.format_exception_only(exc),
    }))
print("after", noop.launch(20))  # the program goes on; the next launch works
"""


@pytest.mark.parametrize("what", ["raise", "interrupt"])
def test_an_exception_from_the_launch_propagates_unchanged(
    kname_venv, inject_lib, tmp_path, what, hot_path
) -> None:
    off, _ = run_program(kname_venv, inject_lib, tmp_path, RAISING, what)
    on, capture = run_program(kname_venv, inject_lib, tmp_path, RAISING, what, env=NOOP_TARGET)
    assert off.returncode == on.returncode == 0, on.stderr
    assert on.stderr == ""
    before, after = (json.loads(done.stdout.splitlines()[0]) for done in (off, on))
    assert after["same_object"] is True
    # Same type, message, arguments and (no) chaining.
    assert {k: v for k, v in after.items() if k != "frames"} == {
        k: v for k, v in before.items() if k != "frames"
    }
    assert after["context"] == "None"
    # The user's frames, in order; kname adds its one wrapper frame, just above the target (the
    # C wrapper has no frame).
    assert [f for f in after["frames"] if f[0] != "kname"] == before["frames"]
    kname_frames = [i for i, f in enumerate(after["frames"]) if f[0] == "kname"]
    assert len(kname_frames) == (0 if hot_path == "native" else 1)
    assert all(after["frames"][i + 1][0] == "noop.py" for i in kname_frames)
    assert before["frames"][:3] == [
        ["prog.py", "<module>", line_of(RAISING, "outer(sys.argv[1])")],
        ["prog.py", "outer", 13],
        ["prog.py", "inner", line_of(RAISING, "raise-line")],
    ]
    # The raising launch was named and its range closed, as was the launch after it.
    assert capture.ranges("kname") == [
        f"inner prog.py:{line_of(RAISING, 'raise-line')}",
        f"<module> prog.py:{len(RAISING.splitlines())}",
    ]
    assert capture.balanced(), capture.stack_errors()
    assert on.stdout.splitlines()[1] == off.stdout.splitlines()[1] == "after 41"


def test_a_fault_report_is_one_line_even_for_a_multi_line_or_unprintable_error(
    capsys, monkeypatch
) -> None:
    from kname import _warnings

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no str")

    monkeypatch.setattr(_warnings, "_said", set())
    _warnings.report_fault("testing", ValueError("first\nsecond\r\nthird"))
    _warnings.report_fault("testing", ValueError("said once per kind of fault"))
    _warnings.report_fault("testing", Unprintable())
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert "(ValueError: first\\nsecond\\r\\nthird)" in lines[0]
    assert "(Unprintable)" in lines[1]
