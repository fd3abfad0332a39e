"""kname.faults: whose fault an exception met at a launch is, kname's own or the program's.

Signal handlers are real (SIGUSR1, sent by signal.raise_signal, whose handler runs before it
returns); what launches does so in test_callsite_faults.
"""

from __future__ import annotations

import functools
import signal

import pytest

from kname import faults


def raised_by(step, *args) -> Exception:
    try:
        step(*args)
    except Exception as exc:
        return exc
    raise AssertionError(f"{step} raised nothing")


def always_fails(n: int) -> None:
    raise LookupError(f"no {n}")


def fails_elsewhere() -> None:
    raise LookupError("no 1")


def test_a_step_failing_alike_when_taken_again_is_kname_s_fault() -> None:
    try:
        always_fails(1)
    except LookupError as exc:
        assert faults.take_again(exc, always_fails, 2) == (True, False, None)
    try:
        int("x")  # in C, called from this frame: raised here
    except ValueError as exc:
        assert faults.take_again(exc, int, "y") == (True, False, None)


def test_a_step_that_does_not_fail_again_or_fails_otherwise_was_interrupted_from_outside() -> None:
    first = raised_by(always_fails, 1)
    assert not faults.is_kname_fault(first, None)
    assert not faults.is_kname_fault(first, raised_by(int, "x"))  # another type
    assert not faults.is_kname_fault(first, raised_by(fails_elsewhere))  # at another place
    try:
        always_fails(1)
    except LookupError as exc:
        assert faults.take_again(exc, len, "ab") == (False, True, 2)


def test_a_step_not_taken_again_is_kname_s_unless_raised_in_the_calling_frame() -> None:
    exc = raised_by(always_fails, 1)
    assert faults.is_kname_fault(exc, exc)
    callers = {id(always_fails.__code__)}
    assert not faults.is_kname_fault(exc, exc, callers)
    assert faults.raised_at(LookupError(), callers) == faults.IN_C  # never raised


def test_at_the_recursion_limit_it_is_kname_s_fault_however_it_was_met() -> None:
    assert faults.is_kname_fault(RecursionError(), None)


class CallableHandler:
    def __call__(self, signum, frame):
        raise TimeoutError("from a callable object")

    def method(self, signum, frame):
        raise TimeoutError("from a method")


def function_handler(signum, frame):
    raise TimeoutError("from a function")


def handler_with_extra(extra, signum, frame):
    raise TimeoutError(f"from a partial of {extra}")


HANDLERS = {
    "function": function_handler,
    "bound method": CallableHandler().method,
    "partial": functools.partial(handler_with_extra, "x"),
    "callable object": CallableHandler(),
}


@pytest.mark.parametrize("kind", HANDLERS)
def test_a_signal_handlers_exception_is_known_by_the_handlers_frame_whatever_it_is(kind) -> None:
    previous = signal.signal(signal.SIGUSR1, HANDLERS[kind])
    try:
        exc = raised_by(signal.raise_signal, signal.SIGUSR1)
        assert faults.raised_by_signal_handler(exc)
        assert not faults.is_kname_fault(exc, exc)  # even where it recurred
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not faults.raised_by_signal_handler(exc)  # that handler is no longer in place
    assert not faults.raised_by_signal_handler(raised_by(always_fails, 1))


def test_code_that_falls_back_raises_what_came_from_outside() -> None:
    calls = []

    def fails_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("once")

    try:
        fails_once()
    except OSError as exc:
        assert faults.from_outside(exc, fails_once)
    try:
        always_fails(1)
    except LookupError as exc:
        assert not faults.from_outside(exc, always_fails, 1)
