"""The pools' hooks (memory_hooks.py): each block charged to the line that asked for it.

CuPy and torch cannot allocate without a GPU: their hook interfaces are stood in for here by
the smallest objects with the same names (cupy.cuda.MemoryHook, entered per thread; torch's
GPU-trace registry and torch.cuda.memory_allocated), which call kname's hook the way the
libraries do (tests/gpu/test_gpu_memory.py runs the real ones).
"""

from __future__ import annotations

import ctypes
import functools
import signal
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import ClassVar
from unittest.mock import ANY

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import c10_stand_in

from kname import callsite, walk
from kname.documents.backward_lines import UNKNOWN, backward_site
from kname.profiling import backward, memory_hooks, torch_tracker
from kname.profiling.capture import NO_PYTHON_FRAME, SITE_KEY, UNNAMED, site_of_frame
from kname.profiling.memory import Ledger
from kname.profiling.memory_hooks import (
    CUPY,
    TORCH,
    PoolHooks,
    cupy_hook,
    native_memory,
    sizes_of,
    torch_hook,
)

MIB = 1 << 20
SITE_OF_TEST = (
    "test_the_c_hook_hands_its_events_over_every_batch_and_at_each_take test_memory_hooks.py"
)


class StandInMemoryHook:
    """cupy.cuda.MemoryHook's interface: `with hook:` puts it in this thread's list."""

    active: ClassVar[dict[int, list]] = {}

    def __enter__(self):
        StandInMemoryHook.active.setdefault(threading.get_ident(), []).append(self)
        return self

    def __exit__(self, *exc):
        StandInMemoryHook.active[threading.get_ident()].remove(self)


def cupy_stand_in() -> types.SimpleNamespace:
    return types.SimpleNamespace(cuda=types.SimpleNamespace(MemoryHook=StandInMemoryHook))


def this_line(offset: int = 0) -> int:
    return sys._getframe(1).f_lineno + offset


def test_a_cupy_block_is_charged_to_the_line_that_asked_and_its_free_to_that_line_too(named):
    hooks = PoolHooks()
    hooks.active = True
    hook = cupy_hook(cupy_stand_in(), hooks)
    line = this_line(+1)
    hook.malloc_postprocess(device_id=0, size=MIB, mem_size=MIB, mem_ptr=0x10, pmem_id=0x1)
    hook.free_postprocess(device_id=0, mem_size=MIB, mem_ptr=0x10, pmem_id=0x1)
    (site,) = hooks.ledgers[CUPY].sites
    assert site.endswith(f"test_memory_hooks.py:{line}")
    assert hooks.ledgers[CUPY].site_dicts()[site]["freed"] == MIB


def test_stopped_hooks_charge_nothing_and_cupys_is_taken_out_on_its_own_thread(named):
    hooks = PoolHooks()
    hooks.active = True
    hooks._hook_cupy(cupy_stand_in())
    (hook,) = StandInMemoryHook.active[threading.get_ident()]
    elsewhere = threading.Thread(target=hooks.stop)  # a --duration timer's thread
    elsewhere.start()
    elsewhere.join()
    assert StandInMemoryHook.active[threading.get_ident()] == [hook]  # left in, inert
    hook.malloc_postprocess(device_id=0, size=8, mem_size=512, mem_ptr=0x20, pmem_id=0x1)
    assert CUPY not in hooks.ledgers
    hooks._hook_cupy(cupy_stand_in())
    hooks.stop()
    assert len(StandInMemoryHook.active[threading.get_ident()]) == 1


def test_a_fault_in_a_hook_is_one_line_and_the_allocation_goes_on(named, capsys, monkeypatch):
    from kname import _warnings

    monkeypatch.setattr(_warnings, "_said", set())

    def broken(frame):
        raise RuntimeError("no site")

    hooks = PoolHooks(site_of=broken)
    hooks.active = True
    hook = cupy_hook(cupy_stand_in(), hooks)
    for _ in range(2):
        hook.malloc_postprocess(device_id=0, size=8, mem_size=512, mem_ptr=0x20, pmem_id=0x1)
    err = capsys.readouterr().err
    assert err.count("charging a CuPy allocation") == 1 and "no site" in err


