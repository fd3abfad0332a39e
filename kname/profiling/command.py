"""`kname report` for GPU profiles (schema 2) and for several files: merge, table, diff.

    kname report profile.json                       the table, ranked by GPU time
    kname report rank0.json rank1.json              one table: the files' sites summed
    kname report old.json --diff new.json --fail-on-slower 10% [--min-time 50us]
                                                    GPU time and launches per site; exit 1 if
                                                    a site (or the total) got slower

One launch census (schema 1), alone or with --diff, is left to the census report (kname.cli):
report() then returns None. Several censuses are merged here like profiles.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

EXAMPLES = """
GPU profiles (kname profile --json FILE.json, schema 2), and several files at once:
  kname report profile.json --top 10                 the ten call sites with most GPU time
  kname report rank0.json rank1.json                 one table: the files' sites summed (one
                                                     file per rank or process, of one kind)
  kname report before.json --diff after.json         GPU time and launches per call site
  kname report before.json --diff after.json --fail-on-slower 10%
                                                     ... and exit 1 if a call site's (or the
                                                     total) GPU time grew by more than 10% and
                                                     by at least --min-time (default 50us)
"""
PROFILE_ONLY = ("fail_on_slower", "min_time", "top")


def add_report_options(report: argparse.ArgumentParser) -> None:
    """The options `kname report` has for profiles and for several files."""
    report.add_argument(
        "more", nargs="*", metavar="MORE.json",
        help="more files of the same kind (one per rank or process): their sites are summed",
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
    report.epilog = (report.epilog or "") + EXAMPLES


def report(options: argparse.Namespace) -> int | None:
    """Print what `options` ask; the exit code, or None for one launch census (not ours)."""
    # Imported here: `kname run` and `kname profile` build this parser too, and exec at once.
    from kname.census_file import CensusError, compare, printable, render_diff
    from kname.profiling.document import SCHEMA, load, merge_documents
    from kname.profiling.table import render_document

    for option in ("fail_on_slower", "fail_on_change", "min_time"):
        if getattr(options, option) not in (None, False) and options.diff is None:
            return _usage_error(f"--{option.replace('_', '-')} needs --diff OTHER.json")
    files = [options.file, *options.more]
    try:
        documents = [load(path) for path in files]
        after = None if options.diff is None else load(options.diff)
    except CensusError as exc:
        return _usage_error(printable(exc))
    schemas = {d["schema"] for d in [*documents, *([after] if after else [])]}
    wanted = [f"--{o.replace('_', '-')}" for o in PROFILE_ONLY if getattr(options, o) is not None]
    if schemas != {SCHEMA} and not options.more and not wanted:
        return None if schemas == {1} else _usage_error(_mixed(options.diff))
    if len(schemas) > 1:
        return _usage_error(_mixed(options.diff))
    if wanted and schemas != {SCHEMA}:
        return _usage_error(f"{wanted[0]} is for GPU profiles (schema 2), not launch censuses")
    ignore_lines = getattr(options, "ignore_lines", False)
    if ignore_lines and SCHEMA in schemas:
        return _usage_error("--ignore-lines is for launch censuses (schema 1), not GPU profiles")
    if options.top is not None and options.top < 1:
        return _usage_error(f"--top {options.top}: expected a whole number of 1 or more")
    before = documents[0] if len(documents) == 1 else merge_documents(documents)
    label = _label(files)
    if after is None:
        sys.stdout.write(render_document(before, source=label, top=options.top))
        return 0
    if SCHEMA not in schemas:  # launch censuses, merged
        sys.stdout.write(render_diff(before, after, (label, options.diff), ignore_lines))
        return 1 if options.fail_on_change and compare(before, after, ignore_lines) else 0
    return _profile_diff(before, after, (label, options.diff), options)


def _profile_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    labels: tuple[str, str],
    options: argparse.Namespace,
) -> int:
    from kname.census_file import count_of
    from kname.profiling.diff import (
        DEFAULT_MIN_TIME_NS,
        DEFAULT_THRESHOLD,
        compare_gpu,
        compare_total,
        parse_duration,
        parse_threshold,
        render_count_changes,
        render_gpu_diff,
        slower,
    )
    from kname.profiling.document import launch_counts
    from kname.profiling.table import format_duration

    try:
        threshold = (
            DEFAULT_THRESHOLD
            if options.fail_on_slower is None
            else parse_threshold(options.fail_on_slower)
        )
        min_time = (
            DEFAULT_MIN_TIME_NS if options.min_time is None else parse_duration(options.min_time)
        )
    except ValueError as exc:
        return _usage_error(str(exc))
    sys.stdout.write(render_gpu_diff(before, after, labels, threshold, min_time))
    sys.stdout.write(render_count_changes(before, after, labels))
    failed = 0
    if options.fail_on_slower is not None:
        worse = slower(compare_gpu(before, after, threshold, min_time))
        total = compare_total(before, after, threshold, min_time)
        if worse or total.kind == "slower":
            what = count_of(len(worse), "call site") + (
                " and the total" if total.kind == "slower" else ""
            )
            print(
                f"kname report: {what} got slower by more than {100 * threshold:g}% and "
                f"{format_duration(min_time)} (--fail-on-slower)",
                file=sys.stderr,
            )
            failed = 1
    if options.fail_on_change and launch_counts(before) != launch_counts(after):
        failed = 1
    return failed


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


def _usage_error(message: str) -> int:
    print(f"kname report: {message}", file=sys.stderr)
    return 2
