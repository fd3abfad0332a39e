"""Backward per forward line on the profiling side: forward_lines (node numbers -> line, per
thread), backward.forward_named (a pass's launch gains the running node's line), and
torch_forward's mode and reader, driven through a stand-in for torch's few functions (torch is
not installed here and cannot run without a GPU build: the stand-in is only its counter, its
mode stack and its running node; the real ones run in tests/gpu/test_gpu_backward.py)."""

from __future__ import annotations

import functools
import sys
import threading
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname import _warnings
from kname.documents.backward_lines import UNKNOWN, backward_site
from kname.profiling import backward, forward_lines, torch_forward

LINES = ("attention model.py:30", "mlp model.py:35", "head model.py:40")


@pytest.fixture(autouse=True)
def fresh():
    forward_lines.forget()
    yield
    forward_lines.forget()
    backward.know_forward_lines(None)  # type: ignore[arg-type]
    backward.collect(None)


# A thread's calls: (line, how many node numbers the call took); numbers only grow on a thread.
calls = st.lists(st.tuples(st.sampled_from(LINES), st.integers(0, 4)), max_size=30)


def _record(thread_calls: list[tuple[str, int]], start: int) -> dict[int, str]:
    """Record the calls as a thread would; {number: line} of what they took."""
    taken, number = {}, start
    for line, count in thread_calls:
        forward_lines.record(number, number + count, line)
        for n in range(number, number + count):
            taken[n] = line
        number += count + (count % 2)  # now and then numbers no recorded call took
    return taken


@given(calls, calls, st.integers(0, 20))
def test_a_node_number_gives_the_line_of_the_one_call_that_took_it_else_none(mine, theirs, at):
    forward_lines.forget()
    taken = _record(mine, 0)
    other: dict[int, str] = {}
    thread = threading.Thread(target=lambda: other.update(_record(theirs, at)))
    thread.start()
    thread.join()
    for number in range(0, 150):
        holders = [t[number] for t in (taken, other) if number in t]
        assert forward_lines.line_of(number) == (holders[0] if len(holders) == 1 else None)


def test_past_the_bound_the_oldest_numbers_are_forgotten_never_misnamed(monkeypatch):
    monkeypatch.setattr(forward_lines, "MAX_RANGES", 10)
    for number in range(0, 40, 2):
        forward_lines.record(number, number + 1, LINES[number % 3])
    assert forward_lines.line_of(0) is None  # forgotten
    assert forward_lines.line_of(38) == LINES[38 % 3]
    assert forward_lines._count <= 10


def test_a_passs_launch_gains_the_forward_line_of_the_node_running(monkeypatch, capsys):
    running: list[str | None] = [None]
    told = []
    backward.listen_forward(told.append)
    assert told == [None]  # no reader yet: the recorder asks nothing
    backward.know_forward_lines(lambda: running[0])
    assert told[-1] is None  # no autograd pass runs
    backward.collect(lambda frame: frame)
    backward.leave(backward.enter("train app.py:40", autograd=True))  # type: ignore[arg-type]
    assert told[-2:] == [backward.forward_named, None]
    assert backward.forward_named("train app.py:40") == "train app.py:40"  # no node runs
    running[0] = LINES[0]
    assert backward.forward_named("train app.py:40") == backward_site("train app.py:40", LINES[0])
    monkeypatch.setattr(_warnings, "_said", set())

    def broken() -> str:
        raise RuntimeError("node gone")

    backward.know_forward_lines(broken)
    assert backward.forward_named("train app.py:40") == "train app.py:40"  # the launch runs on
    assert "node gone" in capsys.readouterr().err
    backward.listen_forward(None)


