"""The page every saved document renders to: one self-contained HTML file of several views.

One file, not a directory: KNAME_PROFILE_HTML and `--html` name one path, written atomically,
that opens from a CI artifact or an e-mail. No script, no style sheet, font or image from
elsewhere, no network. Each view is a `<section class="view">`; a link to a view, or to a line
inside one, shows that view alone (CSS `:target` and `:has`), the first view when none is
linked. A browser without `:has` shows every view, one under the other, and the links still go
to their places.

Every name, path and source line is data from elsewhere: it reaches the page only through
`text` (or `code`), which escapes HTML and writes control characters and lone surrogates as
Python escapes, so a page is always valid UTF-8.
"""

from __future__ import annotations

from collections.abc import Sequence
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
:target { scroll-margin-top: 3em; }
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
"""


@dataclass(frozen=True)
class View:
    """One view of the page: its anchor, its name in the navigation bar (None: not listed), and
    its HTML."""

    id: str
    label: str | None
    body: str


def render(title: str, summary: str, views: Sequence[View], style: str = "") -> str:
    """The whole page: a navigation bar of the listed views, the title, then every view (the
    first shown when nothing is linked). `summary` is text."""
    links = " ".join(
        f'<a href="#{view.id}">{text(view.label)}</a>' for view in views if view.label is not None
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            '<head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{text(title)}</title>",
            f"<style>{STYLE}{style}</style></head>",
            "<body>",
            f"<nav>{links}</nav>",
            f"<h1>{text(title)}</h1>",
            f'<p class="summary">{text(summary)}</p>',
            *(f'<section class="view" id="{view.id}">\n{view.body}\n</section>' for view in views),
            "</body></html>\n",
        ]
    )


def text(value: object) -> str:
    """`value` as HTML text or an attribute's value: escaped, and printable (text.printable)."""
    return escape(printable(value))


def site_name(name: str) -> str:
    """A call-site name as HTML: each frame of a call chain kept on one line, the chain breaking
    between frames where the page is narrow."""
    return f" {text(CALLER_SEPARATOR.strip())} ".join(
        f'<span class="call">{text(part)}</span>' for part in name.split(CALLER_SEPARATOR)
    )


def code(line: str) -> str:
    """A line of source as HTML text: as `text`, but tabs kept (the page shows them in `pre`)."""
    return "\t".join(text(part) for part in line.split("\t"))


def heat(share: float) -> str:
    """The heat class of a share of the page's total: "" for none, else "h1" to "h6"."""
    if share <= 0:
        return ""
    return f"h{sum(share >= at for at in HEAT_FROM)}"


def percent(part: float, whole: float) -> str:
    """`12.3%` of `whole`, or `-` when there is nothing."""
    return f"{100 * part / whole:.1f}%" if whole else "-"
