"""Whose fault an exception met while naming a launch is: kname's own, or the program's.

An exception can be raised into kname's code from outside: by a signal handler (the usual timeout
raises its TimeoutError from one), or sent by another thread (PyThreadState_SetAsyncExc, as
func_timeout and stopit do). kname swallows its own faults, says them once and runs the launch;
an exception from outside must reach the program unchanged, and cost the line nothing. They are
told apart by what kname's code cannot do: a fault of kname's own is deterministic, so the step
that failed fails the same way, at the same instruction, when taken once more, while an exception
from outside arrives once, wherever the thread then was; and a signal handler's exception has the
handler's frame on its traceback. Where it cannot tell, the answer is "not kname's": the exception
propagates.
"""

from __future__ import annotations

# The C module under `signal`, imported with the interpreter itself: `signal` is not imported
# for this (its enums cost start-up time), and the handlers it reads are the same objects.
import _signal
import sys
from collections.abc import Callable, Container
from types import CodeType
from typing import Any

# Where an exception was raised, besides a Python instruction (code id, offset): in C with no
# Python frame at all (a call the C wrapper makes into C: nothing arrives from outside there),
# and in the frame that called the failing step and caught what it raised, by the step's own C
# code, or from outside as that call returned.
IN_C = "in C"
AT_THE_CALL = "in the frame calling the step"


def is_kname_fault(
    exc: BaseException, again: BaseException | None, callers: Container[int] = ()
) -> bool:
    """Whether `exc`, raised while kname named or counted a launch or opened or closed its range,
    is kname's own fault.

    `again` is what the step that raised it raised when taken once more (None: it did not fail
    again), or `exc` itself where the step could not be taken again: a push or pop, which opens
    or closes a range each time, or any step at the recursion limit. `callers`: the ids of the
    code objects that called the step and caught what it raised (the Python launch wrapper's).
    """
    if isinstance(exc, RecursionError):
        return True  # kname's frames took the room: the launch must run, unnamed
    if raised_by_signal_handler(exc):
        return False
    place = raised_at(exc, callers)
    if again is exc:
        # Not taken again. Raised in the caller's own frame, it may have arrived as the call into
        # C returned (the Python wrapper's push and pop run no bytecode of their own).
        return place != AT_THE_CALL
    return again is not None and type(again) is type(exc) and raised_at(again, callers) == place


def take_again(exc: Exception, step: Callable[..., Any], *args: Any) -> tuple[bool, bool, Any]:
    """After `step(*args)`, called from the caller's frame, raised `exc` there: take it once
    more. Whether `exc` was kname's own fault; whether the step now succeeded, and its result."""
    return _take_again(exc, step, args, sys._getframe(1).f_code)


def from_outside(exc: Exception, step: Callable[..., Any], *args: Any) -> bool:
    """Whether `exc`, which `step(*args)` raised in the caller's frame, was raised into kname
    from outside: for kname's code that falls back where a step fails, to raise it instead."""
    return not _take_again(exc, step, args, sys._getframe(1).f_code)[0]


def _take_again(
    exc: Exception, step: Callable[..., Any], args: tuple, caller: CodeType
) -> tuple[bool, bool, Any]:
    try:
        result, again = step(*args), None
    except Exception as failed:  # raised in this frame, as `exc` was in the caller's: alike
        result, again = None, failed
    own = is_kname_fault(exc, again, {id(caller), id(_take_again.__code__)})
    return own, again is None, result


def raised_at(exc: BaseException, callers: Container[int]) -> object:
    """Where `exc` was raised: the innermost frame of its traceback, as (id of its code, offset),
    or AT_THE_CALL (a frame of `callers`), or IN_C where it has no traceback."""
    tb = exc.__traceback__
    if tb is None:
        return IN_C
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return AT_THE_CALL if id(code) in callers else (id(code), tb.tb_lasti)


def raised_by_signal_handler(exc: BaseException) -> bool:
    """Whether a Python signal handler in place now has a frame on `exc`'s traceback."""
    handlers = {id(code) for code in map(_code_of, _python_handlers()) if code is not None}
    tb = exc.__traceback__
    while tb is not None:
        if id(tb.tb_frame.f_code) in handlers:
            return True
        tb = tb.tb_next
    return False


def _python_handlers() -> list[object]:
    handlers = (_signal.getsignal(signum) for signum in _signal.valid_signals())
    return [h for h in handlers if callable(h) and h is not _signal.default_int_handler]


def _code_of(handler: object) -> CodeType | None:
    """The code a handler runs: a function's, a bound method's, a partial's, a callable's."""
    for _ in range(4):
        code = getattr(handler, "__code__", None)
        if isinstance(code, CodeType):
            return code
        handler = (
            getattr(handler, "__func__", None)
            or getattr(handler, "func", None)
            or (type(handler).__call__ if callable(handler) else None)
        )
    return None
