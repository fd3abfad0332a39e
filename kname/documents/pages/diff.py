"""Two documents compared, as a page: the changes ranked, and each file's lines before and after.

Profiles (schema 2) are compared by GPU time, with `kname report --diff`'s rule (documents/
diff.py): a site or a line is slower when its time grew by more than the threshold and by at
least the minimum time, faster for the mirror image, added when only the second profile has it,
removed when only the first has. Censuses (schema 1) are compared by launches: changed (more or
fewer, coloured apart), added, removed; with --ignore-lines, per function and file. The page is
drawn from the text's diff.Comparison, so both count the same changes in the same words. The
source shown is the second document's where it kept a line, else the first's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kname.documents.diff import Comparison, is_slower
from kname.documents.pages import source
from kname.documents.pages.layout import Html, View, html, joined, render, site_name
from kname.documents.pages.source import CODE, SourceFiles, file_views, files_view, linked
from kname.documents.text import count_of, format_duration

# Each kind of change: its class on the page (and its colour), in the order the table lists them.
KINDS = ("up", "down", "new", "gone", "same")
STYLE = """
.up { background: #f6b3a3; } .down { background: #b5e0ad; } .new { background: #bcd6f5; }
.gone { background: #dcdcdc; } .same { color: #777; }
td.kind { white-space: nowrap; }
table.sites th { white-space: normal; }
"""


@dataclass(frozen=True)
class Measure:
    """What a diff compares: the field of a site, how a value reads, how a change is judged."""

    field: str
    say: Callable[[int], str]
    judge: Callable[[int, int], str]  # (before, after), both there -> "up", "down" or "same"
    words: Mapping[str, str]  # kind -> what the page calls it

    def kind(self, was: int | None, now: int | None) -> str:
        """The change from `was` to `now` (None: not in that document): one of KINDS."""
        if was is None or now is None:
            return "new" if was is None else "gone"
        return self.judge(was, now)


def render_diff_page(comparison: Comparison) -> str:
    """The page of `comparison` (the one its text is drawn from): the same options, changes and
    words."""
    measure = _measure(comparison)
    before, after, labels = comparison.before, comparison.after, comparison.labels
    old, new = comparison.values(before), comparison.values(after)
    names = sorted(old.keys() | new.keys(), key=lambda n: -max(old.get(n, 0), new.get(n, 0)))
    files = SourceFiles(names, [after, before])
    changes = {name: measure.kind(old.get(name), new.get(name)) for name in names}
    total = "total_gpu_ns" if measure.field == "gpu_ns" else "total_launches"
    summary = (
        f"{labels[0]} ({measure.say(before[total])}) -> {labels[1]} "
        f"({measure.say(after[total])}): {comparison.counted()}"
    )
    if comparison.is_profile:
        summary += (
            f" (threshold {100 * comparison.threshold:g}% and "
            f"{format_duration(comparison.min_time_ns)})"
        )
    elif comparison.ignore_lines:
        summary += " (lines ignored)"
    lines_old, lines_new = _per_line(old, files), _per_line(new, files)
    rows = {
        place: _line_cells(lines_old.get(place), lines_new.get(place), measure)
        for place in lines_old.keys() | lines_new.keys()
    }
    headers = (f"before ({labels[0]})", f"after ({labels[1]})", "change", CODE)
    sums = _file_sums(lines_old, lines_new, measure)
    views = [
        View("changes", "changes", _table(names, old, new, changes, files, measure, labels)),
        files_view(files, sums),
        *file_views(files, rows, headers, sums),
    ]
    title = f"kname diff: {labels[0]} -> {labels[1]}"
    return render(title, summary, views, source.STYLE + STYLE)


def _measure(comparison: Comparison) -> Measure:
    # The words are the text's (diff.py): a census's count that grew or shrank is "changed".
    words = {"new": "added", "gone": "removed", "same": "same"}
    if comparison.is_profile:
        threshold, min_time_ns = comparison.threshold, comparison.min_time_ns

        def judge(was: int, now: int) -> str:
            if is_slower(was, now, threshold, min_time_ns):
                return "up"
            return "down" if is_slower(now, was, threshold, min_time_ns) else "same"

        words |= {"up": "slower", "down": "faster"}
        return Measure("gpu_ns", format_duration, judge, words)

    def judge_count(was: int, now: int) -> str:
        return "up" if now > was else "down" if now < was else "same"

    words |= {"up": "changed", "down": "changed"}
    return Measure("launches", lambda n: count_of(n, "launch"), judge_count, words)


def _per_line(values: Mapping[str, int], files: SourceFiles) -> dict[tuple[str, int], int]:
    lines: dict[tuple[str, int], int] = {}
    for name, value in values.items():
        frame = files.chains[name][0]
        if frame.path:
            lines[frame.path, frame.line] = lines.get((frame.path, frame.line), 0) + value
    return lines


def _change(was: int | None, now: int | None, measure: Measure) -> str:
    grown = (now or 0) - (was or 0)
    sign = "+" if grown > 0 else "-" if grown < 0 else "±"
    relative = f" ({100 * grown / was:+.1f}%)" if was and now is not None else ""
    return f"{sign}{measure.say(abs(grown))}{relative}"


def _said(value: int | None, measure: Measure) -> str:
    return "-" if value is None else measure.say(value)


def _line_cells(was: int | None, now: int | None, measure: Measure) -> list[Html]:
    kind = measure.kind(was, now)
    return [
        html('<td class="number">{value}</td>', value=_said(was, measure)),
        html('<td class="number">{value}</td>', value=_said(now, measure)),
        html(
            '<td class="number {kind}" title="{word}">{change}</td>',
            kind=kind,
            word=measure.words[kind],
            change=_change(was, now, measure),
        ),
    ]


def _table(
    names: list[str],
    old: Mapping[str, int],
    new: Mapping[str, int],
    changes: Mapping[str, str],
    files: SourceFiles,
    measure: Measure,
    labels: tuple[str, str],
) -> Html:
    ranked = sorted(
        names,
        key=lambda n: (KINDS.index(changes[n]), -abs(new.get(n, 0) - old.get(n, 0))),
    )
    rows = [
        html(
            '<table class="sites">\n<tr><th>change</th><th>call site</th><th>before ({before})'
            "</th><th>after ({after})</th><th>difference</th></tr>",
            before=labels[0],
            after=labels[1],
        )
    ]
    for name in ranked:
        was, now = old.get(name), new.get(name)
        kind = changes[name]
        rows.append(
            html(
                '<tr data-site="{name}" data-change="{kind}"><td class="kind {kind}">{word}</td>'
                '<td class="site">{link}</td><td class="number">{was}</td>'
                '<td class="number">{now}</td><td class="number">{change}</td></tr>',
                name=name,
                kind=kind,
                word=measure.words[kind],
                link=linked(site_name(name), files.site_link(name)),
                was=_said(was, measure),
                now=_said(now, measure),
                change=_change(was, now, measure),
            )
        )
    rows.append(Html("</table>"))
    return joined(rows, "\n")


def _file_sums(
    old: Mapping[tuple[str, int], int], new: Mapping[tuple[str, int], int], measure: Measure
) -> dict[str, str]:
    sums: dict[str, list[int]] = {}
    for index, lines in enumerate((old, new)):
        for (path, _line), value in lines.items():
            sums.setdefault(path, [0, 0])[index] += value
    return {
        path: f"{measure.say(was)} -> {measure.say(now)} from its lines"
        for path, (was, now) in sums.items()
    }
