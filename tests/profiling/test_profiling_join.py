"""The join: GPU records to the call site of their launch, summed per site and per kernel.

Streams are built by hypothesis the way CUPTI produces them (tests/support/profile_streams.py) and
the
join's totals are checked against a brute-force attribution; the cases CUPTI's documentation
describes (graph kernels carry the graph launch's correlation id, untimed records) and the
bounds on memory have their own tests.
"""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from support.profile_streams import counted, expected_totals, streams

from kname.profiling.join import UNATTRIBUTED, Join
from kname.profiling.records import ActivityRecord, ExternalCorrelation, LaunchRecord


def joined(stream, chunks: int = 1) -> Join:
    join = Join()
    for launch in stream.launches:
        join.add_launch(launch)
    step = max(1, len(stream.activities) // chunks)
    for i in range(0, len(stream.activities), step):
        join.add_activities(stream.activities[i : i + step])
    return join


def as_totals(profile) -> dict[str, dict[str, tuple[int, int]]]:
    sites = dict(profile.sites)
    if profile.unattributed.launches:
        sites[UNATTRIBUTED] = profile.unattributed
    return {
        name: {k: (v.launches, v.gpu_ns) for k, v in totals.kernels.items()}
        for name, totals in sites.items()
    }


@given(streams(), st.integers(1, 4))
def test_each_record_goes_to_the_site_of_its_correlation_id(stream, chunks):
    assert as_totals(joined(stream, chunks).profile()) == expected_totals(stream)


@given(streams())
def test_totals_agree_with_the_sum_of_all_records(stream):
    profile = joined(stream).profile()
    records = counted(stream)
    assert profile.total_gpu_ns == sum(r.duration for r in records)
    assert profile.total_launches == len(records)
    assert profile.earlier_records == len(stream.activities) - len(records)
    for totals in [*profile.sites.values(), profile.unattributed]:
        assert totals.launches == sum(k.launches for k in totals.kernels.values())
        assert totals.gpu_ns == sum(k.gpu_ns for k in totals.kernels.values())


@given(streams())
@settings(max_examples=50)
def test_joined_launches_leave_the_pending_table(stream):
    join = joined(stream)
    matched = {r.correlation_id for r in stream.activities}
    for launch in join._pending.values():
        # What stays: graph launches (their kernels keep coming) and launches with no record.
        family = {launch.correlation_id, *join._children.get(launch.correlation_id, ())}
        if launch.parent:
            family.add(launch.parent)
        assert launch.graph or not (family & matched)


def test_graph_kernels_go_to_the_line_that_launched_the_graph():
    # CUPTI gives each kernel of a graph the correlation id of the cuGraphLaunch call.
    join = Join()
    join.add_launch(LaunchRecord(10, 1, "capture app.py:5", "cudaLaunchKernel"))  # in capture
    join.add_launch(LaunchRecord(20, 1, "replay app.py:9", "cudaGraphLaunch", graph=True))
    join.add_launch(LaunchRecord(30, 1, "replay app.py:9", "cudaGraphLaunch", graph=True))
    for correlation_id in (20, 30):
        join.add_activities(
            [ActivityRecord("kernel", correlation_id, name, 100, 150, 7, 0, 5) for name in "abc"]
        )
    profile = join.profile()
    site = profile.sites["replay app.py:9"]
    assert (site.launches, site.gpu_ns) == (6, 300)
    assert {k: v.launches for k, v in site.kernels.items()} == {"a": 2, "b": 2, "c": 2}
    assert profile.unmatched_launches == 1  # the launch during capture never ran as itself
    assert not profile.unattributed.launches


def test_work_launched_before_collection_started_is_left_out():
    join = Join()
    join.add_activities([ActivityRecord("kernel", 3, "running", 0, 40)])  # launched earlier
    join.add_launch(LaunchRecord(10, 1, "step app.py:1"))
    join.add_activities(
        [ActivityRecord("kernel", 10, "k", 0, 5), ActivityRecord("kernel", 4, "x", 0, 1)]
    )
    profile = join.profile()
    assert (profile.total_launches, profile.earlier_records) == (1, 2)
    assert not profile.unattributed.launches


@given(streams(), st.randoms(use_true_random=False))
def test_records_that_come_before_their_launch_record_still_find_its_site(stream, random):
    """Launch records are handed over in order, but a GPU record may come first (a buffer that
    completes while its launch call is still open)."""
    events: list = [[launch] for launch in stream.launches]
    for activity in stream.activities:
        events.insert(random.randint(0, len(events)), activity)
    join = Join()
    for event in events:
        if isinstance(event, list):
            join.add_launch(event[0])
        else:
            join.add_activities([event])
    assert as_totals(join.profile()) == expected_totals(stream)


def test_a_record_with_no_launch_is_unattributed():
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "step app.py:1"))
    join.add_activities(
        [ActivityRecord("kernel", 2, "lost", 0, 40), ActivityRecord("kernel", 1, "k", 0, 5)]
    )
    profile = join.profile()
    assert (profile.unattributed.launches, profile.unattributed.gpu_ns) == (1, 40)
    assert profile.sites["step app.py:1"].gpu_ns == 5


