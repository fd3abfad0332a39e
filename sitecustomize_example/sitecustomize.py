"""kname's start-up gate as a sitecustomize.py, for environments that do not want .pth files.

Put this folder first on PYTHONPATH (or copy this file into site-packages). It runs, as its own
code, the gate kname ships (kname/_bootstrap/sitecustomize.py, the one `kname run` uses), found
beside the first kname on sys.path without importing it: for `KNAME=1` or `python -X kname` it
starts kname, then it runs the next sitecustomize.py on sys.path, so an existing one keeps working.
"""

import os
import sys


def _shipped_gate():
    """kname/_bootstrap/sitecustomize.py of the first kname on sys.path that has one, or None."""
    for entry in sys.path:
        path = os.path.join(entry or os.curdir, "kname", "_bootstrap", "sitecustomize.py")
        if os.path.isfile(path):
            return path
    return None


_gate = _shipped_gate()
if _gate is not None:  # else kname is not installed for this Python: nothing to start
    with open(_gate) as _source:
        exec(compile(_source.read(), _gate, "exec"))  # __file__ stays this file's: see its chain
