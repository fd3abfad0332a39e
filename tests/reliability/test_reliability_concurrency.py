"""Reliability under threads and processes: names, NVTX ranges and census counts stay exact.

Threads launch a user-named no-op target (`noop:launch`), not simulator kernels: numba's simulator
refuses two kernels at once ("concurrent simulated kernel not supported"), and serialising them
with a lock would also serialise kname's wrapper, which is what must be tested concurrently. The
wrapper (kname.launch.kname_launch) is the same for every target.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from support import REPO, cleaned, line_of
from test_reliability import NOOP_TARGET, count_ranges, run_program, write_program

pytestmark = [pytest.mark.slow, pytest.mark.launches]

THREADS = 16
LAUNCHES = 1000  # per thread and call site


def workers_source(threads: int) -> str:
    """One function per thread, each launching from two lines of its own and one shared line."""
    parts = ["import noop\n\n\ndef shared(i):\n    return noop.launch(i)  # shared-line\n"]
    for k in range(threads):
        parts.append(
            f"\n\ndef worker_{k}(n):\n"
            f"    total = 0\n"
            f"    for i in range(n):\n"
            f"        total += noop.launch(i)  # own-a-{k}:\n"
            f"        total += noop.launch(-i)  # own-b-{k}:\n"
            f"        total += shared(i) - 2 * i\n"
            f"    return total\n"
        )
    return "".join(parts)


THREADED = """\
import json
import sys
import threading

import kname
import workers

threads, n = int(sys.argv[1]), int(sys.argv[2])
sys.setswitchinterval(1e-6)  # switch threads as often as possible
barrier = threading.Barrier(threads)
tids, totals = {}, {}


def run(k):
    barrier.wait()  # every thread makes its first (uncached) launches at the same moment
    tids[k] = threading.get_native_id()
    totals[k] = getattr(workers, f"worker_{k}")(n)


pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
for thread in pool:
    thread.start()
for thread in pool:
    thread.join()
print(json.dumps({"tids": tids, "totals": totals, "names": kname.names(),
                  "gil": getattr(sys, "_is_gil_enabled", lambda: True)()}))
"""


def test_16_threads_name_each_launch_after_its_own_line(kname_venv, inject_lib, tmp_path) -> None:
    workers = workers_source(THREADS)
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, THREADED, str(THREADS), str(LAUNCHES),
        env=NOOP_TARGET, files={"workers.py": workers},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = json.loads(done.stdout)
    shared = f"shared workers.py:{line_of(workers, 'shared-line')}"
    expected_census = {shared: THREADS * LAUNCHES}
    by_tid: dict[int, list[str]] = {}
    for event in capture.of("push", "kname"):
        by_tid.setdefault(event.tid, []).append(event.message)
    for k in range(THREADS):
        own_a = f"worker_{k} workers.py:{line_of(workers, f'own-a-{k}:')}"
        own_b = f"worker_{k} workers.py:{line_of(workers, f'own-b-{k}:')}"
        expected_census |= {own_a: LAUNCHES, own_b: LAUNCHES}
        # Every launch of thread k, in its order, named after thread k's own lines.
        assert by_tid[out["tids"][str(k)]] == [own_a, own_b, shared] * LAUNCHES
        assert out["totals"][str(k)] == 3 * LAUNCHES  # each launch returned its own result
    assert len(by_tid) == THREADS
    assert capture.balanced(), capture.stack_errors()  # per thread
    assert capture.max_depth("kname") == 1
    # No lost counts, even on the line all 16 threads share.
    assert out["names"] == expected_census
    assert sorted(capture.registered_strings("kname")) == sorted(expected_census)


def free_threaded_python() -> str | None:
    """A free-threaded CPython (3.13t/3.14t) on PATH that can import wrapt and nvtx, or None."""
    for name in ("python3.14t", "python3.13t"):
        path = shutil.which(name)
        if (
            path
            and subprocess.run(
                [path, "-c", "import wrapt, nvtx"], capture_output=True, check=False
            ).returncode
            == 0
        ):
            return path
    return None


@pytest.mark.skipif(free_threaded_python() is None, reason="no free-threaded python with wrapt")
def test_free_threaded_python_smoke(tmp_path) -> None:
    """Import, install and 16 threads of launches on a GIL-less build (kname from the checkout)."""
    python = free_threaded_python()
    assert python is not None
    program = write_program(
        tmp_path,
        "import kname\nkname.install(targets=['noop:launch'])\n" + THREADED,
        {"workers.py": workers_source(THREADS)},
    )
    environ = {k: v for k, v in os.environ.items() if not cleaned(k)}
    environ.update(PYTHONPATH=str(REPO), PYTHON_GIL="0")
    done = subprocess.run(
        [python, str(program), str(THREADS), "200"], capture_output=True, text=True,
        env=environ, cwd=program.parent, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["gil"] is False
    assert sum(out["names"].values()) == THREADS * 200 * 3


# --------------------------------------------------------------------------
# Child processes
# --------------------------------------------------------------------------

LAUNCHERS = """\
import os
import sys

