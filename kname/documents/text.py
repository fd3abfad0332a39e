"""Plain text for a terminal: names made safe to print, counted nouns, durations, columns, and
a reader that leaves early.

Every table, diff and page of a saved document writes names and file labels through `printable`,
and every GPU time through `format_duration`, so all of them read the same.
"""

from __future__ import annotations

import os
import sys

_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"))


def printable(text: object) -> str:
    """`text` safe for a terminal: control characters (ANSI escapes, NUL, newlines) and other
    unprintable ones (lone surrogates) written as Python escapes, e.g. \\x1b."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def os_text(text: str) -> str:
    """`text` from the system (argv, a host name) made valid UTF-8: each lone surrogate written
    as its escape, an undecodable byte kept by os.fsdecode as that byte's (b'\\xff': `\\xff`)."""
    if text.isascii():
        return text
    return "".join(_escaped(c) if "\ud800" <= c <= "\udfff" else c for c in text)


def _escaped(surrogate: str) -> str:
    code = ord(surrogate)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def count_of(number: int, noun: str) -> str:
    """`1 launch`, `3 launches`, `0 call sites`, `2 processes`."""
    plural = noun + ("es" if noun.endswith(("h", "s")) else "s")
    return f"{number} {noun if number == 1 else plural}"


def format_duration(ns: float) -> str:
    """`812 ns`, `12.3 us`, `4.56 ms`, `1.23 s`: three significant digits, ASCII units."""
    for scale, unit in _UNITS:
        if ns >= scale * 0.9995:  # what rounds to 1000 of the unit below is 1.00 of this one
            return f"{_three_digits(ns / scale)} {unit}"
    return f"{ns:.0f} ns"


def _three_digits(value: float) -> str:
    """`value` (1 to 999.5) to three significant digits, judged after rounding: 99.95 -> 100."""
    if value < 9.995:
        return f"{value:.2f}"
    if value < 99.95:
        return f"{value:.1f}"
    return f"{value:.0f}"


def columns(rows: list[tuple[str, ...]], right_aligned: tuple[int, ...]) -> str:
    """`rows` of cells as a plain-text table: columns two spaces apart, those whose index is in
    `right_aligned` aligned right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def stdout_to_devnull() -> None:
    """After a BrokenPipeError (`kname report big.json | head`: the reader left), stdout onto
    devnull, so that nothing more, not even the flush at exit, fails: Python's advice (the
    signal module's note on SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
