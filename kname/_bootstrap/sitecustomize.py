"""kname's start-up gate for the programs `kname run` starts, where no kname.pth may be read.

An editable install (`pip install -e .`) has no kname.pth, and the program's Python may have no
kname at all. `kname run` puts this folder first on the program's PYTHONPATH, so every Python
it starts (and their children) imports this module at start-up: it starts kname unless kname.pth
already did, says so in one line when this Python cannot import kname, then loads the
sitecustomize.py it shadows, if any, as `sitecustomize`: the program's `import sitecustomize`
then gives that module. A Python older than kname supports (a Python 2 tool the program starts,
say) is left alone, silently. Syntax of Python 2.7: every Python must be able to read this file.
"""

import os
import sys

OLDEST_PYTHON = (3, 10)  # setup.cfg's python_requires


def _switch_may_be_on():
    # The same cheap test as kname.pth: `kname run` sets KNAME=1, but a program may unset it.
    value = os.environ.get("KNAME", "").strip().lower()
    return "kname" in sys._xoptions or value not in ("", "0", "false", "no", "off")


def _start_kname():
    if getattr(sys, "_kname_started", False):
        return  # kname.pth, read before any sitecustomize, started kname (or said why not)
    try:
        import kname._startup  # noqa: F401  (importing it starts kname, once per process)
    except ImportError as exc:
        if _hides_its_c_api(exc):
            return  # an embedded Python no GPU library can load in either (kname._startup)
        sys.stderr.write(
            "kname: kname run: this Python (" + sys.executable + ") cannot import kname, so "
            "nothing is named; install kname for it, or run the program with a Python that has "
            "kname\n"
        )
    except Exception as exc:  # a broken install or interpreter: one line, never a traceback
        sys.stderr.write(_could_not_start(exc) + "; the program runs without kname\n")


def _hides_its_c_api(exc):
    # kname._startup.hides_its_c_api's test, which cannot be imported here.
    return "undefined symbol: Py" in str(exc).replace("symbol: _Py", "symbol: Py")


def _could_not_start(exc):
    return "kname: could not start (" + type(exc).__name__ + ": " + str(exc) + ")"


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


def _shadowed_path():
    """Where the sitecustomize.py this one shadows can be: every kname bootstrap folder is left
    out, not only this one (a checkout on PYTHONPATH beside an installed kname gives two, and
    each running the other would never end)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [entry for entry in _entries_after(here) if not _is_kname_bootstrap(entry)]


def _load_shadowed_sitecustomize():
    """Run the sitecustomize.py this one shadows as `sitecustomize`. The import statement that
    is running this file returns what sys.modules holds under its name when it ends: the
    program's own module, attributes and all."""
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _shadowed_path())
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _load_shadowed_sitecustomize_with_imp():
    """The same for Python 2 and 3 before 3.5, which have no importlib.util.module_from_spec."""
    import imp

    try:
        found = imp.find_module("sitecustomize", _shadowed_path())
    except ImportError:
        return
    del sys.modules["sitecustomize"]  # else load_module would run it inside this module
    try:
        imp.load_module("sitecustomize", *found)
    finally:
        if found[0] is not None:
            found[0].close()


# Read by every Python: ruff, which assumes 3.10+, would drop this test (UP036).
if sys.version_info < (3, 5):  # noqa: UP036
    _load_shadowed_sitecustomize_with_imp()
elif sys.version_info < OLDEST_PYTHON:
    _load_shadowed_sitecustomize()
else:
    try:
        if _switch_may_be_on():
            _start_kname()
    except Exception as exc:  # never break the program's start-up
        sys.stderr.write(_could_not_start(exc) + "\n")
    _load_shadowed_sitecustomize()
