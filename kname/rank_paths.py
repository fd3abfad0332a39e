"""Each rank's own output path, so that no rank's file ever overwrites another's.

An output path (KNAME_REPORT, --json, --trace) may hold placeholders: `{rank}`, `{host}` and
`{pid}`, with `{{` and `}}` for a literal brace; a value never adds or leaves a folder (`/` and a
host of `..` are made `_`). In a job of more than one rank, a path without `{rank}` gets the tag
`rank<N>` (tagged(): the one rule for a path named beside another, which documents/owner.py
follows for a process's own file, `pid<N>`):

    prof.json -> prof.rank3.json    out/prof -> out/prof.rank3    a.b/p.tar.gz -> a.b/p.rank3.tar.gz
    prof.rank3.json -> prof.rank3.pid42.json (a tag goes after the tags before it)

A tag goes after the file name's stem, which ends at its first dot after any leading ones
(`.kname.json` -> `.kname.rank3.json`), and after the tags kname put there before it; every
suffix is kept after it; the directory part is never changed, dots in it included. Keep `{rank}`
apart from `{pid}` and digits: `{rank}{pid}` gives rank 1 of pid 23 and rank 12 of pid 3 one path.
"""

from __future__ import annotations

import os
import re

from kname.ranks import Rank, host_name

PLACEHOLDERS = ("rank", "host", "pid")
ACCEPTED = " ".join("{" + name + "}" for name in PLACEHOLDERS) + ", and {{ and }} for a brace"
# A doubled brace, a placeholder, or a lone brace (which is a problem).
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)
# The tags kname puts in a file name (tagged()): `.rank3`, `.pid4242`.
_TAG = re.compile(r"(?:rank|pid)[0-9]+")


class PathTemplateError(ValueError):
    """An output path's braces are not placeholders kname knows; the message is one line."""


def template_problem(variable: str, path: str) -> str | None:
    """Why `path`, the value of `variable`, is not a usable output path template, or None."""
    for match in _TOKEN.finditer(path):
        token = match[0]
        if token in ("{{", "}}") or match[1] in PLACEHOLDERS:
            continue
        what = f"an unknown placeholder {token!r}" if match[1] is not None else f"a lone {token!r}"
        return f"{variable}={path!r} has {what}; accepted: {ACCEPTED}"
    return None


def expand(
    path: str,
    rank: Rank,
    *,
    variable: str = "the output path",
    host: str | None = None,
    pid: int | None = None,
) -> str:
    """`path` for this process: placeholders replaced, and `.rank<N>` added in a job of more
    than one rank when `{rank}` is not in it. Raises PathTemplateError naming `variable`.

    host and pid default to this machine's and this process's, read now (after a fork too).
    """
    problem = template_problem(variable, path)
    if problem is not None:
        raise PathTemplateError(problem)
    if rank.world_size > 1 and "rank" not in _placeholders(path):
        path = tagged(path, f"rank{rank.rank}")
    values = {
        "rank": str(rank.rank),
        "host": _one_folder_name(host_name() if host is None else host),
        "pid": str(os.getpid() if pid is None else pid),
    }
    # A placeholder gives its value; {{ and }} (no name) give their first brace.
    return _TOKEN.sub(lambda match: values.get(match[1], match[0][0]), path)


def implied_folder(template: str, expanded: str) -> str | None:
    """The first folder of `expanded` (expand()'s path for `template`) that a placeholder names
    (`prof/{host}/p.json` -> `prof/node1`): kname makes it and those beneath it where missing.
    None where no folder holds a placeholder."""
    split = re.compile("|".join(re.escape(sep) for sep in _SEPARATORS)).split
    folders, expanded_folders = split(template)[:-1], split(expanded)[:-1]
    if len(folders) != len(expanded_folders):  # never: a value holds no separator
        return None
    for at, folder in enumerate(folders):
        if _placeholders(folder):
            return os.sep.join(expanded_folders[: at + 1])
    return None


def _placeholders(path: str) -> set[str]:
    return {match[1] for match in _TOKEN.finditer(path) if match[1] is not None}


def tagged(path: str, tag: str) -> str:
    """`path` with `.<tag>` in its file name, after the stem and the tags kname put there
    before (`p.rank3.tar.gz`, tag `pid42` -> `p.rank3.pid42.tar.gz`); its folder unchanged."""
    cut = max(path.rfind(sep) for sep in _SEPARATORS) + 1
    directory, name = path[:cut], path[cut:]
    body = name.lstrip(".")
    parts = body.split(".")
    # The stem, then kname's earlier tags (`.rank3` before `.pid42`), then the suffixes.
    kept = 1
    while kept < len(parts) and _TAG.fullmatch(parts[kept]):
        kept += 1
    head, suffixes = ".".join(parts[:kept]), "".join("." + part for part in parts[kept:])
    return f"{directory}{name[: len(name) - len(body)]}{head}.{tag}{suffixes}"


def _one_folder_name(value: str) -> str:
    """A placeholder's value that can neither add a folder to a path nor leave one: separators
    become `_`, and so does a value of dots alone (`..`) or none."""
    for sep in _SEPARATORS:
        value = value.replace(sep, "_")
    return "_" * max(len(value), 1) if value.strip(".") == "" else value
