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
(passed on as it was) is left out, with a line saying so. Every error is one line on stderr and
exit 2.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from kname.documents.diff import (
    DEFAULT_MIN_TIME_NS,
    DEFAULT_THRESHOLD,
    compare,
    compare_gpu,
    compare_total,
    launch_counts,
    render_count_changes,
    render_diff,
    render_gpu_diff,
    slower,
)
from kname.documents.files import read_json, write_atomically
from kname.documents.merge import MixedKinds, merge_files
from kname.documents.pages import render_page
from kname.documents.pages.diff import render_diff_page
from kname.documents.pytest_report import is_pytest_report, suite_census, validate_pytest_report
from kname.documents.schema import PROFILE_SCHEMA, DocumentError, validate
from kname.documents.spread import ranks_of, stragglers
from kname.documents.tables import render_by_rank, render_table
from kname.documents.text import count_of, format_duration, printable

EXAMPLES = """\
examples:
  kname run --report census.json -- python app.py    save a census (or KNAME_REPORT=census.json)
  kname report census.json                           print it as a table
  kname report before.json --diff after.json         launches per call site: added, removed,
                                                     changed (with the difference)
  kname report before.json --diff after.json --fail-on-change
                                                     ... and exit 1 if anything changed (CI)
  kname report before.json --diff after.json --fail-on-change --ignore-lines
                                                     ... per function, file and kernel: code
                                                     that only moved is no change
  kname report census.json census.pid*.json          a program and its children, merged
  kname report tests.json                            pytest --kname-report's file: one census
                                                     of the whole suite (each test's summed)

GPU profiles (kname profile --json FILE.json, schema 2), and several files at once:
  kname report profile.json --top 10                 the ten call sites with most GPU time
  kname report rank0.json rank1.json                 one table: the files' sites summed (one
                                                     file per rank or process, of one kind)
  kname report before.json --diff after.json         GPU time and launches per call site
  kname report before.json --diff after.json --fail-on-slower 10%
                                                     ... and exit 1 if a call site's (or the
                                                     total) GPU time grew by more than 10% and
                                                     by at least --min-time (default 50us)

A job's ranks (kname profile --json profile.json -- torchrun ...: profile.rank0.json, ...):
  kname report profile.rank*.json                    one table: per site, its GPU time on the
                                                     least, median and most loaded rank, and
                                                     the slowest rank
  kname report profile.rank*.json --by-rank          each site's row on each rank
  kname report profile.rank*.json --straggler 20% --fail-on-straggler
                                                     mark (!) each site whose slowest rank
                                                     takes over 20% (and --min-time) more than
                                                     the median; exit 1 if there is one (CI)

Web pages (one self-contained file: the ranking, each file's source with every line's numbers
beside it, the call tree when names carry callers):
  kname report profile.json --html profile.html      a profile (or census) as a page
  kname report before.json --diff after.json --html diff.html
                                                     the diff: lines slower, faster, new, gone

Errors (a missing file, bad JSON, not a census of schema 1 or 2) are one line on stderr and exit 2.
"""
NEEDS_DIFF = ("ignore_lines", "fail_on_slower", "fail_on_change")
PROFILE_ONLY = ("fail_on_slower", "min_time", "top", "straggler", "fail_on_straggler")
NOT_WITH_DIFF = ("by_rank", "straggler", "fail_on_straggler")
DEFAULT_STRAGGLER = "20%"  # --fail-on-straggler without --straggler
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s)?\s*$")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def add_command(commands: argparse._SubParsersAction) -> None:
    """`kname report` and its options, on the `kname` command's parser."""
    report = commands.add_parser(
        "report",
        help="print a saved launch census or GPU profile, merge several, or compare two",
        description="Print a launch census saved as JSON (KNAME_REPORT=FILE.json or "
        "kname run --report FILE.json) or a GPU profile (kname profile --json FILE.json), "
        "or compare it with another.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "files", nargs="*", metavar="FILE.json",
        help="a saved census or profile; several files of one kind (one per rank or process) "
        "are summed",
    )  # fmt: skip
    report.add_argument(
        "--diff", metavar="OTHER.json", help="compare FILE.json (before) with OTHER.json (after)"
    )
    report.add_argument(
        "--fail-on-change", action="store_true",
        help="with --diff: exit 1 if any call site's launch count changed",
    )  # fmt: skip
    report.add_argument(
        "--ignore-lines", action="store_true",
        help="with --diff of launch censuses: compare per function, file and kernel, ignoring "
        "line numbers (the number after each ':' in a name), so code that only moved is no change",
    )  # fmt: skip
    report.add_argument(
        "--fail-on-slower", metavar="PCT",
        help="with --diff of profiles: exit 1 if a call site's GPU time (or the total) grew by "
        "more than PCT percent, e.g. 10%%, and by at least --min-time",
    )  # fmt: skip
    report.add_argument(
        "--min-time", metavar="TIME",
        help="with --diff of profiles: smaller growth is never slower (default 50us)",
    )  # fmt: skip
    report.add_argument("--top", metavar="N", type=int, help="call sites in a profile's table")
    report.add_argument(
        "--by-rank", action="store_true",
        help="files of several ranks: each call site's row on each rank",
    )  # fmt: skip
    report.add_argument(
        "--straggler", metavar="PCT",
        help="profiles of several ranks: mark (!) each call site whose slowest rank takes more "
        "than PCT percent over the median rank, e.g. 20%%, and at least --min-time",
    )  # fmt: skip
    report.add_argument(
        "--fail-on-straggler", action="store_true",
        help=f"with --straggler (default {DEFAULT_STRAGGLER}%): exit 1 if a call site has one",
    )  # fmt: skip
    report.add_argument(
        "--html", metavar="PATH",
        help="also write the document (or with --diff, the comparison) as a self-contained "
        "web page",
    )  # fmt: skip
    report.set_defaults(handler=lambda options, parser: run(options))