import noop


def state(result):
    lifecycle = sys.modules.get("kname.lifecycle")
    return [result, os.environ.get("KNAME"), bool(lifecycle and lifecycle.is_installed())]


def spawned():
    return state(noop.launch(1))


def forkserved():
    return state(noop.launch(2))


def forked():
    return state(noop.launch(3))


def pooled():
    return state(noop.launch(4))


def pool_spawned():
    return state(noop.launch(5))


def subprocessed():
    return state(noop.launch(6))
"""

PROCESSES = """\
import json
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import launchers
import noop


def run(how, queue):
    queue.put(getattr(launchers, how)())


if __name__ == "__main__":
    out = {"parent": launchers.state(noop.launch(0))}  # parent-line
    for how, method in (("spawned", "spawn"), ("forkserved", "forkserver"), ("forked", "fork")):
        context = multiprocessing.get_context(method)
        queue = context.Queue()
        process = context.Process(target=run, args=(how, queue))
        process.start()
        out[how] = queue.get(timeout=60)
        process.join(60)
    with ProcessPoolExecutor(1) as pool:  # the platform's default start method
        out["pooled"] = pool.submit(launchers.pooled).result(60)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        out["pool_spawned"] = pool.submit(launchers.pool_spawned).result(60)
    child = "import json, launchers; print(json.dumps(launchers.subprocessed()))"
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    out["subprocessed"] = json.loads(done.stdout)
    print(json.dumps(out))
"""

CHILDREN = ("spawned", "forkserved", "forked", "pooled", "pool_spawned", "subprocessed")


@pytest.mark.parametrize("switch", ["KNAME=1", "-X kname"])
def test_every_kind_of_child_process_is_named_when_the_parent_is(
    kname_venv, inject_lib, tmp_path, switch
) -> None:
    env = {"KNAME_TARGETS": "noop:launch"}
    python_args: tuple[str, ...] = ()
    if switch == "KNAME=1":
        env["KNAME"] = "1"
    else:
        python_args = ("-X", "kname")
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, PROCESSES, env=env,
        files={"launchers.py": LAUNCHERS}, python_args=python_args,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = json.loads(done.stdout)
    # The parent (also under -X kname) sets KNAME=1 in its environment, which children inherit.
    assert out["parent"] == [1, "1", True]
    for result, how in enumerate(CHILDREN, 1):
        assert out[how] == [2 * result + 1, "1", True], how
    expected = {f"<module> prog.py:{line_of(PROCESSES, 'parent-line')}": 1}
    expected |= {
        f"{how} launchers.py:{line_of(LAUNCHERS, f'def {how}()') + 1}": 1 for how in CHILDREN
    }
    assert count_ranges(capture) == expected
    assert capture.balanced(), capture.stack_errors()


FORK_WITH_HELD_LOCKS = """\
import json
import os
import signal
import sys
import threading
import warnings

import kname
import noop
from kname import _warnings, callsite, counters, importhooks, lifecycle, ranges

