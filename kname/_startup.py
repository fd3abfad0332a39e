"""What the kname.pth gate (or a sitecustomize) runs when the switch may be on.

The gate already checked `-X kname` and KNAME cheaply; here the value is parsed properly. Nothing
in this module may raise into the interpreter's start-up, except KNAME_STRICT's deliberate exit.
"""

from __future__ import annotations

import os
import sys

from kname.config import KNAME, switch_problem, switch_state


def switched_on(environ=os.environ, xoptions=sys._xoptions) -> bool:
    """True when `-X kname` is given or KNAME holds an on-value; warns once about other values."""
    source, value, state = switch_state(environ, xoptions)
    if state is None:
        _say(switch_problem(source, value) + "; kname stays off")
    return bool(state)


def start() -> None:
    """Install kname if switched on; never breaks start-up (KNAME_STRICT=1 aside)."""
    from kname.config import ConfigError

    try:
        if switched_on():
            # -X kname is not inherited by child processes; KNAME is.
            os.environ.setdefault(KNAME, "1")
            from kname.lifecycle import install

            install()
    except ConfigError as exc:
        if _running_kname_command():
            _say(f"{exc} (KNAME_STRICT is on; not stopping the kname command itself)")
            return
        _say(f"{exc} (KNAME_STRICT is on: stopping)")
        # SystemExit raised while site processes a .pth is a crash with a traceback; this is not.
        os._exit(2)
    except SystemExit as exc:  # KNAME_STRICT stopped install() itself (it said why)
        os._exit(exc.code if isinstance(exc.code, int) else 2)
    except Exception as exc:
        if not hides_its_c_api(exc):
            _say(f"could not start ({type(exc).__name__}: {exc}); the program runs without kname")


def hides_its_c_api(exc: BaseException) -> bool:
    """True when an extension module could not load for want of Python's own C API: this is a
    Python embedded by a host that loaded libpython privately (RTLD_LOCAL), as Nsight Compute's
    rules interpreter is. KNAME=1 reaches it with the program's environment, but no GPU library
    can load there either: nothing to name, so nothing to say (the gates test the same words)."""
    text = str(exc).replace("symbol: _Py", "symbol: Py")
    return isinstance(exc, ImportError) and "undefined symbol: Py" in text


def _running_kname_command() -> bool:
    """True in `kname ...` or `python -m kname ...`: `kname doctor` must run to diagnose."""
    argv = [*getattr(sys, "orig_argv", []), "", ""]
    return argv[1:3] == ["-m", "kname"] or os.path.basename(argv[1]) == "kname"


def _say(message: str) -> None:
    from kname._warnings import warn_once

    warn_once(message, message)


if not getattr(sys, "_kname_started", False):
    # Guards against a .pth and a sitecustomize both starting kname in one process.
    sys._kname_started = True
    start()
