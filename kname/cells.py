"""Names for code typed into IPython or Jupyter: `<cell 3>`, the cell's execution number.

IPython compiles each cell under a file name of its own: `<ipython-input-3-8f2d1c0e1a2b>` in a
terminal, `/tmp/ipykernel_4242/2914741263.py` (a hash of the cell's text) in Jupyter. Both are
shown as `<cell N>`, where N is the number Jupyter prints beside the cell (`In [N]`) and IPython
puts in its tracebacks (`Cell In[N], line 12`). Asked only when a call site is first named.
"""

from __future__ import annotations

import re
import sys

_INPUT_NAME = re.compile(r"<ipython-input-([0-9]+)-[0-9a-f]+>")
_TRACEBACK_NAME = re.compile(r"In\s*\[\s*([0-9]+)\s*\]")


def cell_path(filename: str) -> str | None:
    """`<cell N>` when `filename` holds an IPython cell of the running shell, else None."""
    number = cell_number(filename)
    return None if number is None else f"<cell {number}>"


def cell_number(filename: str) -> int | None:
    """The execution number of the cell compiled as `filename`, or None; never raises."""
    try:
        number = _number_from_shell(filename)
    except Exception:  # a shell half torn down, an IPython of another age: fall back
        number = None
    if number is None:
        match = _INPUT_NAME.fullmatch(filename)
        number = int(match.group(1)) if match else None
    return number


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