importer = sys.modules["wrapt.importer"]  # imported for noop's import: kname's hooks are wrapt's

# Python 3.12+ warns at a fork with threads alive: forking so is this test's very point.
warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)
noop.launch(1)  # parent-line
locks = {
    "callsite": callsite._lock, "counters": counters._lock, "ranges": ranges._lock,
    "lifecycle": lifecycle._lock, "warnings": _warnings._lock, "importhooks": importhooks._lock,
    "wrapt": importer._post_import_hooks_lock,
}
locks = list(locks.values()) if sys.argv[1] == "all" else [locks[sys.argv[1]]]
held, release = threading.Event(), threading.Event()


def hold():
    for lock in locks:
        lock.acquire()
    held.set()
    release.wait()
    for lock in reversed(locks):
        lock.release()


holder = threading.Thread(target=hold)
holder.start()
held.wait()
pid = os.fork()  # while another thread holds every lock kname takes
if pid == 0:
    signal.alarm(10)  # a deadlock kills the child, so the test fails instead of hanging
    first = noop.launch(10)  # child-line: a new call site and a new NVTX name
    _warnings.warn_once("child", "the forked child can still warn")
    import late  # a module kname hooks: kname's finder, wrapt's, then kname's hook wrap it

    second = late.launch(20)  # late-line
    census = kname.names()
    kname.uninstall()
    kname.install(targets=["noop:launch"])
    third = noop.launch(30)  # reinstalled-line
    print(json.dumps({"results": [first, second, third], "census": census}), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
release.set()
holder.join()
print(json.dumps({"child_exit": os.waitstatus_to_exitcode(status)}))
"""

LATE = "def launch(x):\n    return x + 1\n"
NOOP_AND_LATE = {"KNAME": "1", "KNAME_TARGETS": "noop:launch,late:launch"}


@pytest.mark.parametrize(
    "held",
    ["all", "callsite", "counters", "ranges", "lifecycle", "warnings", "importhooks", "wrapt"],
)
def test_a_forked_child_does_not_inherit_a_held_lock(
    kname_venv, inject_lib, tmp_path, held
) -> None:
    """Another thread holds kname's locks (the import hooks' and wrapt's too: kname's finder is
    in front of every import) across os.fork(); the child names, warns, imports, installs."""
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, FORK_WITH_HELD_LOCKS, held,
        env=NOOP_AND_LATE, files={"late.py": LATE},
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    child, parent = (json.loads(line) for line in done.stdout.splitlines())
    assert parent == {"child_exit": 0}, done.stderr
    assert child["results"] == [21, 21, 61]
    assert done.stderr == "kname: the forked child can still warn\n"
    names = {
        marker: f"<module> prog.py:{line_of(FORK_WITH_HELD_LOCKS, marker)}"
        for marker in ("parent-line", "child-line", "late-line", "reinstalled-line")
    }
    # The child's census is its own: the parent's launch before the fork is not in it.
    assert child["census"] == {names["child-line"]: 1, names["late-line"]: 1}
    assert capture.ranges("kname") == list(names.values())
    assert capture.balanced(), capture.stack_errors()


# A loader behind kname's finder holds the first import of one module while it runs (its module
# lock held, as in a slow import): wrapt's, which kname makes for a thread's import of a watched
# module (noop); meanwhile this thread imports another watched module (late), or forks and the
# child does. Or asyncio's, which another thread makes while a thread imports noop and kname
# wrapt (which imports asyncio).
WHILE_IMPORTED = """\
import importlib.machinery
import json
import os
import signal
import sys
import threading
import time
import warnings

import kname
from kname import importhooks

# Python 3.12+ warns at a fork with threads alive: forking so is this test's very point.
warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)
mode = sys.argv[1]
held = "asyncio" if mode == "asyncio" else "wrapt"
entered, release = threading.Event(), threading.Event()


class HeldLoader:
    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, attribute):
        return getattr(self.loader, attribute)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        entered.set()
        release.wait(60)
        self.loader.exec_module(module)