class StandInRegistry:
    """torch._utils.CallbackRegistry's interface: torch's C++ calls its fire_callbacks."""

    def __init__(self) -> None:
        self.callback_list: list = []

    def add_callback(self, callback) -> None:
        self.callback_list.append(callback)

    def fire_callbacks(self, *args) -> None:
        for callback in self.callback_list:
            callback(*args)


class StandInTorch:
    """torch's pieces TorchBlocks uses: the GPU trace's registries (torch.cuda._gpu_trace), the
    allocation history (_record_memory_history, _snapshot) and is_initialized. alloc() and
    free() do what torch's allocator does (the history first) and give back the trace's event,
    the registry's fire_callbacks(address) as torch's C++ looks it up: the caller calls it, so
    that it runs with the caller's frame running and no frame between, as from torch's C++."""

    def __init__(self, monkeypatch, clear_history: bool = True) -> None:
        self.allocation, self.deallocation = StandInRegistry(), StandInRegistry()
        self.history: list[dict] = []
        self.recording = False
        self.held: dict[int, int] = {}
        trace = types.ModuleType("torch.cuda._gpu_trace")
        trace.MemoryAllocationCallbacks = self.allocation
        trace.MemoryDeallocationCallbacks = self.deallocation
        memory = types.SimpleNamespace(
            _record_memory_history=self.record if clear_history else self.record_without_clear,
            _snapshot=self.snapshot,
        )
        cuda = types.ModuleType("torch.cuda")
        cuda._gpu_trace, cuda.memory = trace, memory
        cuda.is_initialized = lambda: False
        self.queued: list[Callable[[], None]] = []  # torch.cuda._lazy_call's, run as CUDA starts
        cuda._lazy_call = self.queued.append
        self.module = types.ModuleType("torch")
        self.module.cuda = cuda
        self.module._C = types.SimpleNamespace(_activate_gpu_trace=lambda: None)
        for name, module in (("torch", self.module), ("torch.cuda", cuda),
                             ("torch.cuda._gpu_trace", trace)):  # fmt: skip
            monkeypatch.setitem(sys.modules, name, module)

    def record(self, enabled, context, stacks, max_entries, clear_history=False):
        self.recording = enabled == "all"
        if clear_history:
            self.history.clear()

    def record_without_clear(self, enabled, context, stacks, max_entries):
        self.recording = enabled == "all"

    def snapshot(self) -> dict:
        blocks = [
            {"address": a, "size": n, "state": "active_allocated"} for a, n in self.held.items()
        ]
        return {"device_traces": [list(self.history)], "segments": [{"blocks": blocks}]}

    def start_cuda(self) -> None:
        """torch's CUDA starting: the calls queued for it run."""
        for call in self.queued:
            call()
        self.module.cuda._lazy_call = lambda call: call()

    def alloc(self, address: int, size: int) -> Callable[[], None]:
        self.held[address] = size
        if self.recording:
            entry = {"action": "alloc", "addr": address, "size": size}
            self.history.append(entry | {"time_us": time.time_ns() // 1000})
        return functools.partial(self.allocation.fire_callbacks, address)

    def free(self, address: int) -> Callable[[], None]:
        del self.held[address]
        return functools.partial(self.deallocation.fire_callbacks, address)


def native_or_skip(path: str) -> None:
    if path == "native" and native_memory() is None:
        pytest.skip("kname._native_cupti (TorchMemory) is not built here")


PATHS = pytest.mark.parametrize("path", ["native", "python"])


def torch_hooks(torch: StandInTorch, path: str, site_of=None) -> PoolHooks:
    native_or_skip(path)
    hooks = PoolHooks(site_of=site_of)
    hooks.active = True
    hooks._undo.append(torch_hook(torch.module, hooks, path=path))
    return hooks


def tracker_or_skip(tmp_path_factory, monkeypatch, cache=None) -> c10_stand_in.StandIn:
    """The stand-in torch allocator (tests/support/c10_stand_in), and kname's tracker built
    against it (the process's, or another copy kept in `cache`) standing in for torch's."""
    if c10_stand_in.CXX is None or memory_hooks.tracker_memory() is None:
        pytest.skip("no C++ compiler, or kname._native_cupti cannot take the tracker's events")
    stand_in = c10_stand_in.ready(tmp_path_factory)
    tracker = stand_in.tracker if cache is None else c10_stand_in.another_copy(stand_in, cache)
    monkeypatch.setattr(torch_tracker, "torch_build", lambda torch: stand_in.build)
    monkeypatch.setattr(torch_tracker, "load", lambda build: tracker)
    return stand_in


def tracker_event(stand_in: c10_stand_in.StandIn, torch: StandInTorch, address: int, size: int):
    """The stand-in allocator's event for a block at `address` (freed if held, else handed out),
    fired from C++ when called; `torch` keeps what is held."""
    fire = stand_in.allocator.stand_in_fire
    if address in torch.held:
        del torch.held[address]
        return functools.partial(fire, c10_stand_in.FREE_REQUESTED, address, 0)
    torch.held[address] = size
    return functools.partial(fire, c10_stand_in.ALLOC, address, size)


def charged(hooks: PoolHooks) -> dict[str, dict[str, int]]:
    """{line number: its numbers} of the torch ledger, settled."""
    hooks.settle()
    return {
        name.rsplit(":", 1)[1]: numbers
        for name, numbers in hooks.ledgers[TORCH].site_dicts().items()
    }


@PATHS
def test_a_torch_block_is_sized_from_torchs_history_and_charged_to_the_calling_line(
    named, monkeypatch, path
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, path)
    line = this_line(+1)
    torch.alloc(0x100, 16 * MIB)()
    torch.free(0x100)()
    torch.alloc(0x100, 2 * MIB)()  # the same block again, smaller: its own size
    sites = charged(hooks)
    assert sites[str(line)]["allocated"] == sites[str(line)]["freed"] == 16 * MIB
    assert sites[str(line + 2)]["allocated"] == 2 * MIB and sites[str(line + 2)]["freed"] == 0
    assert torch.history == []  # read, then cleared
    assert hooks.ledgers[TORCH].unmatched_frees == 0


@PATHS
def test_a_torch_block_the_history_missed_is_sized_from_the_blocks_held(named, monkeypatch, path):
    torch = StandInTorch(monkeypatch, clear_history=False)
    hooks = torch_hooks(torch, path)
    torch.record = lambda **settings: None  # a history that records nothing
    torch.module.cuda.memory._record_memory_history = torch.record
    fire = [torch.alloc(0x200, 4 * MIB), torch.alloc(0x300, 1 * MIB)]
    del torch.held[0x300]  # freed before its event was read, unseen: not followed
    for event in fire:
        event()
    hooks.stop()  # settles
    ledger = hooks.ledgers[TORCH]
    assert ledger.peak == 4 * MIB and ledger.untracked == 1


@PATHS
def test_torchs_history_keeps_allocations_only_where_torch_can_skip_the_rest(
    named, monkeypatch, path
):
    torch = StandInTorch(monkeypatch)
    settings: list[dict] = []
    torch.module.cuda.memory._record_memory_history = lambda **given: settings.append(given)
    torch_hooks(torch, path)
    torch.alloc(0x100, MIB)()  # the first event starts the history
    assert settings[-1]["skip_actions"] == ["free_requested", "free_completed"]
    assert settings[-1]["context"] is None  # no stacks


def on_a_thread_started_in_c(call: Callable[[], object]) -> None:
    """call() on a thread made by pthread_create (through ctypes), as torch's autograd threads
    are: the call has no Python frame below it."""
    libc = ctypes.CDLL(None)
    start = ctypes.CFUNCTYPE(ctypes.c_void_p)(call)  # no frame of its own; its argument unread
    thread = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(thread), None, start, None) == 0
    assert libc.pthread_join(thread, None) == 0


@PATHS
def test_a_torch_block_from_a_thread_with_no_python_frame_is_charged_not_lost(
    named, monkeypatch, capsys, path
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, path)
    # torch's allocator fires its trace from the backward pass's thread, no Python frame there.
    on_a_thread_started_in_c(torch.alloc(0x400, 2 * MIB))
    hooks.settle()
    assert hooks.ledgers[TORCH].site_dicts()[NO_PYTHON_FRAME]["allocated"] == 2 * MIB
    assert "charging a torch allocation" not in capsys.readouterr().err


@PATHS
def test_a_torch_block_of_a_backward_pass_goes_to_its_forward_line_only_where_one_is_known(
    named, monkeypatch, path
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, path)
    # The forward line of the node running as each block comes: known, then not.
    lines = iter(["model.py:12 forward", UNKNOWN])
    monkeypatch.setattr(backward, "_forward_line", lambda: next(lines))
    backward.collect(lambda frame: "train.py:9 loss.backward()")
    try:
        scope = backward.enter(sys._getframe(), autograd=True)
        on_a_thread_started_in_c(torch.alloc(0x400, 2 * MIB))
        on_a_thread_started_in_c(torch.alloc(0x800, MIB))
        backward.leave(scope)
    finally:
        backward.collect(None)
    hooks.settle()
    assert {name: n["allocated"] for name, n in hooks.ledgers[TORCH].site_dicts().items()} == {
        backward_site("train.py:9 loss.backward()", "model.py:12 forward"): 2 * MIB,
        "train.py:9 loss.backward()": MIB,  # as the tracker charges it: the pass's row
    }


@PATHS
def test_a_block_from_library_code_is_named_after_the_user_line_without_a_walk_once_cached(
    named, monkeypatch, path
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, path)
    walks = []
    stack = walk.stack
    monkeypatch.setattr(walk, "stack", lambda *args, **kw: walks.append(1) or stack(*args, **kw))
    line = this_line(+2)
    for address in (0x100, 0x200, 0x300):  # threading's run (library code) fires the event
        threading.Thread(target=torch.alloc(address, MIB)).run()
    (name,) = charged(hooks)
    assert name == str(line) and hooks.ledgers[TORCH].site_dicts()
    assert len(walks) == 1  # kname's rules once, for the first; the cached site after


@PATHS
def test_a_fault_finding_a_torch_blocks_line_is_said_once_and_the_block_still_charged(
    named, monkeypatch, capsys, path
):
    from kname import _warnings

    monkeypatch.setattr(_warnings, "_said", set())

    def broken(frame):
        raise RuntimeError("no site")

    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, path, site_of=broken)
    for address in (0x100, 0x200):
        torch.alloc(address, MIB)()
    hooks.settle()
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no site" in err
    assert sum(s.allocations for s in hooks.ledgers[TORCH].sites.values()) == 2


