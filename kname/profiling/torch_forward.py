"""torch's side of backward per forward line (forward_lines.py): calls' node numbers, and the node
running on autograd's thread.

While kname profile collects, a TorchFunctionMode on the stack of the thread that imported torch
(or started the profile) sees each torch call the user's code makes, from torch.nn and the rest:
the node numbers it took (torch.autograd._get_sequence_nr before and after: nested calls are
inside the outer one's, as the mode is off while its handler runs) go to forward_lines with the
call's line. Nothing is recorded on a thread running an autograd node (a forward recomputed in
backward by checkpointing): those nodes stay UNKNOWN. When the profile stops, the mode passes
every call straight through, and leaves the stack where the thread that pushed it can pop it.

At a launch on autograd's thread, `running_forward_line` gives the forward line of the node
running there (torch._C._current_autograd_node): None where no node runs (the engine's own
work between nodes) or the node is AccumulateGrad's (a leaf's gradient, no forward line).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from kname._locks import reset_in_child
from kname._warnings import report_fault
from kname.documents.backward_lines import UNKNOWN
from kname.profiling import forward_lines

ACCUMULATE_GRAD_NUMBER = 2**64 - 1  # AccumulateGrad's sequence number: UINT64_MAX

_mode: Any = None  # the mode, once made
_pushed_on: int | None = None  # the thread whose stack holds it


def make_mode(torch: Any, namer: Callable[[FrameType], str], on_autograd_thread: Callable) -> Any:
    """A TorchFunctionMode recording each call's node numbers and line, while `active`."""
    numbers = torch.autograd._get_sequence_nr
    compiling = torch.compiler.is_compiling

    class ForwardLines(torch.overrides.TorchFunctionMode):
        """kname profile: which line's torch call made which autograd nodes."""

        active = True

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            if compiling() or not self.active:
                # dynamo traces a mode on the stack: while it does, the call alone (no break
                # in the graph); its compiled code's node is made outside any call seen here.
                return func(*args, **kwargs)
            before = numbers()
            result = func(*args, **kwargs)
            after = numbers()
            if after != before:
                try:
                    if not on_autograd_thread():
                        forward_lines.record(before, after, namer(sys._getframe(1)))
                except Exception as exc:  # the user's call has run: its result goes back
                    report_fault("recording a forward line for kname profile", exc)
            return result

    return ForwardLines()


def follow(torch: Any, namer: Callable[[FrameType], str] | None, on_autograd_thread: Callable):
    """The profile collects (`namer`: its rules) or stops (None): the mode on, or passing
    through."""
    global _mode, _pushed_on
    if namer is None:
        if _mode is not None:
            _mode.active = False
            _pop_if_here(torch)
        return
    forward_lines.forget()
    if _mode is not None and _pushed_on is not None:
        _mode.active = True
        return
    _mode = make_mode(torch, namer, on_autograd_thread)
    _mode.__enter__()
    _pushed_on = threading.get_ident()


def _pop_if_here(torch: Any) -> None:
    """Off the stack if this thread pushed it and it is on top (else it stays, passing through)."""
    global _mode, _pushed_on
    if _pushed_on != threading.get_ident():
        return
    try:
        if torch.overrides._get_current_function_mode() is not _mode:
            return
        _mode.__exit__(None, None, None)
        _mode, _pushed_on = None, None
    except Exception as exc:  # it stays, passing through
        report_fault("leaving kname profile's forward lines", exc)


def forward_line_reader(current_node: Callable[[], Any]) -> Callable[[], str | None]:
    """The forward line of the node running on this thread (None: none, or AccumulateGrad's)."""

    def running_forward_line() -> str | None:
        node = current_node()
        if node is None:
            return None
        number = node._sequence_nr()
        if number == ACCUMULATE_GRAD_NUMBER:
            return None
        return forward_lines.line_of(number) or UNKNOWN

    return running_forward_line


def _passing_through_in_a_child() -> None:
    """A forked child (a DataLoader worker) is not profiled: its calls go straight through."""
    if _mode is not None:
        _mode.active = False


reset_in_child(_passing_through_in_a_child)
