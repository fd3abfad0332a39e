"""kname's start-up gate as a sitecustomize.py, for environments that do not want .pth files.

Put this folder first on PYTHONPATH (or copy the file into site-packages). It switches kname on
for `KNAME=1` or `python -X kname`, then runs the next sitecustomize.py on sys.path, if any, so
an existing one keeps working.
"""

import os
import sys


def _switch_may_be_on() -> bool:
    # The same cheap test as kname.pth: nothing of kname is imported when it is off.
    value = os.environ.get("KNAME", "").strip().lower()
    return "kname" in sys._xoptions or value not in ("", "0", "false", "no", "off")


def _start_kname() -> None:
    if getattr(sys, "_kname_started", False):
        return  # kname.pth, read before any sitecustomize, started kname (or said why not)
    try:
        import kname._startup  # noqa: F401  (importing it starts kname, once per process)
    except ImportError:
        print("kname: switched on, but kname is not installed for this Python", file=sys.stderr)
    except Exception as exc:  # a broken install or interpreter: one line, never a traceback
        print(f"kname: could not start ({type(exc).__name__}: {exc}); the program runs without "
              "kname", file=sys.stderr)  # fmt: skip


def _entries_after(here) -> list:
    """sys.path after this file's folder: a sitecustomize found before it would run this one
    again (two such files, each running "the other", never end)."""
    folders = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    if here not in folders:
        return [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    return sys.path[folders.index(here) + 1 :]


def _run_next_sitecustomize() -> None:
    """Find the sitecustomize.py that this one shadows and run it under its own name."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = _entries_after(here)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if _switch_may_be_on():
    _start_kname()
_run_next_sitecustomize()
