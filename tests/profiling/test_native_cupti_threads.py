"""kname._native_cupti's buffers of finished calls: one per launching thread, written without a
lock, drained under the recorder's lock (issue 43: the callback's bookkeeping above CUPTI's floor).

Each thread appends its finished calls to a buffer of its own; the drain takes every thread's,
merged as the calls entered (CUPTI numbers them over every thread). A thread that ends before the
drain loses nothing: its buffer stays on the recorder's list until drained, then is freed. The
locks and GIL takes a launch call makes are counted by a preload library
(tests/support/lock_counter.c) that wraps pthread_mutex_lock and PyGILState_Ensure, in a process
of its own, through the stand-in libcupti.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support import REPO
from support.cupti_stand_in import COMPILER, SUPPORT, build_fake_cupti

from kname import callsite, hotpath
from kname.profiling import capture as capture_module
from kname.profiling.capture import MAX_OPEN_CALLS, NO_PYTHON_FRAME, UNNAMED, site_of_frame
from kname.profiling.records import LaunchRecord

native, WHY = hotpath.choose(True).cupti()
pytestmark = pytest.mark.skipif(native is None, reason=f"no native CUPTI callback here: {WHY}")
KERNEL, GRAPH = 0, 1


def recorder(**changes):
    """A Recorder as the collector makes it (two APIs: a kernel launch and a graph launch)."""
    arguments = dict(
        apis=[("cuLaunchKernel", False), ("cudaGraphLaunch", True)], sites=callsite.sites,
        kinds=callsite._kinds, site_of_frame=site_of_frame, site_key=capture_module.SITE_KEY,
        no_frame=NO_PYTHON_FRAME, unnamed=UNNAMED, max_pending=100_000,
        max_open_calls=MAX_OPEN_CALLS,
    )  # fmt: skip
    arguments.update(changes)
    return native.Recorder(**arguments)


def launch(made, correlation_id: int, site: str, nested: bool = False) -> None:
    """A launch call kname wraps at `site` (with a driver call inside it, `nested`)."""
    made.mark(site)
    made.enter(correlation_id, GRAPH if nested else KERNEL, correlation_id)
    if nested:
        made.enter(correlation_id + 1, KERNEL, correlation_id)
        made.exit(correlation_id + 1, correlation_id + 1)
    made.exit(correlation_id, correlation_id + 2)
    made.unmark()


def malloc_in_use() -> int:
    """The bytes malloc has handed out and not had back (glibc's mallinfo2): the buffers are
    malloc's, not Python's."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2().uordblks


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost",
    )]  # fmt: skip


def test_the_calls_of_threads_that_ended_before_the_drain_are_all_drained_then_freed() -> None:
    made = recorder()

    def work(index: int, first: int, count: int) -> None:
        for number in range(first, first + count):
            launch(made, number, f"thread {index}")

    def round_of_threads(base: int) -> list[LaunchRecord]:
        workers = [threading.Thread(target=work, args=(i, base + i * 1000, 300)) for i in range(16)]
        for worker in workers:  # one after the other: each ends before the next starts
            worker.start()
            worker.join()
        return made.drain(LaunchRecord)

    records = round_of_threads(0)
    assert [r.correlation_id for r in records] == [
        i * 1000 + n for i in range(16) for n in range(300)
    ]  # every call, merged as they entered
    assert all(r.site == f"thread {r.correlation_id // 1000}" for r in records)
    gc.collect()
    in_use = malloc_in_use()
    for base in range(1, 20):  # threads that end, again and again: their buffers are freed
        assert len(round_of_threads(base * 100_000)) == 16 * 300
    gc.collect()
    # Kept, 19 rounds of 16 buffers would hold 19 * 16 * 512 records of 48 bytes (7.5 MB).
    assert malloc_in_use() - in_use < 1_000_000
    assert made.counts()["finished"] == 0


