"""The call tree of a page's sites, as an icicle: callers above what they call, each as wide as
its share of the total.

With KNAME_DEPTH above 1 a site's name is its call chain, the site first, then its callers
(`inner app.py:12 < outer app.py:30`). Read outermost first, the chains make a tree: a frame's
value is the sum over the sites beneath it. Plain HTML and CSS: each frame is a box whose width
is its share of its parent's; a frame narrower than MIN_SHARE of the total is left out (the
view says how many were).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kname.documents.pages.layout import EMPTY, Html, View, heat, html, joined, percent
from kname.documents.pages.source import SourceFiles
from kname.documents.sources import Frame

MIN_SHARE = 0.002

STYLE = """
.icicle { font: 12px/1.2 ui-monospace, monospace; margin-top: 1em; }
.icicle .kids { display: flex; }
.icicle .node { min-width: 0; box-sizing: border-box; }
.icicle .frame { display: block; overflow: hidden; white-space: nowrap; text-overflow: ellipsis;
                 padding: 3px 4px; border: 1px solid #fff; }
:where(.icicle .frame) { background: #e8edf3; }
.icicle a.frame { color: #222; }
.icicle a.frame.h5, .icicle a.frame.h6 { color: #fff; }
"""


@dataclass
class Node:
    """One frame of the tree: its line, its value (its sites' and its callees'), its callees."""

    frame: Frame
    value: int = 0
    kids: dict[str, Node] = field(default_factory=dict)


def has_callers(files: SourceFiles) -> bool:
    """Whether any site's name carries callers (KNAME_DEPTH above 1)."""
    return any(len(frames) > 1 for frames in files.chains.values())


def build(values: Mapping[str, int], files: SourceFiles) -> dict[str, Node]:
    """The roots of the tree of `values` {site name: value}, outermost callers first."""
    roots: dict[str, Node] = {}
    chains = grafted({name: files.chains[name] for name in values})
    for name, value in values.items():
        level = roots
        for frame in reversed(chains[name]):
            node = level.setdefault(frame.label, Node(frame))
            node.value += value
            level = node.kids
    return roots


def grafted(chains: Mapping[str, list[Frame]]) -> dict[str, list[Frame]]:
    """Each chain (its site first) with the callers that other chains show its outermost frame
    has, where they show one way to it: KNAME_DEPTH cuts every name at the same number of
    frames, so a site called from deeper down loses callers that a shallower site keeps, and
    would stand as a root beside its own caller."""
    outer: dict[str, set[tuple[Frame, ...]]] = {}
    for frames in chains.values():
        for at, frame in enumerate(frames[:-1]):
            outer.setdefault(frame.label, set()).add(tuple(frames[at + 1 :]))
    return {
        name: frames + _only_way(outer.get(frames[-1].label, set()))
        for name, frames in chains.items()
    }


def _only_way(paths: set[tuple[Frame, ...]]) -> list[Frame]:
    """The longest of `paths` (callers, innermost first) when every other one begins it, else
    none: a frame called from two places is left a root."""
    longest = max(paths, key=len, default=())
    return list(longest) if all(longest[: len(path)] == path for path in paths) else []


def tree_view(
    values: Mapping[str, int], files: SourceFiles, total: int, say: Callable[[int], str]
) -> View:
    """The tree's view: `say` writes a value (a duration, a count of launches)."""
    roots = build(values, files)
    boxes, left_out = _boxes(roots, sum(n.value for n in roots.values()), total, files, say)
    note = f" {left_out} frames under {100 * MIN_SHARE:g}% of the total are not drawn." * (
        left_out > 0
    )
    body = html(
        '<h2>call tree</h2>\n<p class="summary">Callers above the lines they call, each as wide '
        "as its share; a frame links to its line.{note}</p>\n"
        '<div class="icicle"><div class="kids">{boxes}</div></div>',
        note=note,
        boxes=boxes,
    )
    return View("tree", "call tree", body)


def _boxes(
    level: Mapping[str, Node],
    parent: int,
    total: int,
    files: SourceFiles,
    say: Callable[[int], str],
) -> tuple[Html, int]:
    """The HTML of `level`'s boxes (widths as shares of `parent`), and how many were left out."""
    parts, left_out = [], 0
    for node in sorted(level.values(), key=lambda n: -n.value):
        if not total or node.value < MIN_SHARE * total:
            left_out += 1 + _count(node.kids)
            continue
        kids, under = _boxes(node.kids, node.value, total, files, say)
        left_out += under
        href = files.link(node.frame)
        parts.append(
            html(
                '<div class="node" style="width:{width:.3f}%" data-value="{value}">'
                '<a class="frame {heat}"{link} title="{label}: {said} ({percent})">{label}</a>'
                '<div class="kids">{kids}</div></div>',
                width=100 * node.value / parent,
                value=node.value,
                heat=heat(node.value / total),
                link=html(' href="{href}"', href=href) if href else EMPTY,
                label=node.frame.label,
                said=say(node.value),
                percent=percent(node.value, total),
                kids=kids,
            )
        )
    return joined(parts), left_out


def _count(level: Mapping[str, Node]) -> int:
    return sum(1 + _count(node.kids) for node in level.values())
