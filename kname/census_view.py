"""A census document to look at and ask about: text in a terminal, an HTML table in Jupyter.

`render_text` and `render_html` take any census document of schema 1 (`kname.documents.schema`
module docstring). A site that carries `gpu_ns` (GPU nanoseconds, from a profiler) gets a "GPU time"
column; without it the column is left out.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from kname.documents.text import columns, count_of, format_duration

HEADER = ("call site", "kernel", "library", "launches", "share")
RIGHT_ALIGNED = (3, 4, 5)


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
        return render_text(self.document, self.title)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{site['name']} [{site['kernel'] or '?'}] {site['launches']}"
            for site in _by_launches(self.document)[:5]
        )
        more = ", ..." if len(self.document["sites"]) > 5 else ""
        return f"<{_heading(self.document, self.title)}{': ' if shown else ''}{shown}{more}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self).rstrip("\n"))  # IPython's plain-text display: the table

    def _repr_html_(self) -> str:
        return render_html(self.document, self.title)


def render_text(document: Mapping[str, Any], title: str = "kname census") -> str:
    """The census as an aligned table, most launches first, under a one-line heading."""
    heading = _heading(document, title)
    rows = _rows(document)
    if not rows:
        return heading + "\n"
    return heading + "\n" + columns([_header(document), *rows], RIGHT_ALIGNED)


def render_html(document: Mapping[str, Any], title: str = "kname census") -> str:
    """The census as an HTML table under its heading (what Jupyter shows)."""
    header = _header(document)

    def cells(row: tuple[str, ...], tag: str) -> str:
        return "".join(
            f'<{tag} style="text-align:{"right" if i in RIGHT_ALIGNED else "left"}">'
            f"{html.escape(cell)}</{tag}>"
            for i, cell in enumerate(row)
        )

    body = "".join(f"<tr>{cells(row, 'td')}</tr>" for row in _rows(document))
    table = (
        f"<table><thead><tr>{cells(header, 'th')}</tr></thead><tbody>{body}</tbody></table>"
        if body
        else ""
    )
    return (
        f'<div class="kname-census"><p><strong>{html.escape(_heading(document, title))}'
        f"</strong></p>{table}</div>"
    )


def _picks(site: Mapping[str, Any], name: str | None, kernel: str | None) -> bool:
    site_name = site["name"]
    if name is not None and site_name != name and not site_name.startswith(name + " "):
        return False
    return kernel is None or site["kernel"] == kernel


def _has_gpu_time(document: Mapping[str, Any]) -> bool:
    return any("gpu_ns" in site for site in document["sites"])


def _header(document: Mapping[str, Any]) -> tuple[str, ...]:
    return (*HEADER, "GPU time") if _has_gpu_time(document) else HEADER


def _by_launches(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return sorted(document["sites"], key=lambda s: (-s["launches"], s["order"]))


def _rows(document: Mapping[str, Any]) -> list[tuple[str, ...]]:
    gpu = _has_gpu_time(document)
    rows = []
    for site in _by_launches(document):
        row = (
            site["name"], site["kernel"] or "?", site["lib"] or "?", str(site["launches"]),
            f"{100 * site['share']:.1f}%",
        )  # fmt: skip
        if gpu:
            row += (format_duration(site["gpu_ns"]) if "gpu_ns" in site else "-",)
        rows.append(row)
    return rows


def _heading(document: Mapping[str, Any], title: str) -> str:
    launches = count_of(document["total_launches"], "launch")
    return f"{title}: {launches} from {count_of(len(document['sites']), 'call site')}"