def test_a_nested_driver_call_and_its_runtime_call_leave_together():
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "step app.py:1", "cudaLaunchKernel"))
    join.add_launch(LaunchRecord(2, 1, "step app.py:1", "cuLaunchKernel", parent=1))
    join.add_activities([ActivityRecord("kernel", 2, "k", 0, 5)])
    assert not join._pending and not join._children
    assert join.profile().unmatched_launches == 0


def test_a_second_record_of_a_joined_call_still_finds_its_site():
    # A multi-device cooperative launch: several kernels with one correlation id.
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "step app.py:1", "cuLaunchCooperativeKernelMultiDevice"))
    join.add_activities([ActivityRecord("kernel", 1, "k", 0, 5, device=d) for d in range(4)])
    assert join.profile().sites["step app.py:1"].launches == 4


def test_memory_stays_bounded_on_a_long_run():
    join = Join(max_pending=100, recent_window=50)
    for correlation_id in range(1, 10_001):
        join.add_launch(LaunchRecord(correlation_id, 1, f"site {correlation_id % 7}"))
        join.add_activities([ActivityRecord("kernel", correlation_id, "k", 0, 1)])
        assert len(join._pending) <= 1 and len(join._recent) <= 50
    assert join.profile().total_launches == 10_000


def test_past_the_pending_bound_the_oldest_launches_are_dropped_and_said_once(capsys):
    join = Join(max_pending=100)
    for correlation_id in range(1, 1001):
        join.add_launch(LaunchRecord(correlation_id, 1, "idle app.py:1"))  # records never come
    assert len(join._pending) <= 100
    profile = join.profile()
    assert profile.dropped_launches + profile.unmatched_launches == 1000
    lines = capsys.readouterr().err.splitlines()
    assert len([line for line in lines if "waiting for their GPU records" in line]) == 1


def test_launches_from_many_threads_while_records_arrive():
    join = Join()
    per_thread, threads = 2000, 4

    def launch(base: int) -> None:
        for i in range(per_thread):
            join.add_launch(LaunchRecord(base + i, base, f"thread {base}"))

    workers = [threading.Thread(target=launch, args=(k * 100_000 + 1,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    records = [
        ActivityRecord("kernel", k * 100_000 + 1 + i, "k", 0, 3)
        for k in range(threads)
        for i in range(per_thread)
    ]
    join.add_activities(records)
    profile = join.profile()
    assert {name: s.launches for name, s in profile.sites.items()} == {
        f"thread {k * 100_000 + 1}": per_thread for k in range(threads)
    }
    assert not join._pending


def test_wrapped_launches_are_found_through_external_correlation_ids():
    # What kname's wrapper will do: push an id per launch; CUPTI links the API call to it.
    join = Join()
    join.add_activities([ActivityRecord("kernel", 5, "axpy", 0, 9)])  # before its link
    join.add_externals([ExternalCorrelation(5, 77)], {77: "step app.py:3"})
    join.add_externals([ExternalCorrelation(6, 77)])
    join.add_activities([ActivityRecord("kernel", 6, "axpy", 10, 12)])
    profile = join.profile()
    assert profile.sites["step app.py:3"].launches == 2
    assert profile.sites["step app.py:3"].gpu_ns == 11
    assert not profile.unattributed.launches


def test_untimed_records_count_as_launches_with_no_time():
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "s"))
    join.add_launch(LaunchRecord(2, 1, "s"))
    join.add_activities(
        [ActivityRecord("kernel", 1, "k", 0, 0), ActivityRecord("kernel", 2, "k", 9, 4)]
    )
    site = join.profile().sites["s"]
    assert (site.launches, site.gpu_ns) == (2, 0)


def test_a_snapshot_does_not_change_when_records_keep_arriving():
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "s", graph=True))
    join.add_activities([ActivityRecord("kernel", 1, "k", 0, 5)])
    before = join.profile()
    join.add_activities([ActivityRecord("kernel", 1, "k", 0, 5)])
    assert before.sites["s"].launches == 1 and join.profile().sites["s"].launches == 2


def test_external_links_are_kept_only_for_calls_no_launch_names_and_in_a_window():
    join = Join(recent_window=4)
    join.add_launch(LaunchRecord(1, 1, "s"))
    join.add_externals([ExternalCorrelation(1, 7)], {7: "s"})  # the launch record names it
    join.add_externals([ExternalCorrelation(100 + i, 7) for i in range(10)])  # other API calls
    assert list(join._externals) == [106, 107, 108, 109]
    join.add_activities([ActivityRecord("kernel", 109, "k", 0, 4)])
    join.add_activities([ActivityRecord("kernel", 100, "k", 0, 2)])  # its link left the window
    profile = join.profile()
    assert (profile.sites["s"].launches, profile.unattributed.launches) == (1, 1)
    assert profile.total_gpu_ns == 6  # counted, never lost
