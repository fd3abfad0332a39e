"""kname.profiling.backward, the registry of backward passes running: what a launch with no user
frame is named while passes open and close, on any thread; what the C recorder is told. The
launches themselves, on both callbacks, are in test_profiling_capture.py."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.profile_streams import BACKWARD_LINES, frameless_site

from kname import _warnings
from kname.callsite import COMPILE_MARK
from kname.profiling import backward
from kname.profiling.backward import CONCURRENT


@pytest.fixture(autouse=True)
def registry():
    """Passes named by the name their `frame` argument is given (a str here, not a frame)."""
    told: list[str | None] = []
    backward.collect(lambda frame: frame)
    backward.listen(told.append)
    yield told
    backward.collect(None)
    backward.listen(None)
    backward.recognise_autograd_threads(lambda: False)
    assert backward.frameless_name() is None, "a test left a pass open"


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(BACKWARD_LINES)), max_size=20))
def test_a_frameless_launch_takes_the_newest_pass_marked_beside_another_line(steps) -> None:
    running: list[tuple[str, backward.Scope]] = []
    for opening, line in steps:
        if opening or not running:
            running.append((line, backward.enter(line)))
        else:
            backward.leave(running.pop(len(line) % len(running))[1])  # any of them ends
        lines = [name for name, _ in running]
        assert backward.frameless_name() == frameless_site(lines, None, CONCURRENT)
    for _, scope in running:
        backward.leave(scope)


def test_the_recorder_is_told_every_change_and_its_fault_is_said_once(
    registry, monkeypatch, capsys
) -> None:
    first = backward.enter("a.py:1")
    second = backward.enter("b.py:2")
    backward.leave(first)
    backward.leave(second)
    assert registry == [None, "a.py:1", "b.py:2" + CONCURRENT, "b.py:2", None]
    monkeypatch.setattr(_warnings, "_said", set())

    def broken(name):
        raise RuntimeError("recorder gone")

    backward.listen(broken)
    backward.leave(backward.enter("a.py:1"))  # the pass runs on
    (line,) = capsys.readouterr().err.splitlines()
    assert "naming a backward pass for kname profile" in line and "recorder gone" in line


def test_no_pass_is_opened_when_no_profile_collects() -> None:
    backward.collect(None)
    assert backward.enter("a.py:1") is None
    backward.leave(None)
    assert backward.frameless_name() is None


def test_library_code_takes_the_passs_name_only_on_a_thread_running_autograd() -> None:
    backward.recognise_autograd_threads(lambda: threading.current_thread().name == "autograd")
    scope = backward.enter("train app.py:40")
    named = {}

    def name_it() -> None:
        for site in ("Function.apply torch/autograd/function.py:3", "f lib.py:9" + COMPILE_MARK):
            named[threading.current_thread().name, site] = backward.library_code_name(site)

    for thread_name in ("autograd", "pin_memory"):
        thread = threading.Thread(target=name_it, name=thread_name)
        thread.start()
        thread.join()
    backward.leave(scope)
    assert named == {
        ("autograd", "Function.apply torch/autograd/function.py:3"): "train app.py:40",
        ("autograd", "f lib.py:9" + COMPILE_MARK): "train app.py:40" + COMPILE_MARK,
        ("pin_memory", "Function.apply torch/autograd/function.py:3"): (
            "Function.apply torch/autograd/function.py:3"
        ),
        ("pin_memory", "f lib.py:9" + COMPILE_MARK): "f lib.py:9" + COMPILE_MARK,
    }
    assert backward.library_code_name("f lib.py:9") == "f lib.py:9"  # no pass runs
