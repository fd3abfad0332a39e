"""The launch-bound verdict's numbers as the join counts them (profiling/launch_times.py): each
line's timed launch calls, their CPU time and the GPU idle they left, against a model written
from the definition; the C join gives the same (test_native_cupti_join.py compares the two).
And the streams of tests/gpu/verdict_demo.py recorded on the H100 (tests/data/verdict_h100.json:
`VERDICT_DEMO_STREAMS=verdict_h100.json kname profile --trace t.json -- python verdict_demo.py`,
native callback, torch 2.11, CUDA 13), replayed."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from support.gpu_programs import demo_lines
from support.profile_streams import streams

from kname.documents.build import profile_document
from kname.documents.schema import validate
from kname.documents.verdict import LAUNCH_BOUND, LAUNCH_TIMES, site_verdict
from kname.profiling.join import replay
from kname.profiling.launch_times import idle_before
from kname.profiling.records import (
    KERNEL,
    ActivityRecord,
    LaunchRecord,
    Streams,
    load_streams,
    streams_from_json,
    streams_to_json,
)

RECORDED = Path(__file__).parent.parent / "data" / "verdict_h100.json"
LINE = demo_lines("verdict_demo.py")

instants = st.integers(0, 10**12)


@given(start=instants, previous_end=instants, enter=instants)
def test_the_idle_before_work_is_within_both_the_wait_since_the_launch_and_since_the_last_end(
    start, previous_end, enter
) -> None:
    idle = idle_before(start, previous_end, enter)
    assert 0 <= idle <= max(0, start - enter)
    assert idle <= max(0, start - previous_end)
    assert idle == max(0, min(start - enter, start - previous_end))


def expected_launch_times(stream: Streams) -> dict[str, tuple[int, int, int]]:
    """{site: (calls, cpu_ns, idle_ns)} by the definition: each outermost timed launch call at
    its first GPU record (in the order the join is given them; the record may carry the id of a
    call made inside it) where that is a kernel, and the
    idle before that record on its stream from the later of the stream's last end and the
    call's enter."""
    launches = {launch.correlation_id: launch for launch in stream.launches}
    waiting = {
        launch.correlation_id: (launch.start, launch.end)
        for launch in stream.launches
        if not launch.parent and not launch.graph
    }
    outer_of = {launch.correlation_id: launch.parent for launch in stream.launches if launch.parent}
    ends: dict[tuple[int, int], int] = {}
    times: dict[str, list[int]] = {}
    for record in stream.activities:
        launch = launches.get(record.correlation_id)
        if launch is None:
            continue  # never joined: it ends no stream's work either
        stream_key = (record.device, record.stream)
        last = ends.get(stream_key, 0)
        graph = bool(record.graph_id or record.graph_node_id)
        outer = outer_of.pop(record.correlation_id, record.correlation_id)
        call = None if graph else waiting.pop(outer, None)
        if call is not None and record.kind == KERNEL and call[1] > call[0] > 0:
            site = times.setdefault(launch.site, [0, 0, 0])
            site[0] += 1
            site[1] += call[1] - call[0]
            site[2] += max(0, record.start - max(last, call[0])) if last else 0
        ends[stream_key] = max(last, record.end)
    return {site: tuple(numbers) for site, numbers in times.items()}


@given(streams())
def test_each_line_has_the_launch_times_of_its_outermost_timed_calls_and_the_idle_they_left(
    stream,
) -> None:
    profile = replay(stream)
    got = {
        name: (site.launch_calls, site.launch_cpu_ns, site.idle_ns)
        for name, site in profile.sites.items()
        if site.launch_calls
    }
    assert got == expected_launch_times(stream)


def test_a_stream_left_empty_while_a_tiny_kernel_was_launched_is_idle_from_the_launch_only():
    # Kernel 1 runs 0-100; the program sleeps; the launch of kernel 2 enters at 1000, returns
    # at 1400, and the kernel starts at 1600: 600 ns of idle are the launch's, not 900.
    launches = [
        LaunchRecord(1, 1, "a.py:1", "cuLaunchKernel", 10, 20),
        LaunchRecord(2, 1, "a.py:2", "cuLaunchKernel", 1000, 1400),
    ]
    records = [
        ActivityRecord("kernel", 1, "k", 50, 100, stream=7),
        ActivityRecord("kernel", 2, "k", 1600, 1650, stream=7),
    ]
    sites = replay(Streams(launches, records)).sites
    assert (sites["a.py:2"].launch_calls, sites["a.py:2"].launch_cpu_ns) == (1, 400)
    assert sites["a.py:2"].idle_ns == 600
    assert sites["a.py:1"].idle_ns == 0  # the stream's first work: nothing before it to wait on


