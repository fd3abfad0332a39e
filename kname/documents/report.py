"""`kname report`: saved censuses and profiles as tables, merged, and compared.

    kname report census.json                        the census as a table
    kname report census.json census.pid*.json       a program and its children: one table
    kname report old.json --diff new.json           launches per call site that changed
    kname report tests.json                         pytest --kname-report's file: the census of
                                                    the whole suite (every test's sites summed)
    kname report old.json --diff new.json --fail-on-slower 10% [--min-time 50us]
                                                    GPU time and launches per site; exit 1 if
                                                    a site (or the total) got slower
    kname report profile.rank*.json [--by-rank] [--straggler 20% [--fail-on-straggler]]
                                                    a job's ranks merged: the spread of each
                                                    site across ranks, or its row per rank;
                                                    the slowest rank flagged (and exit 1)
    kname report X.json [--diff Y.json] --html PAGE.html
                                                    ... and as one self-contained web page:
                                                    the ranking, each line beside its source

Files of one kind are read, each once, and summed, each rank's numbers kept (merge.py: one
file at a time, in several processes for many files); a shell pattern that matched no file
(passed on as it was) is left out, with a line saying so. Every error, a bad file's included, is
one line on stderr and exit 2. The page asked for is written before anything is printed, so a
reader that leaves early (`| head`) changes neither the files written nor the exit code.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kname.documents.diff import (
    DEFAULT_MIN_TIME_NS,
    DEFAULT_THRESHOLD,
    Comparison,
    compare,
    compare_gpu,
    compare_total,
    launch_counts,
    slower,
)
from kname.documents.files import load, write_atomically
from kname.documents.memory import DEFAULT_MIN_BYTES, format_bytes, more_memory
from kname.documents.merge import MixedKinds, merge_files
from kname.documents.pages import render_page
from kname.documents.pages.diff import render_diff_page
from kname.documents.pytest_report import is_pytest_report, suite_census
from kname.documents.schema import (
    MAX_COUNT,
    PROFILE_SCHEMA,
    PYTEST_REPORT,
    SCHEMAS,
    DocumentError,
    check_totals,
)
from kname.documents.spread import Spread, ranks_of, stragglers
from kname.documents.tables import render_by_rank, render_table
from kname.documents.text import count_of, format_duration, printable, stdout_to_devnull

NEEDS_DIFF = ("ignore_lines", "fail_on_slower", "fail_on_change", "fail_on_more_memory")
PROFILE_ONLY = ("fail_on_slower", "min_time", "top", "fail_on_more_memory")
NOT_WITH_DIFF = ("by_rank", "straggler", "fail_on_straggler")
DEFAULT_STRAGGLER = "20%"  # --fail-on-straggler without --straggler
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s)?\s*$")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass
class Printed:
    """What a report prints, held until the files it was asked for are written: its text (on
    stdout) and its verdicts (the --fail-on-* lines, on stderr after the text)."""

    text: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)


def run(options: argparse.Namespace) -> int:
    """Write the page asked for, then print what `options` ask; the exit code (2 for a usage
    error or a bad file, 1 for --fail-on-*). A reader that leaves early (`| head`) changes
    neither the files written nor the exit code."""
    printed = Printed()
    try:
        code = _report(options, printed)
    except MixedKinds:
        return _usage_error(_mixed(options.diff))
    except DocumentError as exc:  # a file's fault, on reading it or in what it adds up to
        return _usage_error(printable(exc))
    print_quietly("".join(printed.text))
    for verdict in printed.verdicts:
        _say(verdict)
    return code


def print_quietly(text: str) -> None:
    """`text` on stdout; a reader that leaves early (`| head`) ends it without a word."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_to_devnull()


