"""Which modules can be imported here, found without running any of them.

For the messages about a module that never came (a KNAME_TARGETS entry whose module was never
imported, a KNAME_SKIP prefix that matched none, `kname doctor`'s targets), with the nearest name
that can be imported. importlib's find_spec imports a dotted name's parent packages, running the
user's code; here a top-level name is asked of the finders on sys.meta_path, which run nothing,
and each level beneath is looked for in its package's directories by the path finder.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import pkgutil
import sys
from collections.abc import Callable, Collection, Sequence
from importlib.machinery import ModuleSpec

# How alike a name must be to an importable one to be offered as what was meant: one letter off
# in a name of five or more letters (`physic` for `physics`: 0.92), or two letters swapped.
LIKENESS = 0.8


def find(name: str, first: Sequence[str] = ()) -> ModuleSpec | None:
    """The spec module `name` would be imported with, or None; the directories `first` are
    looked in before sys.path (for the program's directory). Runs no module's code."""
    spec: ModuleSpec | None = None
    parts = name.split(".")
    for depth in range(len(parts)):
        spec = _find_part(".".join(parts[: depth + 1]), spec, first)
        if spec is None:
            return None
    return spec


def nearest(name: str, first: Sequence[str] = ()) -> str | None:
    """The importable module most like `name` (what a misspelling meant), or None."""
    specs: dict[str, ModuleSpec | None] = {}

    def children(parent: str) -> Collection[str]:
        if not parent:
            return _top_level_names(first)
        if parent not in specs:
            specs[parent] = find(parent, first)
        return _submodule_names(parent, specs[parent])

    return nearest_name(name, children)


def nearest_name(name: str, children: Callable[[str], Collection[str]]) -> str | None:
    """The dotted name most like `name`, part by part, whose every part is one of
    `children(the parts before it)` (`children("")`: the top-level names); None if a part has
    nothing alike. `name` itself when it is there."""
    found = ""
    for part in name.split("."):
        known = children(found)
        if part not in known:
            score, alike = max(((likeness(part, k), k) for k in known), default=(0.0, ""))
            if score < LIKENESS:
                return None
            part = alike
        found = f"{found}.{part}" if found else part
    return found


def likeness(typed: str, known: str) -> float:
    """How alike two names are, 0 to 1: the better of difflib's ratio (which sees two letters
    swapped) and one less the edits between them over the longer length (which sees one letter
    off where difflib's greedy blocks do not: `vavaa` for `vaaaa` is 0.6 to difflib)."""
    longer = max(len(typed), len(known)) or 1
    return max(
        difflib.SequenceMatcher(None, typed, known).ratio(), 1 - _edits(typed, known) / longer
    )


def _edits(a: str, b: str) -> int:
    """Levenshtein's distance: the letters to insert, delete or change to make `a` into `b`."""
    previous = list(range(len(b) + 1))
    for i, letter in enumerate(a, 1):
        current = [i]
        for j, other in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (letter != other))
            )
        previous = current
    return previous[-1]


def _find_part(name: str, parent: ModuleSpec | None, first: Sequence[str]) -> ModuleSpec | None:
    """The spec of `name`, one level below `parent`'s (None: `name` is top-level)."""
    imported = sys.modules.get(name)
    if imported is not None:
        return getattr(imported, "__spec__", None) or ModuleSpec(name, None)
    try:
        if parent is None:
            # A top-level name: the finders run nothing (find_spec imports parents only). The
            # directories `first` come first, as sys.path[0]; a namespace package found there
            # yields, as in an import, to a module of that name elsewhere.
            paths = [*first, *sys.path]
            found = importlib.machinery.PathFinder.find_spec(name, paths) if first else None
            if found is not None and found.origin is not None:
                return found
            return importlib.util.find_spec(name) or found
        locations = _locations(parent)
        if locations is None:
            return None  # a module, not a package: nothing beneath it
        return importlib.machinery.PathFinder.find_spec(name, locations)
    except (ImportError, ValueError, AttributeError):
        return None


def _locations(spec: ModuleSpec) -> list[str] | None:
    """Where a package's submodules are: its imported __path__ (a package may change it), else
    its spec's."""
    module = sys.modules.get(spec.name)
    path = getattr(module, "__path__", None) if module is not None else None
    if path is None:
        path = spec.submodule_search_locations
    return None if path is None else list(path)


def _top_level_names(first: Sequence[str]) -> set[str]:
    names = {info.name for info in pkgutil.iter_modules([*first, *sys.path])}
    names.update(sys.builtin_module_names)
    names.update(module.partition(".")[0] for module in list(sys.modules))
    return names


def _submodule_names(parent: str, spec: ModuleSpec | None) -> set[str]:
    locations = _locations(spec) if spec is not None else None
    names = {info.name for info in pkgutil.iter_modules(locations or [])}
    prefix = parent + "."
    imported = [m for m in list(sys.modules) if m.startswith(prefix)]
    names.update(m[len(prefix) :].partition(".")[0] for m in imported)
    return names
