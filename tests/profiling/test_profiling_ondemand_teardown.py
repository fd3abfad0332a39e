"""CUPTI detached after an on-demand window (issue 41), without a GPU.

Unsubscribed, CUPTI stays in the driver's launch path; kname's recorder finalizes it from a
callback at the next driver or runtime API exit (finalize_later: CUPTI's dynamic detach, as
kineto tears it down), and a later subscribe calls a waiting finalize off. The stand-in libcupti
(tests/support/fake_cupti.c) calls back as CUPTI does, for the ids and the whole domains enabled,
and counts its finalizations; a subscriber still there when it is finalized is refused there.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from support.cupti_stand_in import CONCURRENT_KERNEL, CUDA_LAUNCH_KERNEL, DRIVER, StandInBinding

from kname import hotpath
from kname.profiling import native_callback
from kname.profiling.capture import LaunchCapture
from kname.profiling.cupti_collector import CuptiCollector
from kname.profiling.join import Join

native, _ = hotpath.choose(True).cupti()
RUNTIME_API = 2
APIS = [("cuLaunchKernel", False)]


@pytest.fixture
def stand_in(cupti):
    """The stand-in's library; no finalize is left waiting after the test (the module's state is
    the process's)."""
    yield cupti.library
    native.cancel_finalize()


def new_recorder():
    return native.Recorder(
        apis=APIS, sites={}, kinds={}, site_of_frame=lambda frame: "s", site_key="k",
        no_frame="<no frame>", unnamed="<unnamed>", max_pending=1000, max_open_calls=8,
    )  # fmt: skip


def subscribed(path: str):
    recorder = new_recorder()
    assert recorder.subscribe(path)[0] == 0
    assert recorder.enable(DRIVER, CUDA_LAUNCH_KERNEL, 0) == 0
    return recorder


def launch(library, number: int, domain: int = DRIVER) -> tuple[int, int]:
    """A launch API call: whether kname's callback was called at its enter, and at its exit."""
    entered = library.fake_callback(domain, CUDA_LAUNCH_KERNEL, 0, number)
    return entered, library.fake_callback(domain, CUDA_LAUNCH_KERNEL, 1, number)


def test_cupti_is_finalized_at_the_next_api_exit_and_not_before(stand_in, fake_libcupti):
    recorder = subscribed(str(fake_libcupti))
    assert launch(stand_in, 1) == (1, 1)
    assert recorder.unsubscribe() == 0
    _, finalized, _ = native.finalize_state()
    before = stand_in.fake_finalized()
    assert recorder.finalize_later() == 0
    assert native.finalize_state() == (1, finalized, 0)  # waits for an API exit
    # The teardown's callback is not kname's launch callback: the program sees none.
    assert stand_in.fake_callback(RUNTIME_API, CUDA_LAUNCH_KERNEL, 0, 2) == 0
    assert native.finalize_state()[0] == 1 and stand_in.fake_finalized() == before  # an enter
    assert stand_in.fake_callback(RUNTIME_API, CUDA_LAUNCH_KERNEL, 1, 2) == 0  # its exit
    assert native.finalize_state() == (0, finalized + 1, 0)
    assert stand_in.fake_finalized() == before + 1  # once, with no subscriber left
    assert launch(stand_in, 3) == (0, 0)  # and nothing calls back after it


def test_a_subscribe_calls_a_waiting_finalize_off(stand_in, fake_libcupti):
    first = subscribed(str(fake_libcupti))
    first.unsubscribe()
    assert first.finalize_later() == 0
    _, finalized, _ = native.finalize_state()
    before = stand_in.fake_finalized()
    second = subscribed(str(fake_libcupti))  # the next window, before any API call
    assert native.finalize_state() == (0, finalized, 0)
    assert launch(stand_in, 1) == (1, 1)  # the new subscriber's callback, and no finalize
    assert stand_in.fake_finalized() == before and second.counts()["finished"] == 1
    second.unsubscribe()


def test_finalize_later_is_refused_while_subscribed_or_before_subscribing(stand_in, fake_libcupti):
    with pytest.raises(RuntimeError, match="after subscribe"):
        new_recorder().finalize_later()
    recorder = subscribed(str(fake_libcupti))
    with pytest.raises(RuntimeError, match="after subscribe"):
        recorder.finalize_later()
    assert native.finalize_state()[0] == 0
    recorder.unsubscribe()


def test_a_collector_started_again_after_a_finalize_records_again(
    stand_in, fake_libcupti, monkeypatch
):
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: str(fake_libcupti))
    stand_in.fake_reset_activity()
    launches = []
    for window, number in enumerate((1, 2)):
        join = Join()
        collector = CuptiCollector(LaunchCapture(join), join)
        assert collector.start(), collector.not_started
        assert launch(stand_in, number) == (1, 1)
        stand_in.fake_kernel(CONCURRENT_KERNEL, number, 10, 30, 7, 0, 0, 0, b"k")
        collector.stop()
        launches.append(collector.totals.profile().total_launches)
        finalized = stand_in.fake_finalized()
        assert collector.finalize_later()
        assert launch(stand_in, 10 + window) == (0, 0)  # CUPTI's teardown callback only
        assert stand_in.fake_finalized() == finalized + 1
    assert launches == [1, 1]  # each window its launch, after a finalize too
