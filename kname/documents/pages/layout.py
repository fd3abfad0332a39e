"""The page every saved document renders to: one self-contained HTML file of several views.

One file, not a directory: KNAME_PROFILE_HTML and `--html` name one path, written atomically,
that opens from a CI artifact or an e-mail. No script, no style sheet, font or image from
elsewhere, no network. Each view is a `<section class="view">`; a link to a view, or to a line
inside one, shows that view alone (CSS `:target` and `:has`), the first view when none is
linked. A browser without `:has` shows every view, one under the other, and the links still go
to their places.

Escaping is the default. Every value reaches the page through `html`, a template whose fields
are escaped (`text`: HTML's special characters, quotes included, and control characters and
lone surrogates written as Python escapes, so a page is always valid UTF-8), names, numbers and
paths alike, whatever validated them. Only `Html`, markup this package made, is written as it
is; no page module writes markup with an f-string (a test reads them all to hold it so).
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

from kname.documents.text import printable
from kname.naming import CALLER_SEPARATOR

# Shares of the page's total from which a line takes each heat level (h1 ... h6): any share
# above 0 is h1.
HEAT_FROM = (0.0, 0.01, 0.03, 0.1, 0.25, 0.5)

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 2em 2em; color: #222; }
nav { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ddd;
      padding: 0.6em 0; z-index: 1; }
nav a { margin-right: 1.2em; }
h1 { font-size: 1.4em; margin: 0.6em 0 0.2em; }
h2 { font-size: 1.15em; margin: 1em 0 0.2em; font-family: ui-monospace, monospace; }
a { color: #1a4f8b; text-decoration: none; }
a:hover { text-decoration: underline; }
.summary { color: #555; margin-top: 0; }
.warning { color: #a00; font-weight: bold; }
:target { scroll-margin-top: 3.5rem; }  /* below the sticky bar, whatever the font */
body:not(:has(:target)) .view:not(:first-of-type),
body:has(:target) .view:not(:target):not(:has(:target)) { display: none; }
table { border-collapse: collapse; margin-top: 1em; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #eee; text-align: left;
         vertical-align: top; }
th { white-space: nowrap; border-bottom-color: #ccc; }
td.number { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.site { font-family: ui-monospace, monospace; }
td.site .call { white-space: nowrap; }
.h1 { background: #fff3d1; } .h2 { background: #ffe09a; } .h3 { background: #ffc266; }
.h4 { background: #ff9a4d; } .h5 { background: #f0663a; color: #fff; }
.h6 { background: #c8321f; color: #fff; }
.h5 a, .h6 a { color: #fff; }
@media (max-width: 900px) {
  body { margin: 0 1em 1em; }
  th, td { padding: 0.2em 0.4em; }
  th { white-space: normal; }
  td.site .call { white-space: normal; }
}
"""


@dataclass(frozen=True)
class View:
    """One view of the page: its anchor, its name in the navigation bar (None: not listed), and
    its HTML."""

    id: str
    label: str | None
    body: Html


class Html(str):
    """Markup this package made: `html` writes it as it is, where it escapes any other value."""

    __slots__ = ()


EMPTY = Html("")


def html(template: str, /, **values: object) -> Html:
    """`template`, markup written in this package (never data), with each `{name}` (or
    `{name:spec}`) filled by its value in `values` escaped (`text`), unless that value is Html:
    how a page writes any value."""
    parts = []
    for literal, name, spec in _fields(template):
        parts.append(literal)
        if name is not None:
            value = values[name]
            parts.append(value if isinstance(value, Html) else text(format(value, spec)))
    return Html("".join(parts))


@functools.cache
def _fields(template: str) -> tuple[tuple[str, str | None, str], ...]:
    """`template` parsed once (a page fills one template thousands of times): its (literal
    text, field name or None, format spec) parts."""
    return tuple(
        (literal, name, spec or "") for literal, name, spec, _ in string.Formatter().parse(template)
    )


def joined(parts: Iterable[object], separator: str = "") -> Html:
    """`parts` one after another as markup: Html as it is, anything else escaped."""
    return Html(separator.join(part if isinstance(part, Html) else text(part) for part in parts))


def render(title: str, summary: str, views: Sequence[View], style: str = "") -> str:
    """The whole page: a navigation bar of the listed views, the title, then every view (the
    first shown when nothing is linked). `summary` is text; `style` is CSS written here."""
    links = joined(
        (
            html('<a href="#{id}">{label}</a>', id=view.id, label=view.label)
            for view in views
            if view.label is not None
        ),
        " ",
    )
    sections = (
        html('<section class="view" id="{id}">\n{body}\n</section>', id=view.id, body=view.body)
        for view in views
    )
    head = html(
        '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>{title}</title>\n<style>{style}</style></head>\n<body>\n<nav>{links}</nav>\n"
        '<h1>{title}</h1>\n<p class="summary">{summary}</p>',
        title=title,
        style=Html(STYLE + style),
        links=links,
        summary=summary,
    )
    return joined([head, *sections, Html("</body></html>\n")], "\n")


def text(value: object) -> Html:
    """`value` as HTML text or an attribute's value: escaped, and printable (text.printable)."""
    return Html(escape(printable(value)))


def site_name(name: str) -> Html:
    """A call-site name as HTML: each frame of a call chain kept on one line, the chain breaking
    between frames where the page is narrow."""
    return joined(
        (
            html('<span class="call">{part}</span>', part=part)
            for part in name.split(CALLER_SEPARATOR)
        ),
        html(" {separator} ", separator=CALLER_SEPARATOR.strip()),
    )


def code(line: str) -> Html:
    """A line of source as HTML text: as `text`, but tabs kept (the page shows them in `pre`)."""
    return joined(line.split("\t"), "\t")


def heat(share: float) -> str:
    """The heat class of a share of the page's total: "" for none, else "h1" to "h6"."""
    if share <= 0:
        return ""
    return f"h{sum(share >= at for at in HEAT_FROM)}"


def percent(part: float, whole: float) -> str:
    """`12.3%` of `whole`, or `-` when there is nothing."""
    return f"{100 * part / whole:.1f}%" if whole else "-"