class Holder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname != held or entered.is_set():
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        spec.loader = HeldLoader(spec.loader)
        return spec


def release_once_importing_wrapt(threads, settle_s=0.0):
    while len(importhooks._importing_wrapt) < threads:
        time.sleep(0.001)
    time.sleep(settle_s)  # for its import to reach asyncio's module lock
    release.set()


calls = []
for name in ("noop", "late"):
    importhooks.watch(name, lambda module: calls.append(module.__name__))
sys.meta_path.insert(1, Holder())  # behind kname's finder
importer = threading.Thread(target=__import__, args=(held if mode == "asyncio" else "noop",))
importer.start()
assert entered.wait(30)
if mode == "fork":
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a deadlock kills the child, so the test fails instead of hanging
        import late

        import colorsys  # an import after late's: the catch-up's moment

        print(json.dumps({"late": late.launch(20), "calls": calls}), flush=True)  # child-line
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"child_exit": os.waitstatus_to_exitcode(status)}), flush=True)
    release.set()
elif mode == "thread":
    threading.Thread(target=release_once_importing_wrapt, args=(2,)).start()
    import late  # waits in importlib for the other thread's import of wrapt

    print(json.dumps({"late": late.launch(20)}), flush=True)  # late-line
else:
    signal.alarm(20)  # a deadlock ends the program, so the test fails instead of hanging
    threading.Thread(target=release_once_importing_wrapt, args=(1, 0.5)).start()
    import noop  # kname imports wrapt for it, which waits for the other thread's asyncio
importer.join()
import noop

print(json.dumps({"noop": noop.launch(10), "calls": sorted(calls)}))  # noop-line
"""


def run_while_imported(kname_venv, inject_lib, tmp_path, mode: str) -> tuple[list, list[str]]:
    """WHILE_IMPORTED run in `mode`: what it printed, line by line, and its ranges, sorted."""
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, WHILE_IMPORTED, mode,
        env=NOOP_AND_LATE, files={"late.py": LATE},
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return [json.loads(line) for line in done.stdout.splitlines()], sorted(capture.ranges("kname"))


def ranges_at(*markers: str) -> list[str]:
    return [f"<module> prog.py:{line_of(WHILE_IMPORTED, marker)}" for marker in markers]


def test_a_watched_import_meeting_another_threads_import_of_wrapt_waits_for_it(
    kname_venv, inject_lib, tmp_path
) -> None:
    """Two threads import a watched module each at the same moment; both need wrapt, and the
    second waits for the first's import of it: each module is hooked once, by wrapt's loader."""
    printed, ranges = run_while_imported(kname_venv, inject_lib, tmp_path, "thread")
    assert printed == [{"late": 21}, {"noop": 21, "calls": ["late", "noop"]}]
    assert ranges == ranges_at("late-line", "noop-line")


def test_a_child_forked_while_another_thread_imports_wrapt_still_hooks_its_imports(
    kname_venv, inject_lib, tmp_path
) -> None:
    """That thread holds wrapt's module lock for good in the child, whose own import of wrapt
    would wait forever: the child's watched module is hooked at its next import instead."""
    printed, ranges = run_while_imported(kname_venv, inject_lib, tmp_path, "fork")
    assert printed == [
        {"late": 21, "calls": ["late"]},  # the child's
        {"child_exit": 0},
        {"noop": 21, "calls": ["noop"]},
    ]
    assert ranges == ranges_at("child-line", "noop-line")


def test_a_watched_import_meeting_another_threads_import_of_asyncio_waits_for_it(
    kname_venv, inject_lib, tmp_path
) -> None:
    """A thread imports asyncio while another imports a watched module, for which kname imports
    wrapt, which imports asyncio: kname's import of wrapt waits for asyncio's, never holding the
    lock every import takes, so asyncio's import goes on (it would wait for that lock forever)."""
    printed, ranges = run_while_imported(kname_venv, inject_lib, tmp_path, "asyncio")
    assert printed == [{"noop": 21, "calls": ["noop"]}]
    assert ranges == ranges_at("noop-line")
