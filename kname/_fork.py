"""A forked child starts with kname's locks free and a census of its own.

os.fork() copies each lock as it is. One held by another thread of the parent (building a call
site, saying a warning, wrapping a module) would never be released in the child, whose next new
call site, warning or import would then wait forever. The child therefore gets new locks. What
they guard is valid between any two steps of its critical sections (single dict/set operations
under the GIL), and only the forking thread lives on in the child.

The counts of launches made before the fork are the parent's, which reports them itself: the
child counts from zero, so a census it writes holds its own launches only.

Imported by install(); the handler is registered once per process, when this is first imported.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading


def after_fork_in_child() -> None:
    """New locks for kname (and for wrapt's import finder, which install() put in front of every
    import); launch counts from zero. Never raises."""
    with contextlib.suppress(Exception):
        from kname import _warnings, callsite, hooks
        from kname import nvtx as kname_nvtx

        _warnings._lock = threading.Lock()
        callsite._lock = threading.RLock()
        kname_nvtx._lock = threading.Lock()
        hooks._lock = threading.RLock()
        importer = sys.modules.get("wrapt.importer")
        if importer is not None and hooks.is_installed():
            # Its finder takes this lock on every import the child makes.
            importer._post_import_hooks_lock = threading.RLock()
        for site in list(callsite.sites.values()):
            site.counter = itertools.count()
        callsite.retired_launches.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=after_fork_in_child)