class StandInTorch:
    """torch's sequence counter, its TorchFunctionMode stack and its running node (see the
    module's docstring); the mode's handler is called as torch calls it, the mode set aside."""

    def __init__(self) -> None:
        self.number = 0
        self.stack: list = []
        self.node = None
        self.compiling = False
        stack = self.stack

        class TorchFunctionMode:
            def __enter__(self):
                stack.append(self)
                return self

            def __exit__(self, *exc):
                stack.pop()

        self.overrides = SimpleNamespace(
            TorchFunctionMode=TorchFunctionMode,
            _get_current_function_mode=lambda: stack[-1] if stack else None,
        )
        self.autograd = SimpleNamespace(_get_sequence_nr=lambda: self.number)
        self.compiler = SimpleNamespace(is_compiling=lambda: self.compiling)

    def call(self, takes: int):
        """A torch call, its op making `takes` nodes: called, it runs from the caller's line
        (a partial: no Python frame between, as torch's C dispatch has none)."""

        def op():
            self.number += takes
            return "result"

        if not self.stack:
            return op
        return functools.partial(self.stack[-1].__torch_function__, op, (), (), None)


def _named_by_line(frame) -> str:
    return f"{frame.f_code.co_name} line {frame.f_lineno}"


def test_the_mode_records_each_calls_numbers_under_its_line_and_steps_aside_when_told():
    torch = StandInTorch()
    on_autograd = [False]
    torch_forward.follow(torch, _named_by_line, lambda: on_autograd[0])
    here = sys._getframe().f_lineno
    assert torch.call(2)() == "result"
    torch.call(0)()  # no node made: nothing recorded
    torch.compiling = True
    torch.call(1)()  # dynamo tracing: the call alone
    torch.compiling = False
    on_autograd[0] = True
    torch.call(1)()  # a forward recomputed in backward: its nodes stay unknown
    on_autograd[0] = False
    assert [forward_lines.line_of(n) for n in range(5)] == [
        f"test_the_mode_records_each_calls_numbers_under_its_line_and_steps_aside_when_told "
        f"line {here + 1}",
    ] * 2 + [None, None, None]
    torch_forward.follow(torch, None, lambda: False)  # the profile stops: popped, same thread
    assert torch.stack == []
    torch.call(3)()
    assert forward_lines.line_of(5) is None


def test_the_reader_names_the_running_nodes_line_unknown_or_none():
    forward_lines.record(10, 12, LINES[1])

    class Node:
        def __init__(self, number: int) -> None:
            self.number = number

        def _sequence_nr(self) -> int:
            return self.number

    running = [None]
    read = torch_forward.forward_line_reader(lambda: running[0])
    assert read() is None  # no node runs: the engine's own work
    running[0] = Node(11)
    assert read() == LINES[1]
    running[0] = Node(3)
    assert read() == UNKNOWN
    running[0] = Node(torch_forward.ACCUMULATE_GRAD_NUMBER)
    assert read() is None  # a leaf's gradient accumulated: no forward line


def test_the_python_callbacks_frameless_launch_gains_the_forward_line_as_the_c_one_does():
    from kname.profiling.capture import NO_PYTHON_FRAME, site_of_frame

    backward.collect(lambda frame: frame)  # passes named by the str they are given
    running: list[str | None] = [LINES[2]]
    backward.know_forward_lines(lambda: running[0])
    assert site_of_frame(None) == NO_PYTHON_FRAME  # no pass runs
    told: list = []
    backward.listen_forward(told.append)
    xla = backward.enter("run app.py:7", " (compile)")  # type: ignore[arg-type]
    assert site_of_frame(None) == "run app.py:7 (compile)"  # XLA's work: no node, no GIL
    backward.leave(xla)
    scope = backward.enter("train app.py:40", autograd=True)  # type: ignore[arg-type]
    try:
        assert site_of_frame(None) == backward_site("train app.py:40", LINES[2])
        running[0] = None
        assert site_of_frame(None) == "train app.py:40"
    finally:
        backward.leave(scope)
        backward.listen_forward(None)
    # The C recorder is told to ask only while autograd's pass is the newest.
    assert told == [None, backward.forward_named, None]


def test_a_forked_child_records_nothing_its_calls_pass_straight_through():
    import os

    torch = StandInTorch()
    torch_forward.follow(torch, _named_by_line, lambda: False)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a DataLoader worker, say
        torch.call(2)()
        os.write(write, b"1" if forward_lines.line_of(0) is None else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    torch_forward.follow(torch, None, lambda: False)