def run(options: argparse.Namespace) -> int:
    """Print what `options` ask; the exit code (2 for a usage error, 1 for --fail-on-*)."""
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
    try:
        files = _files_to_read(options.files)
        before = _load(files[0]) if len(files) == 1 else merge_files(files, _load)
        after = None if options.diff is None else _load(options.diff)
    except MixedKinds:
        return _usage_error(_mixed(options.diff))
    except DocumentError as exc:
        return _usage_error(printable(exc))
    schemas = {d["schema"] for d in [before, *([after] if after else [])]}
    wanted = [_flag(option) for option in PROFILE_ONLY if option in given]
    if len(schemas) > 1:
        return _usage_error(_mixed(options.diff))
    if wanted and schemas != {PROFILE_SCHEMA}:
        return _usage_error(f"{wanted[0]} is for GPU profiles (schema 2), not launch censuses")
    if options.ignore_lines and PROFILE_SCHEMA in schemas:
        return _usage_error("--ignore-lines is for launch censuses (schema 1), not GPU profiles")
    if options.top is not None and options.top < 1:
        return _usage_error(f"--top {options.top}: expected a whole number of 1 or more")
    labels = (_label(files), options.diff)
    if after is None:
        shown = _one_document(before, labels[0], options)
        if shown == 2:  # a usage error: no page either
            return shown
        return _write_page(options.html, lambda: render_page(before)) or shown
    if PROFILE_SCHEMA in schemas:
        return _profile_diff(before, after, labels, options)
    sys.stdout.write(render_diff(before, after, labels, options.ignore_lines))
    page = _write_page(options.html, lambda: render_diff_page(before, after, labels))
    if page:
        return page
    return 1 if options.fail_on_change and compare(before, after, options.ignore_lines) else 0


def _one_document(document: Mapping[str, Any], label: str, options: argparse.Namespace) -> int:
    """The table of one document (or of files merged), by rank with --by-rank; stragglers
    marked and listed with --straggler, and exit 1 for one with --fail-on-straggler."""
    if options.by_rank:
        if len(ranks_of(document)) < 2:
            return _usage_error("--by-rank needs files of several ranks (a job's rank files)")
        sys.stdout.write(render_by_rank(document, source=label, top=options.top))
        return 0
    straggler = options.straggler or (DEFAULT_STRAGGLER if options.fail_on_straggler else None)
    if straggler is None:
        sys.stdout.write(render_table(document, source=label, top=options.top))
        return 0
    try:
        threshold = parse_threshold(straggler, "--straggler")
        min_time = _min_time(options)
    except ValueError as exc:
        return _usage_error(str(exc))
    if len(ranks_of(document)) < 2:
        return _usage_error("--straggler needs profiles of several ranks (a job's rank files)")
    rule = (threshold, min_time)
    sys.stdout.write(render_table(document, source=label, top=options.top, straggler=rule))
    found = stragglers(document, threshold, min_time)
    flag = "--fail-on-straggler" if options.fail_on_straggler else "--straggler"
    if found:
        named = ", ".join(
            f"{printable(site['name'])} (rank {spread.slowest})" for site, spread in found[:3]
        )
        more = f", and {len(found) - 3} more" if len(found) > 3 else ""
        _say(
            f"{count_of(len(found), 'call site')} with a straggler: the slowest rank over the "
            f"median by more than {100 * threshold:g}% and {format_duration(min_time)} "
            f"({flag}): {named}{more}"
        )
    return 1 if found and options.fail_on_straggler else 0


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
    return round(float(match.group(1)) * _UNITS[match.group(2) or "ns"])


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


def _load(path: str) -> dict[str, Any]:
    """A saved census or profile; the pytest plugin's report is the census of its whole suite."""
    if _is_unmatched_pattern(path):
        raise DocumentError(f"{path}: a pattern that matched no file")
    value = read_json(path)
    if is_pytest_report(value):
        return suite_census(validate_pytest_report(value, path))
    return validate(value, path)


def _is_unmatched_pattern(path: str) -> bool:
    """A shell pattern that matched nothing: the shell passes it on as it was written."""
    return any(c in path for c in "*?[") and not os.path.lexists(path)


def _profile_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    labels: tuple[str, str],
    options: argparse.Namespace,
) -> int:

    try:
        threshold = (
            DEFAULT_THRESHOLD
            if options.fail_on_slower is None
            else parse_threshold(options.fail_on_slower)
        )
        min_time = _min_time(options)
    except ValueError as exc:
        return _usage_error(str(exc))
    sys.stdout.write(render_gpu_diff(before, after, labels, threshold, min_time))
    sys.stdout.write(render_count_changes(before, after, labels))
    page = _write_page(
        options.html, lambda: render_diff_page(before, after, labels, threshold, min_time)
    )
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
            _say(
                f"{what} got slower by more than {100 * threshold:g}% and "
                f"{format_duration(min_time)} (--fail-on-slower)"
            )
            failed = 1
    if options.fail_on_change and launch_counts(before) != launch_counts(after):
        failed = 1
    return failed


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
