"""CUDA graphs in `kname profile`: each replayed GPU record goes to the line that made its node.

The join's node table (kname/profiling/graphs.py) is fed what CUPTI's graph resource callbacks
report, and the GPU records of replays come later, in buffers. Programs are built by hypothesis
(tests/support/profile_streams.py, graph_programs): synthetic streams, shaped from CUPTI's headers
and
documentation (cupti_callbacks.h: GRAPHNODE_CREATED inside the launch call captured, CLONED at
instantiation, GRAPH_NODE_UPDATED at cudaGraphExecUpdate, *_DESTROY_STARTING; cupti_activity.h:
graphNodeId and graphId on kernel, memcpy and memset records) and from NVIDIA's
cuda_graphs_trace sample; the brute-force truth is worked out from each program's state at
each replay. Streams recorded on a GPU are replayed in test_profiling_records.py.
"""

from __future__ import annotations

import threading

from hypothesis import given, settings
from support.profile_streams import graph_programs

from kname import _warnings
from kname.profiling.capture import GraphIds, LaunchCapture
from kname.profiling.graphs import GraphNodes
from kname.profiling.join import UNATTRIBUTED, Join, replay
from kname.profiling.records import (
    EXEC_DESTROYED,
    GRAPH_DESTROYED,
    NODE_CLONED,
    NODE_CREATED,
    NODE_DESTROYED,
    NODE_UPDATED,
    ActivityRecord,
    GraphNodeRecord,
    LaunchRecord,
    StreamLog,
    streams_from_json,
    streams_to_json,
)


def fed(events, join: Join | None = None) -> Join:
    """A join given the events in their order: launches, graph nodes, buffers of GPU records."""
    join = join or Join()
    for event in events:
        if isinstance(event, LaunchRecord):
            join.add_launch(event)
        elif isinstance(event, GraphNodeRecord):
            join.add_graph_node(event)
        else:
            join.add_activities(event)
    return join


def totals(profile):
    """({site: {kernel: (launches, gpu_ns)}}, {site: {replay site: ...}}, {site: (n, ns)})."""
    sites = dict(profile.sites)
    if profile.unattributed.launches:
        sites[UNATTRIBUTED] = profile.unattributed
    kernels = {
        name: {k: (v.launches, v.gpu_ns) for k, v in site.kernels.items()}
        for name, site in sites.items()
    }
    replays = {
        name: {k: (v.launches, v.gpu_ns) for k, v in site.replays.items()}
        for name, site in sites.items()
        if site.replays
    }
    unseen = {
        name: (site.unseen.launches, site.unseen.gpu_ns)
        for name, site in sites.items()
        if site.unseen.launches
    }
    return kernels, replays, unseen


@given(graph_programs())
def test_each_replayed_record_goes_to_the_line_that_made_its_node_under_its_replay_line(program):
    profile = fed(program.events).profile()
    assert totals(profile) == (program.expected, program.replays, program.unseen)


@given(graph_programs())
@settings(max_examples=50)
def test_recorded_graph_streams_replay_to_the_same_totals(program):
    text = streams_to_json(program.streams)
    replayed = replay(streams_from_json(text, "graphs.json"))
    assert totals(replayed) == (program.expected, program.replays, program.unseen)


@given(graph_programs())
@settings(max_examples=50)
def test_a_sites_replays_and_unseen_work_are_parts_of_its_totals(program):
    for site in fed(program.events).profile().sites.values():
        replayed = sum(r.launches for r in site.replays.values()) + site.unseen.launches
        assert replayed <= site.launches
        assert sum(r.gpu_ns for r in site.replays.values()) + site.unseen.gpu_ns <= site.gpu_ns


def made(node: int, site: str, graph: int = 1, correlation_id: int = 0) -> GraphNodeRecord:
    return GraphNodeRecord(NODE_CREATED, node, graph, 0, 0, site, correlation_id)


def replayed(correlation_id: int, node: int, name: str = "k") -> ActivityRecord:
    return ActivityRecord("kernel", correlation_id, name, 100, 110, 7, 0, 9, node)


