"""kname: name every GPU kernel launch after the line of Python that caused it.

Switch it on without touching code (`KNAME=1 python app.py` or `python -X kname app.py`), or call
`kname.install()`. Each launch then runs inside an NVTX range such as `step mymodel/solver.py:42`,
which Nsight Systems and Nsight Compute show with the kernel.
"""

from kname._version import __version__
from kname.callsite import site_name
from kname.census import names, report
from kname.lifecycle import (
    disable,
    enable,
    install,
    is_enabled,
    is_installed,
    paused,
    profile,
    uninstall,
)
from kname.paths import short_path

__all__ = [
    "__version__",
    "disable",
    "enable",
    "install",
    "is_enabled",
    "is_installed",
    "names",
    "paused",
    "profile",
    "report",
    "short_path",
    "site_name",
    "uninstall",
]


def load_ipython_extension(ipython) -> None:
    """`%load_ext kname`: install kname in this IPython or Jupyter session (kname.ipython)."""
    from kname.ipython import load_ipython_extension as load  # IPython only when asked

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """`%unload_ext kname`: uninstall kname if `%load_ext kname` installed it."""
    from kname.ipython import unload_ipython_extension as unload

    unload(ipython)
