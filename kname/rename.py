"""KNAME_MODE=rename: each call site launches its own compile of the kernel, whose entry symbol is
the site's identifier (`axpy__mymodel_solver_py_L42`), so every profiler and tool shows it.

The cost is one compile per call site and argument types, paid at the site's first launch. What
each library supports lives in its unit (`kname.targets.<lib>.rename`); this module holds what
they share: one entry name per call site, never given to two.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from kname._locks import new_lock
from kname.naming import MAX_IDENTIFIER, sha1_hex

_lock = new_lock()
# entry name -> the (kernel, call-site name) holding it. Never shrinks: a name stays its
# site's for the whole process, and each entry stands for a compile, far costlier than its bytes.
_holders: dict[str, tuple[str, str]] = {}


def entry_name(identifier: str, holder: tuple[str, str], taken: dict | None = None) -> str:
    """`identifier` for `holder` (kernel, call-site name), or a variant no other holder has.

    Two sites can share an identifier: `a/b.py` and `a_b.py` both give `a_b_py`. The first keeps
    it; the next gets a suffix from a digest of its own name, so it is the same in every run.
    """
    taken = _holders if taken is None else taken
    digest = sha1_hex("\0".join(holder))[:8]
    with _lock:
        for candidate in _candidates(identifier, digest):
            if taken.setdefault(candidate, holder) == holder:
                return candidate
    raise AssertionError("unreachable: the candidates never run out")


def _candidates(identifier: str, digest: str) -> Iterator[str]:
    yield identifier
    for n in itertools.count():
        suffix = f"_{digest}" if n == 0 else f"_{digest}_{n}"
        yield identifier[: MAX_IDENTIFIER - len(suffix)] + suffix