@PATHS
def test_a_ctrl_c_while_a_torch_blocks_line_is_found_reaches_the_program(
    named, monkeypatch, request, path
):
    def interrupted(frame):
        raise KeyboardInterrupt

    # Python's SIGINT handler, which a process started where SIGINT is ignored (a background
    # job of a shell) does not have: the C hook puts the interrupt back as a pending SIGINT.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, path, site_of=interrupted)
    with pytest.raises(KeyboardInterrupt):
        torch.alloc(0x100, MIB)()
        for _ in range(1_000_000):  # the C hook's: raised at the program's next check
            pass
    hooks.settle()
    assert len(hooks.ledgers.get(TORCH, Ledger()).sites) <= 1  # charged, or not, but no fault


def test_the_c_hook_hands_its_events_over_every_batch_and_at_each_take(named):
    native_or_skip("native")
    settles: list[list] = []
    events = native_memory()(
        sites=callsite.sites, kinds=callsite._kinds, site_key=SITE_KEY,
        site_of_frame=site_of_frame, unnamed=UNNAMED,
        settle=lambda: settles.append(events.take()), batch=3,
    )  # fmt: skip
    allocated = events.callback(False, None, [])
    freed = events.callback(True, None, [])
    line = this_line(+3)
    for address in range(7):  # frees at even addresses, allocations at odd ones
        if address % 2:
            allocated(address)
        else:
            freed(address)
    assert [len(batch) for batch in settles] == [3, 3]
    (last,) = events.take()
    assert [(a, site) for a, site, _ in settles[0]] == [(0, None), (1, ANY), (2, None)]
    assert settles[0][1][1].endswith(f"test_memory_hooks.py:{line}")
    assert last[:2] == (6, None) and events.take() == [] and events.take_fault() is None


