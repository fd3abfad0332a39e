"""Names for code typed into IPython or Jupyter: `<cell 3>`, the cell's execution number.

IPython compiles each cell under a file name of its own: `<ipython-input-3-8f2d1c0e1a2b>` in a
terminal, `/tmp/ipykernel_4242/2914741263.py` (a hash of the cell's text) in Jupyter. Both are
shown as `<cell N>`, where N is the number Jupyter prints beside the cell (`In [N]`) and IPython
puts in its tracebacks (`Cell In[N], line 12`). Asked only when a call site is first named.

IPython's timing magics compile the code they time under names of their own (`<timed eval>`,
`<timed exec>`, `<magic-timeit>`), whatever the cell: that code is placed in the cell that ran
the magic, at the line it has there.
"""

from __future__ import annotations

import re
import sys
from types import FrameType

from kname import faults

_INPUT_NAME = re.compile(r"<ipython-input-([0-9]+)-[0-9a-f]+>")
_TRACEBACK_NAME = re.compile(r"In\s*\[\s*([0-9]+)\s*\]")
# The file names of code compiled by %time and %%time (IPython.core.magics.execution), and by
# %timeit and %%timeit, which runs it in a function of its own, `inner`.
_TIMEIT_FILE = "<magic-timeit>"
TIMED_FILES = frozenset({"<timed eval>", "<timed exec>", _TIMEIT_FILE})
_TIMEIT_FUNCTION = "inner"
# How IPython calls a magic from a cell's code: `%time x` on the magic's own line, `%%time`'s
# body on the lines below it.
_LINE_MAGIC, _CELL_MAGIC = "run_line_magic", "run_cell_magic"


def cell_place(frame: FrameType) -> tuple[str, int] | None:
    """(`<cell N>`, line in that cell) for a frame running code of a cell, or code a timing
    magic compiled from one; None for any other code."""
    filename = frame.f_code.co_filename
    path = cell_path(filename)
    if path is not None:
        return path, frame.f_lineno or 0
    return _timed_place(frame) if filename in TIMED_FILES else None


def untimed_name(filename: str, qualname: str) -> str:
    """`qualname` of code compiled as `filename`, with %timeit's `inner` taken away: the timed
    code is named as it would be in the cell (`<module>`, `<lambda>`)."""
    if filename != _TIMEIT_FILE:
        return qualname
    head, _, rest = qualname.partition(".")
    if head != _TIMEIT_FUNCTION:
        return qualname
    return rest.removeprefix("<locals>.") or "<module>"


def cell_path(filename: str) -> str | None:
    """`<cell N>` when `filename` holds an IPython cell of the running shell, else None."""
    number = cell_number(filename)
    return None if number is None else f"<cell {number}>"


def cell_number(filename: str) -> int | None:
    """The execution number of the cell compiled as `filename`, or None; never raises."""
    try:
        number = _number_from_shell(filename)
    except Exception as exc:  # a shell half torn down, an IPython of another age: fall back
        if faults.from_outside(exc, _number_from_shell, filename):
            raise
        number = None
    if number is None:
        match = _INPUT_NAME.fullmatch(filename)
        number = int(match.group(1)) if match else None
    return number


def _timed_place(frame: FrameType) -> tuple[str, int] | None:
    """Where the timed code running in `frame` is in the cell whose magic compiled it.

    Below the timed code (and its own functions) IPython runs the magic, called from a cell's
    code; timed code called from any other code is not placed.
    """
    filename = frame.f_code.co_filename
    magic = frame.f_back
    while magic is not None and not _is_magic_call(magic):
        other = magic.f_code.co_filename
        if other != filename and (other in TIMED_FILES or cell_number(other) is not None):
            return None  # called by code of another cell or magic, not by its magic
        magic = magic.f_back
    place = None if magic is None or magic.f_back is None else cell_place(magic.f_back)
    if place is None:
        return None
    cell, line = place
    # The code after `%time` is its line 1, on the magic's line; `%%time`'s body is below it.
    offset = -1 if magic.f_code.co_name == _LINE_MAGIC else 0
    return cell, line + (frame.f_lineno or 0) + offset


def _is_magic_call(frame: FrameType) -> bool:
    return frame.f_code.co_name in (_LINE_MAGIC, _CELL_MAGIC) and _is_ipython(frame)


def _is_ipython(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__")
    return isinstance(module, str) and module.startswith("IPython.")


def _number_from_shell(filename: str) -> int | None:
    if "IPython" not in sys.modules:  # no shell can have compiled it: cost nothing elsewhere
        return None
    from IPython import get_ipython

    shell = get_ipython()
    compiler = getattr(shell, "compile", None)
    format_code_name = getattr(compiler, "format_code_name", None)
    if format_code_name is None:
        return None
    # What IPython's own tracebacks print: ("Cell", "In[3]") for a file it compiled, else None.
    label = format_code_name(filename)
    match = _TRACEBACK_NAME.fullmatch(label[1]) if label else None
    return int(match.group(1)) if match else None