def _report(options: argparse.Namespace, printed: Printed) -> int:
    """What run does, the text kept in `printed`; DocumentError for a bad file."""
    given = [o for o in vars(options) if getattr(options, o) not in (None, False)]
    for option in NEEDS_DIFF:
        if option in given and options.diff is None:
            return _usage_error(f"{_flag(option)} needs --diff OTHER.json")
    for option in NOT_WITH_DIFF:
        if option in given and options.diff is not None:
            return _usage_error(f"{_flag(option)} is for files of several ranks, not --diff")
    straggling = options.straggler or options.fail_on_straggler
    if "min_time" in given and options.diff is None and not straggling:
        return _usage_error("--min-time needs --diff OTHER.json or --straggler PCT")
    if not options.files:
        return _usage_error("needs a saved census or profile, e.g. kname report census.json")
    if options.top is not None and not 1 <= options.top <= MAX_COUNT:
        return _usage_error(
            f"--top {options.top}: expected a whole number of 1 or more, up to 2**63-1"
        )
    files = _files_to_read(options.files)
    before = load_document(files[0]) if len(files) == 1 else merge_files(files, load_document)
    check_totals(before, _label(files))  # what the files add up to
    after = None if options.diff is None else load_document(options.diff)
    schemas = {d["schema"] for d in [before, *([after] if after else [])]}
    wanted = [_flag(option) for option in PROFILE_ONLY if option in given]
    if len(schemas) > 1:
        return _usage_error(_mixed(options.diff))
    if wanted and schemas != {PROFILE_SCHEMA}:
        return _usage_error(f"{wanted[0]} is for GPU profiles (schema 2), not launch censuses")
    if options.ignore_lines and PROFILE_SCHEMA in schemas:
        return _usage_error("--ignore-lines is for launch censuses (schema 1), not GPU profiles")
    labels = (_label(files), options.diff)
    if after is None:
        shown = _one_document(before, labels[0], options, printed)
        if shown == 2:  # a usage error: no page either
            return shown
        return _write_page(options.html, lambda: render_page(before)) or shown
    if PROFILE_SCHEMA in schemas:
        return _profile_diff(before, after, labels, options, printed)
    comparison = Comparison(before, after, labels, options.ignore_lines)
    page = _write_page(options.html, lambda: render_diff_page(comparison))
    printed.text.append(comparison.text())
    if page:
        return page
    return 1 if options.fail_on_change and compare(before, after, options.ignore_lines) else 0


def _one_document(
    document: Mapping[str, Any], label: str, options: argparse.Namespace, printed: Printed
) -> int:
    """The table of one document (or of files merged), by rank with --by-rank; stragglers
    marked and listed with --straggler, and exit 1 for one with --fail-on-straggler."""
    if options.by_rank:
        if len(ranks_of(document)) < 2:
            return _usage_error("--by-rank needs files of several ranks (a job's rank files)")
        printed.text.append(render_by_rank(document, source=label, top=options.top))
        return 0
    straggler = options.straggler or (DEFAULT_STRAGGLER if options.fail_on_straggler else None)
    if straggler is None:
        printed.text.append(render_table(document, source=label, top=options.top))
        return 0
    try:
        threshold = parse_threshold(straggler, "--straggler")
        min_time = _min_time(options) if document["schema"] == PROFILE_SCHEMA else 0
    except ValueError as exc:
        return _usage_error(str(exc))
    if len(ranks_of(document)) < 2:
        return _usage_error("--straggler needs files of several ranks (a job's rank files)")
    rule = (threshold, min_time)
    printed.text.append(render_table(document, source=label, top=options.top, straggler=rule))
    found = stragglers(document, threshold, min_time)
    if found:
        printed.verdicts.append(_straggler_verdict(document, found, rule, options))
    return 1 if found and options.fail_on_straggler else 0


def _straggler_verdict(
    document: Mapping[str, Any],
    found: list[tuple[Mapping[str, Any], Spread]],
    rule: tuple[float, int],
    options: argparse.Namespace,
) -> str:
    """The line that names the sites with a straggler (the first three) and the rule."""
    named = ", ".join(
        f"{printable(site['name'])} (rank {spread.slowest})" for site, spread in found[:3]
    )
    more = f", and {len(found) - 3} more" if len(found) > 3 else ""
    threshold, min_time = rule
    # A census has no time: its rule is on launches alone (any excess counts).
    least = f" and {format_duration(min_time)}" if document["schema"] == PROFILE_SCHEMA else ""
    what = "" if least else " in launches"
    flag = "--fail-on-straggler" if options.fail_on_straggler else "--straggler"
    return (
        f"{count_of(len(found), 'call site')} with a straggler: the slowest rank over the "
        f"median{what} by more than {100 * threshold:g}%{least} ({flag}): {named}{more}"
    )


def parse_threshold(text: str, option: str = "--fail-on-slower") -> float:
    """`10%` or `10` -> 0.10: the argument of `option`; ValueError says what is accepted."""
    value = text.strip().removesuffix("%").strip()
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{option} {text!r}: expected a percentage such as 10% (or 10), 0 or more")
    return number / 100


def parse_duration(text: str) -> int:
    """`50us`, `2ms`, `0` -> ns: the --min-time argument; ValueError says what is accepted."""
    match = _DURATION.match(text)
    if match is None or (match.group(2) is None and float(match.group(1)) != 0):
        raise ValueError(f"--min-time {text!r}: expected a duration such as 50us, 2ms, 1s or 0")
    ns = float(match.group(1)) * _UNITS[match.group(2) or "ns"]
    if not ns <= MAX_COUNT:  # inf too: a float of 400 digits
        raise ValueError(
            f"--min-time {printable(text)[:40]}: expected a duration of at most 2**63-1 ns "
            "(292 years), such as 50us"
        )
    return round(ns)