@PATHS
def test_torchs_own_registered_callbacks_still_run_and_stopped_hooks_charge_nothing(
    named, monkeypatch, path
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, path)
    sanitizer: list[int] = []  # another user of the trace, such as torch's CUDA sanitizer
    torch.allocation.add_callback(sanitizer.append)
    torch.alloc(0x100, MIB)()
    hooks.active = False  # a profile paused
    torch.alloc(0x300, MIB)()
    hooks.active = True
    hooks.stop()
    torch.alloc(0x200, MIB)()
    assert sanitizer == [0x100, 0x300, 0x200]
    assert "fire_callbacks" not in vars(torch.allocation)  # torch's own, back in place
    assert [s.allocations for s in hooks.ledgers[TORCH].sites.values()] == [1]


ADDRESSES = st.sampled_from([0x100, 0x200, 0x300])


def fire_from_line_a(fire):
    fire()


def fire_from_line_b(fire):
    fire()  # another line


def fire_in_library_code(fire):
    threading.Thread(target=fire).run()


FIRING = [fire_from_line_a, fire_from_line_b, fire_in_library_code, on_a_thread_started_in_c]
EVENTS = st.lists(
    st.tuples(st.sampled_from(range(len(FIRING))), ADDRESSES, st.integers(1, 1 << 30)),
    max_size=40,
)


