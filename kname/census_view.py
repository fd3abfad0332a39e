"""A census document to look at and ask about: text in a terminal, an HTML table in Jupyter.

The text is the census table of `kname report` (documents/tables.py: `render_census_table`,
names escaped and cut to a width) without its first-seen column; `render_html` is the same
table in HTML, names whole. Both take any census document of schema 1 (`kname.documents.schema`
module docstring); a site that carries `gpu_ns` (GPU nanoseconds, from a profiler) gets a "GPU
time" column.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from kname.documents.tables import (
    census_rows,
    heading,
    name_cell,
    ranked_sites,
    render_census_table,
)

NAMES = 3  # the first columns (call site, kernel, library) are text; the rest are numbers


class Census:
    """A census document with a title, shown as a table and asked with `launches(...)`."""

    def __init__(self, document: Mapping[str, Any], title: str = "kname census") -> None:
        self.document = document
        self.title = title

    @property
    def sites(self) -> list[dict[str, Any]]:
        """The document's sites, in first-seen order."""
        return list(self.document["sites"])

    @property
    def total(self) -> int:
        """Launches counted, from every call site."""
        return self.document["total_launches"]

    def launches(self, name: str | None = None, *, kernel: str | None = None) -> int:
        """Launches from the call sites that `name` and `kernel` pick (both optional).

        `name` picks a site if it is the site's whole name or its first words: "step" picks
        `step test_solver.py:12`, and so does "step test_solver.py:12". `kernel` must equal the
        kernel's name.
        """
        return sum(
            site["launches"] for site in self.document["sites"] if _picks(site, name, kernel)
        )

    def names(self) -> dict[str, int]:
        """{call-site name: launches}, in first-seen order."""
        counts: dict[str, int] = {}
        for site in self.document["sites"]:
            counts[site["name"]] = counts.get(site["name"], 0) + site["launches"]
        return counts

    def __str__(self) -> str:
        return render_census_table(self.document, title=self.title, first_seen=False)

    def __repr__(self) -> str:
        sites = self.document["sites"]
        shown = ", ".join(
            f"{name_cell(site['name'])} [{name_cell(site['kernel'] or '?')}] {site['launches']}"
            for site in (sites[index] for index in ranked_sites(self.document, "launches")[:5])
        )
        more = ", ..." if len(self.document["sites"]) > 5 else ""
        title = heading(self.document, title=self.title)
        return f"<{title}{': ' if shown else ''}{shown}{more}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self).rstrip("\n"))  # IPython's plain-text display: the table

    def _repr_html_(self) -> str:
        return render_html(self.document, self.title)


def render_html(document: Mapping[str, Any], title: str = "kname census") -> str:
    """The census as an HTML table under its heading (what Jupyter shows)."""
    header, *rows = census_rows(document, str, first_seen=False)

    def cells(row: tuple[str, ...], tag: str) -> str:
        return "".join(
            f'<{tag} style="text-align:{"left" if i < NAMES else "right"}">'
            f"{html.escape(cell)}</{tag}>"
            for i, cell in enumerate(row)
        )

    body = "".join(f"<tr>{cells(row, 'td')}</tr>" for row in rows)
    table = (
        f"<table><thead><tr>{cells(header, 'th')}</tr></thead><tbody>{body}</tbody></table>"
        if body
        else ""
    )
    return (
        f'<div class="kname-census"><p><strong>{html.escape(heading(document, title=title))}'
        f"</strong></p>{table}</div>"
    )


def _picks(site: Mapping[str, Any], name: str | None, kernel: str | None) -> bool:
    site_name = site["name"]
    if name is not None and site_name != name and not site_name.startswith(name + " "):
        return False
    return kernel is None or site["kernel"] == kernel