def test_a_copy_or_a_set_is_no_timed_launch_its_call_may_wait_for_the_gpu():
    launches = [
        LaunchRecord(1, 1, "a.py:1", "cuMemcpyHtoD", 10, 9000),
        LaunchRecord(2, 1, "a.py:2", "cuLaunchKernel", 9100, 9200),
    ]
    records = [
        ActivityRecord("memcpy", 1, "[memcpy HtoD]", 100, 8900, stream=7),
        ActivityRecord("kernel", 2, "k", 9300, 9350, stream=7),
    ]
    sites = replay(Streams(launches, records)).sites
    assert sites["a.py:1"].launch_calls == 0
    assert (sites["a.py:2"].launch_calls, sites["a.py:2"].idle_ns) == (1, 200)  # from 9100


def test_streams_recorded_before_launch_calls_were_timed_after_knames_work_give_no_times(
    tmp_path,
):
    launches = [LaunchRecord(1, 1, "a.py:1", "cuLaunchKernel", 10, 9000)]
    records = [ActivityRecord("kernel", 1, "k", 100, 200, stream=7)]
    text = streams_to_json(Streams(launches, records)).replace(
        '"kname_streams": 3', '"kname_streams": 2'
    )
    old = streams_from_json(text, "old.json")
    assert not old.timed_calls and replay(old).sites["a.py:1"].launch_calls == 0
    again = streams_from_json(streams_to_json(old), "again.json")  # saved again: still format 2
    assert not again.timed_calls and replay(again).sites["a.py:1"].launch_calls == 0


def test_a_kernel_whose_record_carries_the_inner_calls_id_times_the_outer_call():
    # cudaLaunchKernel (10-900) calls cuLaunchKernel (100-800); the kernel's record carries the
    # driver call's id, as CUDA 12 gave it on the H200 (tests/data/profile_h200.json).
    launches = [
        LaunchRecord(2, 1, "a.py:1", "cuLaunchKernel", 100, 800, False, 1),
        LaunchRecord(1, 1, "a.py:1", "cudaLaunchKernel", 10, 900),
    ]
    records = [ActivityRecord("kernel", 2, "k", 1000, 1100, stream=7)]
    site = replay(Streams(launches, records)).sites["a.py:1"]
    assert (site.launch_calls, site.launch_cpu_ns) == (1, 890)


def recorded_sites() -> dict[str, dict]:
    """The replayed profile's sites of tests/data/verdict_h100.json, by their marker."""
    document = validate(profile_document(replay(load_streams(str(RECORDED)))), RECORDED.name)
    marker = {number: name for name, number in LINE.items()}
    lines = {int(site["name"].rsplit(":", 1)[1]): site for site in document["sites"]}
    return {marker[line]: site for line, site in lines.items() if line in marker}


def test_on_the_h100_a_loop_of_tiny_kernels_is_launch_bound_and_a_large_matmul_is_not() -> None:
    sites = recorded_sites()
    tiny, matmul = sites["tiny"], sites["matmul"]
    assert tiny["launches"] == tiny[LAUNCH_TIMES]["calls"] == 200  # every call timed, once
    assert site_verdict(tiny) == LAUNCH_BOUND
    assert tiny[LAUNCH_TIMES]["idle_ns"] > tiny["gpu_ns"]  # the GPU mostly waited on the loop
    assert matmul[LAUNCH_TIMES]["calls"] == matmul["launches"] == 4
    assert site_verdict(matmul) == ""
    # torch's cudaLaunchKernel around the driver's cuLaunchKernel: one timed call each.
    assert all(site[LAUNCH_TIMES]["calls"] <= site["launches"] for site in sites.values()
               if LAUNCH_TIMES in site)  # fmt: skip