@pytest.mark.parametrize("other", ["native", "tracker"])
@given(EVENTS, st.sampled_from([1, 3, 64]))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_the_c_hook_and_the_tracker_charge_the_same_events_to_the_same_lines_as_the_python_hook(
    named, tmp_path_factory, other, events, batch
):
    ledgers = []
    for path in (other, "python"):
        with pytest.MonkeyPatch.context() as monkeypatch:
            stand_in = tracker_or_skip(tmp_path_factory, monkeypatch) if path == "tracker" else None
            monkeypatch.setattr(memory_hooks, "TORCH_BATCH", batch)
            torch = StandInTorch(monkeypatch)
            torch.start_cuda()
            hooks = torch_hooks(torch, path)
            for firing, address, size in events:  # a block there is freed, else allocated
                if stand_in is not None:  # fired by the stand-in allocator, from C++
                    event = tracker_event(stand_in, torch, address, size)
                elif address in torch.held:
                    event = torch.free(address)
                else:
                    event = torch.alloc(address, size)
                FIRING[firing](event)
            hooks.stop()
            ledgers.append(hooks.ledgers.get(TORCH))
    charged_there, python = ledgers
    if python is None:
        assert charged_there is None
        return
    assert charged_there.site_dicts() == python.site_dicts()
    assert (
        charged_there.peak,
        charged_there.live,
        charged_there.unmatched_frees,
        charged_there.untracked,
    ) == (python.peak, python.live, python.unmatched_frees, python.untracked)


def test_the_tracker_is_attached_once_torchs_cuda_starts(named, tmp_path_factory, monkeypatch):
    stand_in = tracker_or_skip(tmp_path_factory, monkeypatch)
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch, "tracker")
    torch.start_cuda()  # torch's allocator is made as CUDA starts: trackers attach to it then
    # Read after the start: a tracker is attached once per process, so where this test runs
    # first in its worker, none is there before.
    attached = stand_in.allocator.stand_in_trackers()
    line = this_line(+1)
    tracker_event(stand_in, torch, 0x100, MIB)()
    hooks.stop()
    assert attached >= 1 and len(torch.queued) == 1
    assert list(charged(hooks)) == [str(line)]
    assert "fire_callbacks" not in vars(torch.allocation)  # no GPU trace hook


