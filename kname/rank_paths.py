"""Each rank's own output path, so that no rank's file ever overwrites another's.

An output path (KNAME_REPORT, --json, --trace) may hold placeholders: `{rank}`, `{host}` and
`{pid}`, with `{{` and `}}` for a literal brace. In a job of more than one rank, a path without
`{rank}` gets `.rank<N>` after its file name's stem, before all of its suffixes:

    prof.json -> prof.rank3.json    out/prof -> out/prof.rank3    a.b/p.tar.gz -> a.b/p.rank3.tar.gz

The stem ends at the file name's first dot after any leading ones (`.kname.json` ->
`.kname.rank3.json`); the directory part is never changed, dots in it included. Keep `{rank}`
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
        path = _with_rank_suffix(path, rank.rank)
    values = {
        "rank": str(rank.rank),
        "host": _without_separators(host_name() if host is None else host),
        "pid": str(os.getpid() if pid is None else pid),
    }
    # A placeholder gives its value; {{ and }} (no name) give their first brace.
    return _TOKEN.sub(lambda match: values.get(match[1], match[0][0]), path)


def _placeholders(path: str) -> set[str]:
    return {match[1] for match in _TOKEN.finditer(path) if match[1] is not None}


def _with_rank_suffix(path: str, rank: int) -> str:
    """`path` with `.rank<rank>` after its file name's stem (see the module's docstring)."""
    cut = max(path.rfind(sep) for sep in _SEPARATORS) + 1
    directory, name = path[:cut], path[cut:]
    body = name.lstrip(".")
    leading_dots = name[: len(name) - len(body)]
    dot = body.find(".")
    stem, suffixes = (body, "") if dot < 0 else (body[:dot], body[dot:])
    return f"{directory}{leading_dots}{stem}.rank{rank}{suffixes}"


def _without_separators(host: str) -> str:
    """A host name that cannot add a directory to a path."""
    for sep in _SEPARATORS:
        host = host.replace(sep, "_")
    return host
