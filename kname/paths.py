"""Short, machine-independent display paths for Python source files.

``short_path(code.co_filename, roots)`` applies these rules, first match wins:

1. Pseudo file names (``<stdin>``, ``<string>``, ``<frozen ...>``,
   ``<ipython-input-...>``: anything ``<...>``) come back unchanged.
2. The name is normalised (see :func:`normalise_components`): ``\\`` counts
   as ``/``; a drive (``C:``), a UNC ``\\\\server\\share`` or a device prefix
   (``\\\\?\\``, ``\\\\.\\``) is dropped; empty and ``.`` components go; ``..``
   pops one component (none above the top).  The file system is never touched.
3. A Jupyter/IPython cell file (``.../ipykernel_<pid>/<n>.py``) gives
   ``<cell n>``.
4. Inside an archive (a ``.zip``, ``.egg``, ``.whl`` or ``.pyz`` component
   that is not the last one): the path inside the innermost archive.
5. A relative name (no leading separator, drive or UNC prefix) holds no
   machine-specific prefix: it comes back normalised, whole.
6. The path relative to the longest of ``roots`` that contains the file
   (component-wise after the same normalisation; a root equal to the file
   does not count; relative roots never match).
7. The components after the last ``site-packages``/``dist-packages``, if any.
8. The components after the last ``src``, if any.
9. The last two components (or the only one).

Marker components (``site-packages``, ``dist-packages``, ``src``, archive
suffixes) are matched case-insensitively; roots are compared exactly.

The result always uses ``/`` (a pseudo name excepted, which is returned as
given), is never empty (``"<unknown>"`` when nothing usable is left), and
``short_path`` never raises for any ``str``.  Rule 5 makes it idempotent:
every result of rules 4-9 is a relative name that rule 5 returns unchanged,
so ``short_path(short_path(f, roots), roots) == short_path(f, roots)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

__all__ = ["UNKNOWN", "normalise_components", "short_path"]

#: Result for a name with no usable component (empty, blank, only separators).
UNKNOWN = "<unknown>"

_INSTALL_DIRS = frozenset({"site-packages", "dist-packages"})
_SRC_DIRS = frozenset({"src"})
_ARCHIVE_SUFFIXES = (".zip", ".egg", ".whl", ".pyz")
_CELL_DIR = re.compile(r"ipykernel_[0-9]+")
_CELL_FILE = re.compile(r"([0-9A-Za-z_]+)\.py")


def _is_drive(part: str) -> bool:
    """True for a bare drive component such as ``C:``."""
    return len(part) == 2 and part[1] == ":" and part[0].isascii() and part[0].isalpha()


def _parse(filename: str) -> tuple[bool, list[str]]:
    """Return (anchored, components): anchored is True for an absolute name."""
    s = filename.replace("\\", "/")
    if filename.startswith("\\\\"):
        # UNC \\server\share\... or device \\?\C:\..., \\?\UNC\server\share\...
        parts = s[2:].split("/")
        if parts[0] in ("?", "."):
            parts = parts[1:]
            if parts and parts[0].upper() == "UNC":
                parts = parts[3:]
        else:
            parts = parts[2:]
        anchored = True
    else:
        if len(s) >= 2 and _is_drive(s[:2]) and (len(s) == 2 or s[2] == "/"):
            s = s[2:]
            anchored = True
        else:
            anchored = s.startswith("/")
        parts = s.split("/")
    comps: list[str] = []
    for part in parts:
        if part == "..":
            if comps:
                comps.pop()
        elif part and part != "." and not (len(part) == 2 and _is_drive(part)):
            comps.append(part)
    return anchored, comps


def normalise_components(filename: str) -> list[str]:
    """Split a file name into clean components, lexically (rule 2 above).

    Backslashes are separators; drive, UNC and device prefixes, empty and ``.``
    components and bare drive components are dropped; ``..`` pops one.
    """
    return _parse(filename)[1]


def _after_last(comps: list[str], names: frozenset[str]) -> list[str] | None:
    """Components after the last one whose lower-case form is in names, if any."""
    for i in range(len(comps) - 1, -1, -1):
        if comps[i].lower() in names:
            return comps[i + 1 :] or None
    return None


def _short_components(filename: str, roots: Sequence[str]) -> list[str] | str:
    """Rules 2-9: the kept components, or a finished label such as ``<cell 3>``."""
    anchored, comps = _parse(filename)
    if len(comps) >= 2 and _CELL_DIR.fullmatch(comps[-2]):
        cell = _CELL_FILE.fullmatch(comps[-1])
        if cell:
            return f"<cell {cell.group(1)}>"
    for i in range(len(comps) - 2, -1, -1):
        if comps[i].lower().endswith(_ARCHIVE_SUFFIXES):
            return comps[i + 1 :]
    if not anchored:
        return comps
    best = -1
    for root_comps in _anchored_roots((roots,) if isinstance(roots, str) else tuple(roots)):
        n = len(root_comps)
        if best < n < len(comps) and comps[:n] == root_comps:
            best = n
    if best >= 0:
        return comps[best:]
    tail = _after_last(comps, _INSTALL_DIRS) or _after_last(comps, _SRC_DIRS)
    return tail or comps[-2:]


@functools.lru_cache(maxsize=16)
def _anchored_roots(roots: tuple[str, ...]) -> tuple[list[str], ...]:
    """The components of each absolute root (relative roots never match), parsed once per set of
    roots: a new file's path is parsed alone, not with every root again."""
    parsed = (_parse(root) for root in roots)
    return tuple(comps for anchored, comps in parsed if anchored)


def short_path(filename: str, roots: Sequence[str] = ()) -> str:
    """Short display path for ``filename`` (a ``co_filename``), same on every machine.

    ``roots`` are project directories to show paths relative to; see the module doc.
    """
    if filename.startswith("<") and filename.endswith(">"):
        return filename
    kept = _short_components(filename, roots)
    if isinstance(kept, str):
        return kept
    result = "/".join(kept)
    return result if result.strip() else UNKNOWN
