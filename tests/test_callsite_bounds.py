"""The call-site cache's bounds: sites never own kernels, eviction stays O(1), counts stay exact.

In-process tests launch per-object kernels through kname's real launch wrapper (a LaunchSpec
whose `kernel_of` picks the kernel, as the GPU library units do); the simulator test runs real
numba kernels in a subprocess.
"""

from __future__ import annotations

import collections
import gc
import json
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import weakref
from types import CodeType

import pytest
from support import REPO, cleaned

import kname
from kname import callsite, kernel_refs, site_cache
from kname.launch import LaunchSpec, Switch, make_launch_wrapper

pytestmark = pytest.mark.launches


class Kernel:
    """A kernel object as a GPU library has one, launched as `launch(kernel, *args)`."""

    def __init__(self, label: str, payload: object = None) -> None:
        self.label = label
        self.payload = payload


class SlottedKernel:
    """A kernel that cannot be weakly referenced (as CuPy's Cython kernel classes)."""

    __slots__ = ("freed", "label")

    def __init__(self, label: str, freed: list[str]) -> None:
        self.label = label
        self.freed = freed

    def __del__(self) -> None:
        self.freed.append(self.label)


def kernel_launcher():
    """kname's launch wrapper around a launch function that takes the kernel first."""

    def launch(kernel, *args):
        return (kernel.label, *args)

    spec = LaunchSpec("fake", operator.attrgetter("label"), operator.itemgetter(0))
    return make_launch_wrapper(launch, spec, Switch())


def generated_lines(count: int, name: str = "generated"):
    """A function `run(launch, kernel)` whose `count` lines each launch once: `count` sites."""
    body = "".join(f"    launch(kernel, {i})\n" for i in range(count))
    namespace = {"__name__": name}
    exec(compile(f"def run(launch, kernel):\n{body}", f"{name}.py", "exec"), namespace)
    return namespace["run"]


def total_launches() -> int:
    return sum(kname.names().values())


# --------------------------------------------------------------------------
# Item 5: sites do not own kernels
# --------------------------------------------------------------------------


def launch_here(launch, kernel):
    """One call site for every kernel."""
    return launch(kernel)  # L:here


HERE = f"launch_here test_callsite_bounds.py:{launch_here.__code__.co_firstlineno + 2}"


def test_a_launched_and_dropped_kernel_is_freed_with_its_buffer() -> None:
    launch = kernel_launcher()
    refs = []
    for i in range(20):
        kernel = Kernel(f"k{i}", payload=bytearray(1 << 20))
        launch_here(launch, kernel)  # one line, twenty kernels: twenty sites
        refs.append(weakref.ref(kernel))
        del kernel
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    # Their sites left the cache with them; their launches are still counted.
    assert len(callsite.sites) == 0
    assert kname.names() == {HERE: 20}


def test_a_kernel_made_at_a_dead_kernels_address_gets_its_own_name() -> None:
    # Two kernel names from one line; each kernel dropped after its launch, so CPython hands the
    # next kernel the same address (id) again: a site keyed by a dead kernel's id must be gone.
    callsite.configure(template="{kernel}")
    launch = kernel_launcher()
    ids = []
    for i in range(200):
        kernel = Kernel("even" if i % 2 == 0 else "odd")
        ids.append(id(kernel))
        assert launch_here(launch, kernel) == (kernel.label,)
        del kernel
    assert len(set(ids)) < len(ids), "no address was reused: the test proves nothing"
    assert kname.names() == {"even": 100, "odd": 100}


def test_a_kernel_without_weak_references_is_kept_while_its_sites_are_cached(monkeypatch):
    monkeypatch.setattr(kernel_refs, "MAX_HELD_KERNELS", 3)
    launch = kernel_launcher()
    freed: list[str] = []
    for i in range(10):
        launch_here(launch, SlottedKernel(f"s{i}", freed))
    gc.collect()
    # At most MAX_HELD_KERNELS are kept alive, the newest; each one let go took its sites out of
    # the cache first, so its id cannot name another kernel. (The order they die in is the
    # collector's: one still referenced from a frame as it was let go dies later.)
    assert sorted(freed) == [f"s{i}" for i in range(7)]
    assert len(callsite.sites) == 3
    assert sorted(site.kernel for site in callsite.sites.values()) == ["s7", "s8", "s9"]
    assert total_launches() == 10