@pytest.mark.parametrize(
    "setting",
    [("KNAME_PROFILE_TORCH_TRACKER", "0"), ("KNAME_PROFILE_BACKWARD", "1")],
    ids=["tracker-off", "backward-lines"],
)
def test_without_kname_profile_torch_tracker_torch_is_followed_through_its_gpu_trace(
    named, tmp_path_factory, monkeypatch, capsys, setting
):
    """The tracker turned off, or backward per forward line on (the GPU trace's hook names a
    backward block by its forward line; the tracker cannot without the GIL): no line said."""
    stand_in = tracker_or_skip(tmp_path_factory, monkeypatch)
    capsys.readouterr()  # the stand-in's tracker compiled, where this test runs first
    monkeypatch.setenv(*setting)
    torch = StandInTorch(monkeypatch)
    torch.start_cuda()
    hooks = PoolHooks()
    hooks.active = True
    hooks._undo.append(torch_hook(torch.module, hooks))
    tracker_event(stand_in, torch, 0x100, MIB)()  # the tracker's event: not followed
    torch.alloc(0x200, MIB)()  # the GPU trace's
    hooks.stop()
    ((address, _),) = [(a, s) for a, s in hooks.ledgers[TORCH]._blocks.items()]
    assert address == 0x200 and capsys.readouterr().err == ""


def test_where_torch_refuses_the_tracker_one_line_says_why_and_its_gpu_trace_is_used(
    named, tmp_path_factory, tmp_path, monkeypatch, capsys
):
    from kname import _warnings

    monkeypatch.setattr(_warnings, "_said", set())
    # Another copy of the tracker, not attached to torch yet.
    stand_in = tracker_or_skip(tmp_path_factory, monkeypatch, tmp_path)
    monkeypatch.delenv("KNAME_PROFILE_TORCH_TRACKER", raising=False)  # on by default
    stand_in.allocator.stand_in_refuse(1)
    try:
        torch = StandInTorch(monkeypatch)
        torch.start_cuda()
        hooks = PoolHooks()
        hooks.active = True
        hooks._undo.append(torch_hook(torch.module, hooks))
    finally:
        stand_in.allocator.stand_in_refuse(0)
    line = this_line(+1)
    torch.alloc(0x100, MIB)()
    assert list(charged(hooks)) == [str(line)]  # through torch's GPU trace
    (said,) = capsys.readouterr().err.splitlines()
    assert "torch refused the tracker: the stand-in allocator refuses trackers" in said
    hooks.stop()


@given(
    st.lists(st.tuples(ADDRESSES, st.integers(1, 1 << 40)), max_size=30),
    st.sampled_from(["whole", "missed", "extra"]),
)
def test_allocations_take_the_historys_sizes_at_their_address_in_order(allocations, history_is):
    events = []
    for address, _ in allocations:
        events += [(address, "a.py:1", 0), (address, None, 0)]
    history: dict[int, list[int]] = {}
    for address, size in allocations:
        history.setdefault(address, []).append(size)
    for address, sizes in history.items():
        # The history missed the first allocation there (a late callback), or has one more
        # at the end (a callback not come yet).
        history[address] = {"whole": sizes, "missed": sizes[1:], "extra": [*sizes, 7]}[history_is]
    sizes = sizes_of(events, history, {})
    seen: dict[int, int] = {}
    for (address, site, _), size in zip(events, sizes, strict=True):
        if site is None:
            assert size is None
            continue
        order = seen[address] = seen.get(address, -1) + 1
        if history_is == "missed" and order == 0:
            assert size is None  # freed since: not followed
        else:
            assert size == [n for a, n in allocations if a == address][order]


def test_a_block_the_history_missed_takes_its_held_size_unless_freed_since():
    events = [(0x100, "a.py:1", 0), (0x100, None, 0), (0x200, "a.py:2", 0), (0x300, "a.py:3", 0)]
    held = {0x100: 512, 0x200: 1024}
    assert sizes_of(events, {0x300: [2048]}, held) == [None, None, 1024, 2048]
