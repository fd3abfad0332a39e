"""Reliability against what interrupts a launch: signal handlers that launch, async exceptions
(KeyboardInterrupt from a signal handler, or sent to another thread), and os.fork() while another
thread makes its first launch.

Real programs in a venv with kname's wheel, switched on by KNAME=1, under NVTX capture (see
test_reliability). Each program arms faulthandler: a deadlock ends it with every thread's
traceback on stderr and a non-zero exit, so the test fails instead of hanging.
"""

from __future__ import annotations

import json

import pytest
from support import line_of
from test_reliability import NOOP_TARGET, count_ranges, kname_lines, run_program

pytestmark = pytest.mark.slow

# --------------------------------------------------------------------------
# A signal handler that launches (and warns, and names) inside a kname critical section
# --------------------------------------------------------------------------

HANDLER_INSIDE_EVERY_LOCK = """\
import faulthandler
import json
import signal

import kname
import noop
from kname import _locks, _warnings

faulthandler.dump_traceback_later(30, exit=True)  # a deadlock fails the test, with tracebacks
handled = []


def on_signal(signum, frame):
    # A fresh code object each time: a call site never seen, built inside the handler.
    n = len(handled)
    exec(compile(f"noop.launch({n})", f"handler{n}.py", "exec"), {"noop": noop})
    exec(compile("kname.site_name()", f"named{n}.py", "exec"), {"kname": kname})
    _warnings.warn_once(f"handler{n}", f"said from handler {n}")
    kname.names()
    handled.append(n)


signal.signal(signal.SIGUSR1, on_signal)
noop.launch(-1)  # main-line: kname's NVTX domain and attributes exist
for lock in list(_locks._locks):  # every lock kname has made
    with lock:  # as kname's own code holds it, the handler runs inside the critical section
        signal.raise_signal(signal.SIGUSR1)
print(json.dumps({"locks": len(_locks._locks), "handled": handled, "names": kname.names()}))
"""


def test_a_signal_handler_that_launches_inside_any_kname_critical_section_does_not_deadlock(
    kname_venv, inject_lib, tmp_path
) -> None:
    """Issue 16 item 2: each lock kname has is held, as kname's code holds it, when a signal
    arrives whose handler launches from a new line, names a line, warns and reads the census."""
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, HANDLER_INSIDE_EVERY_LOCK, env=NOOP_TARGET, timeout=90
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["locks"] >= 4  # callsite, ranges, warnings, lifecycle at least
    assert out["handled"] == list(range(out["locks"]))
    assert kname_lines(done.stderr) == [f"kname: said from handler {n}" for n in out["handled"]]
    handler_sites = {f"<module> handler{n}.py:1": 1 for n in out["handled"]}
    main_site = f"<module> prog.py:{line_of(HANDLER_INSIDE_EVERY_LOCK, 'main-line')}"
    assert out["names"] == {main_site: 1, **handler_sites}
    assert count_ranges(capture) == {main_site: 1, **handler_sites}
    assert capture.balanced(), capture.stack_errors()