def test_a_thread_that_ends_after_its_last_drain_leaves_its_buffer_to_the_next() -> None:
    made = recorder()
    drained = threading.Event()

    def work(first: int) -> None:
        for number in range(first, first + 300):
            launch(made, number, "site")
        drained.wait()  # alive while its calls are drained, then it ends

    gc.collect()
    in_use = malloc_in_use()
    workers = [threading.Thread(target=work, args=(i * 1000,)) for i in range(50)]
    for worker in workers:
        worker.start()
    while made.counts()["finished"] < 50 * 300:
        pass
    assert len(made.drain(LaunchRecord)) == 50 * 300
    drained.set()
    for worker in workers:
        worker.join()
    assert made.drain(LaunchRecord) == []  # nothing left: the ended threads' buffers go
    gc.collect()
    # Kept, the 50 buffers would hold 50 * 512 records of 48 bytes (1.2 MB).
    assert malloc_in_use() - in_use < 400_000


def test_threads_recording_at_once_keep_each_their_order_and_nested_calls_their_parent() -> None:
    made = recorder()
    threads, per_thread = 12, 2_000
    together = threading.Barrier(threads)

    def work(first: int) -> None:
        together.wait()
        for number in range(first, first + 2 * per_thread, 2):
            launch(made, number, f"site {first}", nested=True)

    workers = [
        threading.Thread(target=work, args=(1 + i * 2 * per_thread,)) for i in range(threads)
    ]
    records: list[LaunchRecord] = []
    for worker in workers:
        worker.start()
    while any(worker.is_alive() for worker in workers):
        records += made.drain(LaunchRecord)  # drains while the threads record
    records += made.drain(LaunchRecord)
    assert sorted(r.correlation_id for r in records) == list(range(1, 1 + 2 * per_thread * threads))
    by_site: dict[str, list[LaunchRecord]] = {}
    for record in records:
        by_site.setdefault(record.site, []).append(record)
    assert len(by_site) == threads
    for calls in by_site.values():  # each thread's: inner, then its outer, as they finished
        ids = [(r.correlation_id, r.parent) for r in calls]
        first = ids[0][1]
        assert ids == [(n + d, n if d else 0) for n in range(first, first + 2 * per_thread, 2)
                       for d in (1, 0)]  # fmt: skip
        assert len({r.thread for r in calls}) == 1


def test_a_thread_moving_to_a_new_recorder_leaves_its_calls_to_the_old_one() -> None:
    old, new = recorder(), recorder()
    launch(old, 1, "old site")
    launch(new, 2, "new site")  # this thread's buffer for `old` let go, still on its list
    launch(old, 3, "old site")
    assert [(r.correlation_id, r.site) for r in old.drain(LaunchRecord)] == [
        (1, "old site"), (3, "old site"),
    ]  # fmt: skip
    assert [r.correlation_id for r in new.drain(LaunchRecord)] == [2]
    del old  # its buffers freed with it, this thread's among them
    gc.collect()
    launch(new, 4, "new site")
    assert [r.correlation_id for r in new.drain(LaunchRecord)] == [4]


def test_a_thread_python_never_ran_on_hands_its_calls_over_when_it_ends() -> None:
    made = recorder()
    for number in range(1, 51):  # each in a C thread of its own, ended before the drain
        made.call_without_gil(number, KERNEL, number, number + 1, True)
    records = made.drain(LaunchRecord)
    assert [r.correlation_id for r in records] == list(range(1, 51))
    assert {r.site for r in records} == {NO_PYTHON_FRAME}
    assert made.counts()["finished"] == 0


LOCKS_SCRIPT = """
import ctypes
from kname import hotpath

native, _ = hotpath.choose(True).cupti()
counted = ctypes.CDLL(None).locks_counted  # the preloaded counter
counted.restype = ctypes.c_long
cupti = ctypes.CDLL({library!r})
cupti.fake_refuse(0, b"")
made = native.Recorder(
    apis=[("cuLaunchKernel", False)], sites={{}}, kinds={{}},
    site_of_frame=lambda frame: "site", site_key="k", no_frame="<no frame>",
    unnamed="<unnamed>", max_pending=100_000, max_open_calls=8,
)
assert made.subscribe({library!r}) == (0, None)
assert made.enable(1, 307, 0) == 0
made.time_launches({timed})
made.mark("wrapped")  # a launch kname wraps: its site is said, no frame is read


def calls(first, count):
    for number in range(first, first + count):
        cupti.fake_callback(1, 307, 0, number)  # the API's enter, as CUPTI calls back
        cupti.fake_callback(1, 307, 1, number)  # its exit


calls(1, 1_000)
made.drain(lambda *fields: fields)
counted()
calls(1_001, 10_000)
locks = counted()
records = made.drain(lambda *fields: fields)
made.unmark()
made.unsubscribe()
print(locks, len(records))
"""


