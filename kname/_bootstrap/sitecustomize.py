"""kname's start-up gate for the programs `kname run` starts, where no kname.pth may be read.

An editable install (`pip install -e .`) has no kname.pth, and the program's Python may have no
kname at all. `kname run` puts this folder first on the program's PYTHONPATH, so every Python
it starts (and their children) imports this module at start-up: it starts kname unless kname.pth
already did, says so in one line when this Python cannot import kname, then runs the
sitecustomize.py it shadows, if any. Syntax of Python 3.6: the program's Python may be old.
"""

import os
import sys


def _switch_may_be_on():
    # The same cheap test as kname.pth: `kname run` sets KNAME=1, but a program may unset it.
    value = os.environ.get("KNAME", "").strip().lower()
    return "kname" in sys._xoptions or value not in ("", "0", "false", "no", "off")


def _start_kname():
    if getattr(sys, "_kname_started", False):
        return  # kname.pth, read before any sitecustomize, started kname (or said why not)
    try:
        import kname._startup  # noqa: F401  (importing it starts kname, once per process)
    except ImportError:
        sys.stderr.write(
            f"kname: kname run: this Python ({sys.executable}) cannot import kname, so nothing "
            "is named; install kname for it, or run the program with a Python that has kname\n"
        )
    except Exception as exc:  # a broken install or interpreter: one line, never a traceback
        sys.stderr.write(
            f"kname: could not start ({type(exc).__name__}: {exc}); the program runs "
            "without kname\n"
        )


def _is_kname_bootstrap(entry):
    folder = os.path.abspath(entry or os.curdir)
    return os.path.basename(folder) == "_bootstrap" and (
        os.path.basename(os.path.dirname(folder)) == "kname"
    )


def _entries_after(here):
    """sys.path after this file's folder: a sitecustomize found before it would run this one
    again (two such files, each running "the other", never end)."""
    folders = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    if here not in folders:
        return [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    return sys.path[folders.index(here) + 1 :]


def _run_next_sitecustomize():
    """Find the sitecustomize.py that this one shadows and run it under its own name."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    # Every kname bootstrap folder is left out, not only this one: a checkout on PYTHONPATH
    # beside an installed kname gives two, and each running the other would never end.
    path = [p for p in _entries_after(here) if not _is_kname_bootstrap(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    if _switch_may_be_on():
        _start_kname()
except Exception as exc:  # never break the program's start-up
    sys.stderr.write(f"kname: could not start ({type(exc).__name__}: {exc})\n")
_run_next_sitecustomize()