def test_a_kernel_without_weak_references_is_let_go_when_its_sites_are_evicted(monkeypatch):
    monkeypatch.setattr(site_cache, "MAX_SITES", 5)
    launch = kernel_launcher()
    freed: list[str] = []
    launch_here(launch, SlottedKernel("old", freed))
    run = generated_lines(5)
    run(launch, Kernel("new"))  # five new sites evict the old kernel's only one
    gc.collect()
    assert freed == ["old"]
    assert total_launches() == 6


# --------------------------------------------------------------------------
# Issue 32 item 2: sites do not own code objects
# --------------------------------------------------------------------------

PAYLOAD = 1 << 20  # bytes of the constant each snippet holds


def snippet(n: int, source: str = "launch(kernel, {n})") -> CodeType:
    """Generated code launching once, holding a 1 MB constant (as a template's code may)."""
    code = compile(source.format(n=n), f"snippet{n}.py", "exec")
    return code.replace(co_consts=(*code.co_consts, bytes(PAYLOAD)))


def test_generated_code_launched_once_and_dropped_is_freed_with_its_constants() -> None:
    launch, kernel = kernel_launcher(), Kernel("k")
    refs, ids = [], []
    for n in range(50):
        code = snippet(n)
        exec(code, {"launch": launch, "kernel": kernel})
        refs.append(weakref.ref(code))
        ids.append(id(code))
        del code
    gc.collect()
    assert [r for r in refs if r() is not None] == []  # kept, they would hold 50 MB
    # Their sites and decisions left with them; their launches are still counted.
    assert callsite.sites == {}
    assert not set(ids) & set(callsite._kinds)
    assert kname.names() == {f"<module> snippet{n}.py:1": 1 for n in range(50)}


def launch_via(launch, kernel, n):
    return launch(kernel, n)  # L:via


VIA = f"launch_via test_callsite_bounds.py:{launch_via.__code__.co_firstlineno + 1}"


def test_code_named_through_a_helper_that_stays_is_freed_and_kname_keeps_no_trace_of_it():
    """KNAME_DEPTH=2: each site is keyed by the snippet's code and the helper's; the snippet's
    going takes the site with it, and the kernel, which stays, keeps no growing record of it."""
    callsite.configure(depth=2)
    launch, kernel = kernel_launcher(), Kernel("k")
    refs = []
    for n in range(500):
        code = snippet(n, "launch_via(launch, kernel, {n})")
        exec(code, {"launch_via": launch_via, "launch": launch, "kernel": kernel})
        refs.append(weakref.ref(code))
        del code
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    assert callsite.sites == {}
    assert len(kernel_refs._kernels[id(kernel)].keys) <= 2 * site_cache.QUEUE_SLACK
    assert kname.names() == {f"{VIA} < <module> snippet{n}.py:1": 1 for n in range(500)}


def test_a_code_object_made_where_a_freed_one_was_is_named_after_its_own_line() -> None:
    """A site is keyed by its code's id: once the code is freed, CPython may give a new code
    object of the same size its address, and so its id, and the same offsets: the new code's
    launch must not be taken for the old one's (nor, on the C path, its recent entry)."""
    launch, kernel = kernel_launcher(), Kernel("k")
    seen: set[int] = set()
    reused = 0
    for n in range(200):
        code = compile("launch(kernel)", f"file{n}.py", "exec")
        reused += id(code) in seen
        seen.add(id(code))
        for _ in range(3):  # the second and third from the C path's recent entry
            exec(code, {"launch": launch, "kernel": kernel})
        del code
    assert reused, "no code object was made where a freed one was: the test proves nothing"
    assert kname.names() == {f"<module> file{n}.py:1": 3 for n in range(200)}