def test_a_graph_replayed_from_two_lines_keeps_both_under_its_capture_line():
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "layer model.py:21"))  # captured: no GPU record
    join.add_graph_node(made(50, "layer model.py:21", correlation_id=1))
    join.add_graph_node(GraphNodeRecord(NODE_CLONED, 51, 1, 2, 50, "", 1))
    join.add_launch(LaunchRecord(2, 1, "run runner.py:26", graph=True))
    join.add_launch(LaunchRecord(3, 2, "warm runner.py:40", graph=True))
    join.add_activities([replayed(2, 51), replayed(3, 51), replayed(2, 51)])
    site = join.profile().sites["layer model.py:21"]
    assert {k: v.launches for k, v in site.replays.items()} == {
        "run runner.py:26": 2,
        "warm runner.py:40": 1,
    }
    assert set(join.profile().sites) == {"layer model.py:21"}


def test_a_node_made_before_profiling_stays_with_its_replay_line_marked_unseen():
    join = Join()
    join.add_launch(LaunchRecord(5, 1, "run runner.py:26", graph=True))
    join.add_activities([replayed(5, 777), replayed(5, 778)])
    site = join.profile().sites["run runner.py:26"]
    assert (site.launches, site.unseen.launches, site.replays) == (2, 2, {})


def test_an_update_names_the_replays_launched_after_it_only():
    nodes = GraphNodes()
    nodes.add(made(1, "old model.py:1"))
    nodes.add(made(2, "new model.py:2"))
    nodes.add(GraphNodeRecord(NODE_CLONED, 3, 1, 5, 1, "", 10))
    nodes.add(GraphNodeRecord(NODE_UPDATED, 2, 0, 5, 3, "", 20))  # 3 takes 2's, after call 20
    assert nodes.site_of(3, 20) == "old model.py:1"  # launched before the update
    assert nodes.site_of(3, 21) == "new model.py:2"


def test_a_clone_of_a_node_not_seen_made_is_not_named_after_the_instantiating_line():
    nodes = GraphNodes()
    nodes.add(made(3, "compile runner.py:12", graph=2))  # CUPTI's copy at instantiation
    nodes.add(GraphNodeRecord(NODE_CLONED, 3, 2, 5, 99, "", 0))  # of node 99, never seen
    assert nodes.site_of(3, 1) is None


def test_destroyed_nodes_leave_the_table_after_a_window_and_memory_stays_bounded():
    nodes = GraphNodes(max_nodes=100, recent_nodes=10)
    for graph in range(1, 1001):
        for node in range(graph * 10, graph * 10 + 5):
            nodes.add(made(node, "layer model.py:21", graph))
        nodes.add(GraphNodeRecord(GRAPH_DESTROYED, 0, graph))
    assert nodes.live == 0 and nodes.kept == 10
    assert nodes.site_of(10005 - 1, 1) == "layer model.py:21"  # lately destroyed: still there
    assert nodes.site_of(10, 1) is None


def test_nodes_go_with_their_executable_graph_or_alone():
    nodes = GraphNodes(recent_nodes=0)
    nodes.add(made(1, "a.py:1"))
    nodes.add(GraphNodeRecord(NODE_CLONED, 2, 1, 7, 1, "", 0))
    nodes.add(GraphNodeRecord(EXEC_DESTROYED, 0, 0, 7))
    assert (nodes.live, nodes.site_of(2, 1)) == (1, None)
    nodes.add(GraphNodeRecord(NODE_DESTROYED, 1, 1))
    assert (nodes.live, nodes.kept) == (0, 0)


def test_past_the_bound_new_nodes_go_to_the_replay_line_and_it_is_said_once(capsys, monkeypatch):
    monkeypatch.setattr(_warnings, "_said", set())
    join = Join(max_nodes=2)
    for node in (1, 2, 3, 4):
        join.add_graph_node(made(node, f"layer model.py:{node}"))
    join.add_launch(LaunchRecord(9, 1, "run runner.py:26", graph=True))
    join.add_activities([replayed(9, node) for node in (1, 2, 3, 4)])
    sites = join.profile().sites
    assert sites["run runner.py:26"].unseen.launches == 2
    assert {"layer model.py:1", "layer model.py:2"} <= set(sites)
    (line,) = capsys.readouterr().err.splitlines()
    assert "more than 2 CUDA graph nodes are live" in line