def counting_environment(folder: Path) -> dict[str, str]:
    """The environment of a process whose locks and GIL takes from kname._native_cupti are
    counted: tests/support/lock_counter.c built into `folder` and preloaded."""
    counter = folder / "liblock_counter.so"
    done = subprocess.run(
        [COMPILER, "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-o", str(counter),
         str(SUPPORT / "lock_counter.c"), "-ldl"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {"LD_PRELOAD": str(counter), "LOCK_COUNTER_OF": "_native_cupti", "PATH": "/usr/bin"}


@pytest.mark.skipif(
    COMPILER is None or sys.platform != "linux", reason="no C compiler, or no LD_PRELOAD"
)
@pytest.mark.parametrize("timed", [False, True], ids=["recorded at enter", "timed, at exit"])
def test_a_launch_call_takes_no_lock_once_its_thread_has_room(tmp_path, timed: bool) -> None:
    library = build_fake_cupti(tmp_path)[0]
    env = counting_environment(tmp_path)
    script = LOCKS_SCRIPT.format(library=str(library), timed=timed)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    locks, recorded = map(int, done.stdout.split())
    assert recorded == 10_000
    assert locks <= 16  # room made a few times (it doubles), not once a call


GIL_SCRIPT = """
import ctypes, sys
sys.path.insert(0, {folder!r})
from kname import callsite, hotpath
from kname.config import DEFAULT_FORMAT
from kname.profiling import capture

native, _ = hotpath.choose(True).cupti()
counted = ctypes.CDLL(None).gil_takes_counted  # the preloaded counter
counted.restype = ctypes.c_long
callsite.configure(("gpulib",), DEFAULT_FORMAT, 1, False)  # gpulib: library code
import gpulib

made = native.Recorder(
    apis=[("cuLaunchKernel", False)], sites=callsite.sites, kinds=callsite._kinds,
    site_of_frame=capture.site_of_frame, site_key=capture.SITE_KEY, no_frame="<no frame>",
    unnamed="<unnamed>", max_pending=100_000, max_open_calls=8,
)


def user_line(number):
    gpulib.launch(made, number)  # the user's line; the launch API called from gpulib's


for number in range(5):  # the site made (Python), then found by the walk and remembered
    user_line(number)
first = counted()
for number in range(5, 105):
    user_line(number)
again = counted()
names = {{record[2] for record in made.drain(lambda *fields: fields)}}
print(first, again, sorted(names))
"""

LIBRARY = """
def launch(made, number):
    return helper(made, number)


def helper(made, number):
    made.call_without_gil(number, 0, 5, 9)  # the CUDA call, made with the GIL released
"""


@pytest.mark.skipif(
    COMPILER is None or sys.platform != "linux", reason="no C compiler, or no LD_PRELOAD"
)
def test_a_launch_from_library_code_with_the_gil_released_finds_its_walked_site_without_it(
    tmp_path,
) -> None:
    """torch.nn's modules, numba-cuda and Triton launch from library frames with the GIL released:
    the walk to the user's line is taken with the GIL once, then checked (the same frames, the
    same user instruction, the rules unchanged) without taking it again."""
    (tmp_path / "gpulib.py").write_text(LIBRARY)
    env = counting_environment(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(GIL_SCRIPT.format(folder=str(tmp_path)))],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, again, names = done.stdout.split(" ", 2)
    if int(first) == 0:
        pytest.skip("PyGILState_Ensure is not interposed here (Python linked into its executable)")
    assert int(again) == 0  # 100 launches from the same frames: the GIL never taken again
    assert "user_line <string>:" in names and names.count("'") == 2  # one site, the user's line