SIMULATOR_MEMORY = """
import gc
import json
import os
import weakref

import kname

kname.install()

import numpy as np
from numba import cuda

from kname import callsite


def rss():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def make_kernel():
    buffer = np.ones(2 * 1024 * 1024)  # 16 MB, held by the kernel's function

    @cuda.jit
    def scale(out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = buffer[i]

    return scale


out = np.zeros(4)
start = rss()
refs = []
for _ in range(50):
    kernel = make_kernel()
    kernel[1, 4](out)  # L:launch
    refs.append(weakref.ref(kernel))
    del kernel
gc.collect()
print(json.dumps({
    "alive": sum(r() is not None for r in refs),
    "grown_mb": (rss() - start) / 2**20,
    "sites": len(callsite.sites),
    "names": kname.names(),
}))
"""


def test_simulator_kernels_holding_16_mb_each_are_freed_after_one_launch(tmp_path) -> None:
    script = tmp_path / "memory_app.py"
    script.write_text(textwrap.dedent(SIMULATOR_MEMORY))
    env = {k: v for k, v in os.environ.items() if not cleaned(k, ("KNAME",))}
    env.update(PYTHONPATH=str(REPO), NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    line = next(
        i for i, text in enumerate(textwrap.dedent(SIMULATOR_MEMORY).splitlines(), 1)
        if "L:launch" in text
    )  # fmt: skip
    assert out["names"] == {f"<module> memory_app.py:{line}": 50}
    assert out["alive"] == 0  # every kernel, and so its 16 MB, was freed
    assert out["sites"] == 0  # and its site left the cache with it
    assert out["grown_mb"] < 200, out  # kept, the 50 buffers would be 800 MB


# --------------------------------------------------------------------------
# Item 7: eviction is O(1)
# --------------------------------------------------------------------------


class CountingDeque(collections.deque):
    """The eviction queue, counting the entries handed out or looked at."""

    work = 0

    def popleft(self):
        type(self).work += 1
        return super().popleft()

    def __iter__(self):
        for entry in super().__iter__():
            type(self).work += 1
            yield entry


@pytest.fixture
def counted_queue(monkeypatch):
    CountingDeque.work = 0
    queue = CountingDeque()
    monkeypatch.setattr(site_cache, "_queue", queue)
    return queue


def test_each_eviction_takes_the_oldest_site_in_bounded_work(monkeypatch, counted_queue) -> None:
    monkeypatch.setattr(site_cache, "MAX_SITES", 1000)
    launch = kernel_launcher()
    kernel = Kernel("k")
    longest = 0
    runs = [generated_lines(1000, f"gen{i}") for i in range(6)]  # kept: sites go by eviction
    for i, run in enumerate(runs):
        run(launch, kernel)
        longest = max(longest, len(counted_queue))
        # The cache holds exactly the newest 1000 sites: the last function's lines.
        files = {site.name.split()[1] for site in callsite.sites.values()}
        assert files == {f"gen{i}.py:{line}" for line in range(2, 1002)}
    assert CountingDeque.work == 5000  # one queue entry per eviction, whatever the cache holds
    assert longest <= 1000 + site_cache.QUEUE_SLACK
    assert total_launches() == 6000


def test_eviction_past_sites_of_dead_kernels_stays_bounded(monkeypatch, counted_queue) -> None:
    # Sites that left the cache with their kernel leave stale entries in the eviction queue:
    # each is skipped once, and the queue is compacted before it outgrows twice the cache.
    monkeypatch.setattr(site_cache, "MAX_SITES", 500)
    launch = kernel_launcher()
    run = generated_lines(10)
    kept = []
    longest = 0
    for i in range(3000):
        kernel = Kernel("dying")
        run(launch, kernel)  # 10 sites, gone with the kernel
        del kernel
        if i % 5 == 0:
            kept.append(Kernel("kept"))
            run(launch, kept[-1])  # 10 sites that stay, until evicted
        longest = max(longest, len(counted_queue))
    stored = 3000 * 10 + 600 * 10
    assert CountingDeque.work <= 3 * stored  # amortized O(1) per site
    assert longest <= 2 * 500 + site_cache.QUEUE_SLACK
    # What is left is the newest live sites: those of the last kept kernels.
    cached = {key[-1] for key in callsite.sites}
    assert cached == {id(k) for k in kept[-len(cached) :]}
    assert len(cached) >= 49
    assert total_launches() == stored


class InterruptedDeque(collections.deque):
    """The eviction queue, where a signal arrives once while kname takes entries out of it."""

    armed = False

    def interrupt(self) -> None:
        if self.armed:
            self.armed = False
            signal.raise_signal(signal.SIGUSR1)  # its handler runs before this returns

    def popleft(self):
        entry = super().popleft()
        self.interrupt()
        return entry

    def __iter__(self):
        for entry in super().__iter__():
            yield entry
            self.interrupt()


def test_a_site_a_signal_handler_stores_while_the_queue_is_compacted_is_kept(monkeypatch) -> None:
    """Compaction runs inside kname's critical section; a handler launching from a new line there
    stores a site (kname's locks are re-entrant), whose queue entry is kept, and nothing fails."""
    launch, kept = kernel_launcher(), Kernel("kept")
    run = generated_lines(10)
    for _ in range(5):
        run(launch, Kernel("dying"))  # 50 stale queue entries
    run(launch, kept)
    queue = InterruptedDeque(site_cache._queue)
    monkeypatch.setattr(site_cache, "_queue", queue)
    handler_line = compile("launch(kernel)", "handler.py", "exec")

    def on_signal(signum, frame):
        exec(handler_line, {"launch": launch, "kernel": kept})

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        with callsite._lock:  # as store() holds it
            queue.armed = True
            site_cache._compact_queue()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert kname.names()["<module> handler.py:1"] == 1
    assert sorted(key for key, _ in queue) == sorted(callsite.sites)  # each live site, once


# --------------------------------------------------------------------------
# Item 8: counts are exact across evictions
# --------------------------------------------------------------------------


def test_a_launch_whose_site_is_evicted_while_it_runs_is_counted(monkeypatch) -> None:
    """The interleaving the lost counts came from: a launch has found its site in the cache,
    then other threads' new sites evict it before the launch counts itself."""
    monkeypatch.setattr(site_cache, "MAX_SITES", 4)
    launch = kernel_launcher()
    kernel = Kernel("k")
    others = generated_lines(8, "others")
    launch_here(launch, kernel)  # the site exists: the next launch from there finds it
    wrapper_code = getattr(launch, "__code__", None)  # the C wrapper has none
    fired = []

    def trace_calls(frame, event, arg):
        return evict_once if frame.f_code is wrapper_code else None

    def evict_once(frame, event, arg):
        if event == "line" and not fired and isinstance(frame.f_locals.get("site"), callsite.Site):
            fired.append(frame.f_lineno)
            others(launch, kernel)  # 8 new sites: every cached one is evicted
        return evict_once

    sys.settrace(trace_calls)
    try:
        launch_here(launch, kernel)
    finally:
        sys.settrace(None)
    if not fired:
        pytest.skip("the launch wrapper has no Python frame to interleave with")
    assert kname.names() == {HERE: 2, **{f"run others.py:{line}": 1 for line in range(2, 10)}}


def test_counts_are_exact_while_eight_threads_evict_each_others_sites(monkeypatch) -> None:
    monkeypatch.setattr(site_cache, "MAX_SITES", 16)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    try:
        launch = kernel_launcher()
        kernel = Kernel("k")
        runs = [generated_lines(40, f"thread{i}") for i in range(8)]
        start = threading.Barrier(8)

        def work(run):
            start.wait()
            for _ in range(60):
                run(launch, kernel)

        threads = [threading.Thread(target=work, args=(run,)) for run in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
    assert total_launches() == 8 * 60 * 40