def _files_to_read(paths: list[str]) -> list[str]:
    """`paths` each once, without the shell patterns that matched nothing; both said on stderr."""
    patterns = [path for path in paths if _is_unmatched_pattern(path)]
    files: list[str] = []
    seen: set[str] = set()
    for path in (path for path in paths if path not in patterns):
        if os.path.realpath(path) in seen:
            _say(f"{printable(path)} is given more than once; it is counted once")
            continue
        files.append(path)
        seen.add(os.path.realpath(path))
    if not files:
        raise DocumentError(f"{patterns[0]}: a pattern that matched no file, and no file was given")
    for pattern in patterns:
        _say(f"{printable(pattern)}: a pattern that matched no file; left out")
    return files


def load_document(path: str) -> dict[str, Any]:
    """A saved census or profile (files.load); the pytest plugin's report is the census of its
    whole suite."""
    if _is_unmatched_pattern(path):
        raise DocumentError(f"{path}: a pattern that matched no file")
    document = load(path, (*SCHEMAS, PYTEST_REPORT))
    if not is_pytest_report(document):
        return document
    suite = suite_census(document)
    check_totals(suite, path)  # its tests' launches, summed
    return suite


def _is_unmatched_pattern(path: str) -> bool:
    """A shell pattern that matched nothing: the shell passes it on as it was written."""
    return any(c in path for c in "*?[") and not os.path.lexists(path)


def _profile_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    labels: tuple[str, str],
    options: argparse.Namespace,
    printed: Printed,
) -> int:
    try:
        threshold = (
            DEFAULT_THRESHOLD
            if options.fail_on_slower is None
            else parse_threshold(options.fail_on_slower)
        )
        min_time = _min_time(options)
        memory_threshold = _memory_threshold(options)
    except ValueError as exc:
        return _usage_error(str(exc))
    comparison = Comparison(before, after, labels, threshold=threshold, min_time_ns=min_time)
    page = _write_page(options.html, lambda: render_diff_page(comparison))
    printed.text.append(comparison.text())
    if page:
        return page
    failed = 0
    if options.fail_on_slower is not None:
        worse = slower(compare_gpu(before, after, threshold, min_time))
        total = compare_total(before, after, threshold, min_time)
        if worse or total.kind == "slower":
            what = count_of(len(worse), "call site") + (
                " and the total" if total.kind == "slower" else ""
            )
            printed.verdicts.append(
                f"{what} got slower by more than {100 * threshold:g}% and "
                f"{format_duration(min_time)} (--fail-on-slower)"
            )
            failed = 1
    if options.fail_on_change and launch_counts(before) != launch_counts(after):
        failed = 1
    if memory_threshold is not None and _more_memory(before, after, memory_threshold, printed):
        failed = 1
    return failed


def _memory_threshold(options: argparse.Namespace) -> float | None:
    """--fail-on-more-memory as a fraction (None: not given); ValueError says what is accepted."""
    text = getattr(options, "fail_on_more_memory", None)
    return None if text is None else parse_threshold(text, "--fail-on-more-memory")


def _more_memory(
    before: Mapping[str, Any], after: Mapping[str, Any], threshold: float, printed: Printed
) -> bool:
    """Whether a memory view's peak grew by more than `threshold` (and DEFAULT_MIN_BYTES),
    its verdict kept in `printed`."""
    grown = more_memory(before, after, threshold, DEFAULT_MIN_BYTES)
    if grown:
        views = ", ".join(
            f"{view} {format_bytes(was)} -> {format_bytes(now)}" for view, was, now in grown
        )
        printed.verdicts.append(
            f"the memory peak grew by more than {100 * threshold:g}% and "
            f"{format_bytes(DEFAULT_MIN_BYTES)} ({views}) (--fail-on-more-memory)"
        )
    return bool(grown)


def _min_time(options: argparse.Namespace) -> int:
    """--min-time in ns (default 50us); ValueError says what is accepted."""
    return DEFAULT_MIN_TIME_NS if options.min_time is None else parse_duration(options.min_time)


def _flag(option: str) -> str:
    return f"--{option.replace('_', '-')}"


def _write_page(path: str | None, page: Callable[[], str]) -> int:
    """Write `page()` to `path` (if given); 2 after one line when it cannot be written."""
    if path is None:
        return 0
    try:
        write_atomically(path, page())
    except OSError as exc:
        return _usage_error(f"--html {printable(path)}: cannot write it ({exc.strerror or exc})")
    return 0


def _label(files: list[str]) -> str:
    if len(files) <= 3:
        return " + ".join(files)
    more = len(files) - 1
    return f"{files[0]} + {more} more file{'s' if more > 1 else ''}"


def _mixed(diff: str | None) -> str:
    verb = "merge or compare" if diff else "merge"
    return (
        f"cannot {verb} launch censuses (schema 1) with GPU profiles (schema 2): "
        "give files of one kind"
    )


def _say(message: str) -> None:
    print(f"kname report: {message}", file=sys.stderr)


def _usage_error(message: str) -> int:
    _say(message)
    return 2