def test_a_node_made_inside_a_launch_call_takes_its_site_and_one_outside_takes_its_line():
    join, log = Join(), StreamLog()
    capture = LaunchCapture(join, log)
    capture.enter(None, 41, "cudaLaunchKernel", False, 0)
    capture._local.open_calls[-1].site = "layer model.py:21"  # as its walk named it
    inside = capture.graph_node(None, NODE_CREATED, GraphIds(7, 1, 0, 0))
    capture.exit(41, 0)
    outside = capture.graph_node(None, NODE_CREATED, GraphIds(8, 1, 0, 0))
    assert (inside.site, inside.correlation_id) == ("layer model.py:21", 41)
    assert (outside.site, outside.correlation_id) == ("<no Python frame>", 41)
    assert log.graph_nodes == [inside, outside]
    assert join.nodes.site_of(7, 42) == "layer model.py:21"


def test_graph_node_records_from_many_threads_while_records_arrive():
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "run runner.py:26", graph=True))

    def build(first: int) -> None:
        for node in range(first, first + 2000):
            join.add_graph_node(made(node, "layer model.py:21", graph=first))
            join.add_graph_node(GraphNodeRecord(NODE_DESTROYED, node, first))

    threads = [threading.Thread(target=build, args=(n * 10_000,)) for n in range(1, 5)]
    for thread in threads:
        thread.start()
    for _ in range(200):
        join.add_activities([replayed(1, 10_000)])
    for thread in threads:
        thread.join()
    assert join.nodes.live == 0
    assert join.profile().total_launches == 200


def test_a_librarys_graph_made_at_its_first_launchs_line_goes_to_each_replays_line():
    """XLA builds a jitted function's CUDA graph inside the call that first launches it (nodes
    added outside any launch call, at the calling line); a later call from another line replays
    it: that line's run, not the first's."""
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "main app.py:14"))  # the call's plain launch
    join.add_graph_node(made(50, "main app.py:14", correlation_id=1))
    join.add_graph_node(GraphNodeRecord(NODE_CLONED, 51, 1, 2, 50, "", 1))
    join.add_launch(LaunchRecord(2, 1, "main app.py:14", graph=True))
    join.add_launch(LaunchRecord(3, 1, "main app.py:17", graph=True))
    join.add_activities([replayed(2, 51), replayed(3, 51), replayed(3, 51)])
    sites = join.profile().sites
    assert {name: site.launches for name, site in sites.items()} == {
        "main app.py:14": 1,
        "main app.py:17": 2,
    }
    assert list(sites["main app.py:17"].replays) == ["main app.py:17"]


def test_a_graph_recorded_at_build_time_goes_to_each_replays_line_never_compile():
    """torch.compile(mode="reduce-overhead"): cudagraph trees record at build time (the nodes'
    line is marked (compile)) and replay at the calling line, which is the run."""
    join = Join()
    join.add_launch(LaunchRecord(1, 1, "main app.py:21 (compile)"))  # captured: no record
    join.add_graph_node(made(50, "main app.py:21 (compile)", correlation_id=1))
    join.add_graph_node(GraphNodeRecord(NODE_CLONED, 51, 1, 2, 50, "", 1))
    join.add_launch(LaunchRecord(2, 1, "main app.py:21 (compile)", graph=True))  # recording's
    join.add_launch(LaunchRecord(3, 1, "main app.py:21", graph=True))
    join.add_launch(LaunchRecord(4, 1, "main app.py:21", graph=True))
    join.add_activities([replayed(2, 51), replayed(3, 51), replayed(4, 51)])
    sites = join.profile().sites
    assert {name: site.launches for name, site in sites.items()} == {
        "main app.py:21 (compile)": 1,
        "main app.py:21": 2,
    }
    attribution = join.attribution(replayed(4, 51))
    assert (attribution.site, attribution.replayed_at) == ("main app.py:21", "main app.py:21")
