"""The source views: each file a page's sites point at, line by line, its numbers beside each.

As `coverage html` shows a file: every kept line with its number (a link to itself), the lines
of call sites marked, their numbers in columns beside the source. Lines a site points at whose
source was not kept (an older document, a file over the cap) are shown by number alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kname.documents.pages.layout import Html, View, code, html, joined
from kname.documents.sources import SOURCES, Frame, chain, lines_of

CODE = "source"  # in a view's headers: where the source column goes

STYLE = """
table.source { border-collapse: collapse; font: 12.5px/1.45 ui-monospace, monospace; }
table.source td, table.source th { border: 0; padding: 0 0.6em; }
table.source tr:target { outline: 2px solid #1a4f8b; }
table.source td.line a { color: #888; }
table.source tr.site td.line a { color: #1a4f8b; font-weight: bold; }
table.source td.code { white-space: pre-wrap; overflow-wrap: anywhere; tab-size: 4;
                       width: 100%; }
table.source tr.site td.code { background: #fff8e6; }
table.source tr.gap td { color: #999; padding: 0.3em 0.6em; }
table.source td.kernels { white-space: nowrap; color: #555; max-width: 16em; overflow: hidden;
                          text-overflow: ellipsis; }
"""


class SourceFiles:
    """The files a page's sites point at: their views' anchors, and each site's chain."""

    def __init__(self, names: Iterable[str], documents: Iterable[Mapping[str, Any]]) -> None:
        """`names` in the order their files are listed; the first document keeping a line's
        source gives it."""
        self.lines: dict[str, dict[int, str]] = {}
        for document in documents:
            for path, spans in document.get(SOURCES, {}).items():
                kept = self.lines.setdefault(path, {})
                for number, line in lines_of(spans).items():
                    kept.setdefault(number, line)
        self.chains: dict[str, list[Frame]] = {}
        self.ids: dict[str, str] = {}
        self.pointed: dict[str, set[int]] = {}  # the lines names point at, by file
        for name in names:
            frames = self.chains.setdefault(name, chain(name, self.lines))
            for frame in frames:
                if frame.path:
                    self.ids.setdefault(frame.path, f"f{len(self.ids) + 1}")
                    self.pointed.setdefault(frame.path, set()).add(frame.line)

    def anchor(self, path: str, line: int) -> str:
        """The id of a line's row in its file's view."""
        return f"{self.ids[path]}-L{line}"

    def link(self, frame: Frame) -> str | None:
        """`#anchor` of the line `frame` points at, or None."""
        return f"#{self.anchor(frame.path, frame.line)}" if frame.path else None

    def site_link(self, name: str) -> str | None:
        """`#anchor` of the line that site `name` launched from, or None."""
        return self.link(self.chains[name][0])


def linked(markup: Html, href: str | None) -> Html:
    """`markup` in a link to `href` (as it was when there is none)."""
    return html('<a href="{href}">{markup}</a>', href=href, markup=markup) if href else markup


def files_view(files: SourceFiles, summary: Mapping[str, str]) -> View:
    """The index of the files, each a link to its view, with its line of text."""
    rows = joined(
        (
            html(
                '<tr><td class="site"><a href="#{id}">{path}</a></td><td>{summary}</td></tr>',
                id=files.ids[path],
                path=path,
                summary=summary.get(path, ""),
            )
            for path in files.ids
        ),
        "\n",
    )
    body = html('<h2>files</h2>\n<table class="files">\n{rows}\n</table>', rows=rows)
    return View("files", "files", body)


def file_views(
    files: SourceFiles,
    rows: Mapping[tuple[str, int], Sequence[Html]],
    headers: Sequence[str],
    summary: Mapping[str, str],
) -> list[View]:
    """One view per file: `rows` {(path, line): its `<td>`s} beside its source; `headers` name
    the columns after the line number, CODE among them; `summary` is each file's line of text."""
    return [
        View(
            files.ids[path],
            None,
            html(
                '<h2>{path}</h2>\n<p class="summary">{summary}</p>\n{table}',
                path=path,
                summary=summary.get(path, ""),
                table=_file_table(files, path, rows, headers),
            ),
        )
        for path in files.ids
    ]


def _file_table(
    files: SourceFiles,
    path: str,
    rows: Mapping[tuple[str, int], Sequence[Html]],
    headers: Sequence[str],
) -> Html:
    kept = files.lines.get(path, {})
    marked = files.pointed[path]
    at_code = list(headers).index(CODE)
    empty = [Html("<td></td>")] * (len(headers) - 1)
    columns = len(headers)
    parts = [
        Html('<table class="source">\n<tr><th>line</th>\n'),
        joined(html("<th>{header}</th>", header=header) for header in headers),
        Html("</tr>"),
    ]
    if not kept:
        parts.append(
            html(
                '\n<tr class="gap"><td></td><td colspan="{columns}">the source of this file '
                "was not kept in the document: its lines are shown by number</td></tr>",
                columns=columns,
            )
        )
    previous = 0
    for line in sorted(kept.keys() | marked):
        if previous and line > previous + 1:
            parts.append(
                html(
                    '\n<tr class="gap"><td>⋮</td><td colspan="{columns}"></td></tr>',
                    columns=columns,
                )
            )
        previous = line
        shown = list(rows.get((path, line), empty))
        shown.insert(at_code, html('<td class="code">{code}</td>', code=code(kept.get(line, ""))))
        parts.append(
            html(
                '\n<tr id="{anchor}"{site}><td class="line number">'
                '<a href="#{anchor}">{line}</a></td>{cells}</tr>',
                anchor=files.anchor(path, line),
                site=Html(' class="site"' if line in marked else ""),
                line=line,
                cells=joined(shown),
            )
        )
    parts.append(Html("\n</table>"))
    return joined(parts)
