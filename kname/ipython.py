"""kname in IPython and Jupyter: `%load_ext kname`, `%kname on|off|status|report`, `%%kname`.

    %load_ext kname          install kname in this kernel (GPU modules already imported too)
    %kname status            installed? naming on? launches so far
    %kname off / %kname on   stop / resume naming, no restart
    %kname report            the census since kname was installed
    %%kname                  run the cell, then show the launches of that cell alone

Or in a profile's ipython_config.py: `c.InteractiveShellApp.extensions = ["kname"]`. Tables are
HTML in Jupyter and text in a terminal. Cells are named `<cell N>` (see kname.cells).
"""

from __future__ import annotations

import ast
import bdb
import contextlib
import io
import os
import sys
import tokenize
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from kname import cells, lifecycle, stretch
from kname._version import __version__
from kname.census import census
from kname.census_view import Census
from kname.documents.text import count_of

COMMANDS = ("on", "off", "status", "report")

_installed_here = False  # this extension installed kname, so unloading it uninstalls kname


def load_ipython_extension(ipython: Any) -> None:
    """Install kname (if it is not yet) and register the `%kname` magics."""
    global _installed_here
    if not lifecycle.is_installed():
        lifecycle.install()
        _installed_here = True
    ipython.register_magics(KnameMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext kname`: uninstall kname if loading the extension installed it."""
    global _installed_here
    if _installed_here:
        lifecycle.uninstall()
        _installed_here = False


@magics_class
class KnameMagics(Magics):
    """`%kname on|off|status|report` and the cell magic `%%kname`."""

    @line_cell_magic
    def kname(self, line: str, cell: str | None = None) -> Any:
        """%kname on|off|status|report: switch naming, or show it; %%kname: a cell's census."""
        if cell is not None:
            if line.strip():
                raise UsageError(f"%%kname takes no arguments, not {line.strip()!r}")
            return run_counted(self.shell, cell)
        command = line.strip() or "status"
        if command not in COMMANDS:
            raise UsageError(f"%kname {command}: unknown command; accepted: {', '.join(COMMANDS)}")
        if command == "on":
            if not lifecycle.is_installed():
                lifecycle.install()
            lifecycle.enable()
            print("kname: on (launches are named)")
        elif command == "off":
            lifecycle.disable()
            print("kname: off (launches run unnamed, still installed; %kname on resumes)")
        elif command == "status":
            print(status())
        else:
            display(Census(census(), "kname census since install"))
        return None


def run_counted(shell: Any, cell: str) -> Any:
    """Run `cell` in the user's namespace, then display its census; return its last value.

    What the cell raises propagates; IPython shows its traceback from the cell's code on.
    """
    number = _current_cell_number(shell)
    before = stretch.take()
    try:
        return _execute(shell, cell, number)
    except BaseException as error:
        # Shown whole where that cannot be arranged (an exception class that refuses it).
        with contextlib.suppress(Exception):
            _show_from_cell_code(shell, error)
        raise
    finally:
        title = f"kname census of cell {number}" if number is not None else "kname census"
        if not (lifecycle.is_installed() and lifecycle.is_enabled()):
            title += " (kname is off: %kname on)"
        display(Census(stretch.since(before), title))


def status() -> str:
    """Two lines: whether kname is installed and naming, and what it counted so far."""
    config = lifecycle.current_config()
    if config is None:
        state = "not installed (%kname on installs it)"
    else:
        switch = "naming on" if lifecycle.is_enabled() else "naming off (%kname on resumes)"
        state = f"installed, {switch}; KNAME_MODE={config.mode}, NVTX domain {config.domain!r}"
    document = census()
    tool = os.environ.get("NVTX_INJECTION64_PATH")
    profiler = "attached" if tool else "none attached (ranges show only under a profiler)"
    return (
        f"kname {__version__}: {state}\n"
        f"counted so far: {count_of(document['total_launches'], 'launch')} from "
        f"{count_of(len(document['sites']), 'call site')}; NVTX tool: {profiler}"
    )


def _ends_in_semicolon(source: str) -> bool:
    """IPython's rule for showing a cell's value (DisplayHook.quiet): not when the last token of
    the cell, past comments and blank lines, is `;`."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skipped = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)
    last = next((token for token in reversed(tokens) if token.type not in skipped), None)
    return last is not None and last.type == tokenize.OP and last.string == ";"


def _execute(shell: Any, cell: str, number: int | None) -> Any:
    """Run the cell's code as IPython runs a cell: its transforms, its namespace, its last
    expression's value returned for the Out prompt (none after a `;`), tracebacks pointing into
    the cell."""
    # A leading blank line makes line N of the code line N of the cell as shown, whose line 1
    # is `%%kname`: `<cell 5>:3` is the third line on screen. IPython's transforms drop the blank
    # lines a cell starts with: they are kept from them, and counted.
    lines = cell.splitlines(keepends=True)
    blank = next((n for n, line in enumerate(lines) if line.strip()), len(lines))
    source = "\n" * (1 + blank) + shell.transform_cell("".join(lines[blank:]))
    filename = shell.compile.cache(source, number or 0, raw_code="\n" + cell)
    tree = shell.transform_ast(shell.compile.ast_parse(source, filename=filename))
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(shell.compile(tree, filename, "exec"), shell.user_ns)
    if last is None:
        return None
    value = eval(shell.compile(last, filename, "eval"), shell.user_ns)
    return None if _ends_in_semicolon(source) else value


def _show_from_cell_code(shell: Any, error: BaseException) -> None:
    """Have IPython show `error`, raised by a running `%%kname` cell, as it shows a plain cell's:
    from the cell's code on, without this module's frames.

    Through `_render_traceback_`, which IPython's display asks an exception first; said once,
    for this raise. Exceptions IPython shows otherwise (without frames, a syntax error's own way,
    by a handler of the user's) are left alone.
    """
    quiet = (SystemExit, bdb.BdbQuit, SyntaxError, *getattr(shell, "custom_exceptions", ()))
    running = getattr(getattr(shell, "displayhook", None), "exec_result", None) is not None
    if not running or isinstance(error, quiet) or hasattr(error, "_render_traceback_"):
        return
    start = error.__traceback__
    while start is not None and start.tb_frame.f_globals.get("__name__") == __name__:
        start = start.tb_next

    def render() -> list[str]:
        vars(error).pop("_render_traceback_", None)  # raised again elsewhere, it is shown whole
        return shell.InteractiveTB.structured_traceback(type(error), error, start, tb_offset=0)

    error._render_traceback_ = render  # type: ignore[attr-defined]


def _current_cell_number(shell: Any) -> int | None:
    """The execution number of the cell that called the magic: the innermost calling frame
    whose code IPython compiled from a cell (it may differ from shell.execution_count)."""
    frame = sys._getframe(1)
    while frame is not None:
        number = cells.cell_number(frame.f_code.co_filename)
        if number is not None:
            return number
        frame = frame.f_back
    return getattr(shell, "execution_count", None)
