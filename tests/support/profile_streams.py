"""Hypothesis strategies for `kname profile` and saved documents: launch and activity streams,
profiles, documents of schema 2, and launch censuses (schema 1).

Streams are built the way CUPTI produces them: correlation ids that only grow, one GPU record per
kernel launch (sometimes none: a launch during graph capture), several per graph launch, nested
driver calls inside runtime calls, copies and sets, and now and then a record whose launch was
never seen. `expected_totals` computes what the join must give, by brute force. Hostile names
(control characters, lone surrogates) test what reaches a terminal.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import strategies as st

from kname.callsite import COMPILE_MARK
from kname.documents.build import profile_document
from kname.profiling.join import UNATTRIBUTED, KernelTotals, Profile, SiteTotals
from kname.profiling.records import (
    EXEC_DESTROYED,
    GRAPH_DESTROYED,
    KERNEL,
    MEMCPY,
    MEMSET,
    NODE_CLONED,
    NODE_CREATED,
    NODE_DESTROYED,
    NODE_UPDATED,
    ActivityRecord,
    GraphNodeRecord,
    LaunchRecord,
    Streams,
)

SITE_NAMES = ("step app.py:12", "step app.py:13", "main app.py:30", "<no Python frame>", "a / b")
KERNEL_NAMES = ("axpy", "_Z9scale_rawPfi", "ampere_sgemm_128x64_nn", "k<1>", "triton_add_0")
WORK_NAMES = {
    KERNEL: KERNEL_NAMES,
    MEMCPY: ("[memcpy HtoD]", "[memcpy DtoH]"),
    MEMSET: ("[memset]",),
}

durations = st.integers(min_value=0, max_value=5_000_000)


@st.composite
def streams(draw, max_launches: int = 25) -> Streams:
    """Launches in correlation order, their GPU records in any order after them."""
    launches: list[LaunchRecord] = []
    activities: list[ActivityRecord] = []
    correlation = 0
    clock = 1_000
    for _ in range(draw(st.integers(0, max_launches))):
        correlation += draw(st.integers(1, 3))
        site = draw(st.sampled_from(SITE_NAMES))
        kind = draw(st.sampled_from([KERNEL, KERNEL, KERNEL, MEMCPY, MEMSET, "graph"]))
        thread = draw(st.sampled_from([1, 2, 3]))
        start = clock = clock + draw(st.integers(1, 10_000))
        outer = LaunchRecord(correlation, thread, site, "cudaLaunchKernel", start, start + 500)
        outer.graph = kind == "graph"
        launches.append(outer)
        carrier = outer
        if kind != "graph" and draw(st.booleans()):
            # The runtime called the driver: a nested call, same site, its own id.
            correlation += 1
            inner = LaunchRecord(
                correlation,
                thread,
                site,
                "cuLaunchKernel",
                start + 10,
                start + 400,
                False,
                outer.correlation_id,
            )
            launches.append(inner)
            carrier = draw(st.sampled_from([outer, inner]))
        count = draw(st.integers(0, 4)) if kind == "graph" else draw(st.sampled_from([0, 1, 1, 1]))
        work_kind = KERNEL if kind == "graph" else kind
        for _ in range(count):
            activities.append(
                _work(draw, work_kind, carrier.correlation_id, clock, kind == "graph")
            )
    for _ in range(draw(st.integers(0, 2))):  # records whose launch was never seen
        activities.append(_work(draw, KERNEL, correlation + draw(st.integers(1, 5)), clock, False))
    if draw(st.booleans()):  # work launched before collection started, finishing after
        activities.append(_work(draw, KERNEL, 0, clock, False))
    order = draw(st.permutations(range(len(activities))))
    return Streams(launches, [activities[i] for i in order], meta={"pid": 4242})


def _work(draw, kind: str, correlation_id: int, clock: int, in_graph: bool) -> ActivityRecord:
    start = clock + draw(st.integers(0, 1_000_000))
    shape = draw(st.sampled_from(["timed", "timed", "timed", "untimed", "backwards"]))
    if shape == "untimed":
        start = end = 0
    elif shape == "backwards":  # end before start: CUPTI could not time it properly
        end = start - draw(st.integers(1, 100))
    else:
        end = start + draw(durations)
    return ActivityRecord(
        kind,
        correlation_id,
        draw(st.sampled_from(WORK_NAMES[kind])),
        start,
        end,
        draw(st.sampled_from([7, 13, 14])),
        draw(st.sampled_from([0, 0, 1])),
        draw(st.integers(1, 3)) if in_graph else 0,
    )


def counted(stream: Streams) -> list[ActivityRecord]:
    """The records a profile counts: not those older than every launch (work from before)."""
    first = min((launch.correlation_id for launch in stream.launches), default=None)
    site_of = {launch.correlation_id for launch in stream.launches}
    return [
        r
        for r in stream.activities
        if r.correlation_id in site_of or (first is not None and r.correlation_id >= first)
    ]


def expected_totals(stream: Streams) -> dict[str, dict[str, tuple[int, int]]]:
    """{site: {kernel: (records, gpu_ns)}}: each record to the site of its correlation id."""
    site_of = {launch.correlation_id: launch.site for launch in stream.launches}
    totals: dict[str, dict[str, tuple[int, int]]] = {}
    for record in counted(stream):
        site = site_of.get(record.correlation_id, UNATTRIBUTED)
        kernels = totals.setdefault(site, {})
        launches, gpu_ns = kernels.get(record.name, (0, 0))
        kernels[record.name] = (launches + 1, gpu_ns + max(record.end - record.start, 0))
    return totals


# --- backward passes: launches with no Python frame, named after the pass running -------------

BACKWARD_LINES = ("train app.py:40", "train app.py:41", "probe app.py:7")


@st.composite
def backward_runs(draw, max_steps: int = 30) -> list[tuple]:
    """The steps of a run with backward passes, in order: ("open", line) a pass starts at that
    line, on a thread of its own; ("close", k) the k-th of those running ends; ("launch", site)
    a launch API call made by a launch kname wraps (a Python frame: its site); ("frameless",) one
    on a thread with no Python frame (autograd's)."""
    steps: list[tuple] = []
    running = 0
    for _ in range(draw(st.integers(0, max_steps))):
        choices = ["open", "launch", "frameless", "frameless"] + ["close"] * bool(running)
        step = draw(st.sampled_from(choices))
        if step == "open":
            steps.append(("open", draw(st.sampled_from(BACKWARD_LINES))))
            running += 1
        elif step == "close":
            steps.append(("close", draw(st.integers(0, running - 1))))
            running -= 1
        elif step == "launch":
            steps.append(("launch", draw(st.sampled_from(SITE_NAMES[:3]))))
        else:
            steps.append(("frameless",))
    return steps


def frameless_site(running: list[str], no_frame: str, concurrent: str) -> str:
    """What a launch with no Python frame is named while the passes of `running` lines run
    (oldest first): the newest's line, marked `concurrent` beside a pass of another line."""
    if not running:
        return no_frame
    newest = running[-1]
    return newest if set(running) == {newest} else newest + concurrent


PROFILE_SITES = st.sampled_from((*SITE_NAMES, "x.py:1", "y.py:2", "z.py:3"))
PROFILE_KERNELS = st.sampled_from(KERNEL_NAMES)


@st.composite
def profiles(draw, site_names=PROFILE_SITES, kernel_names=PROFILE_KERNELS) -> Profile:
    """A join's result: sites with kernels (part of them CUDA graph work, by the sites that
    replayed it, or replayed with its capture not seen; some with launch times), some
    unattributed work."""
    sites = {}
    for name in draw(st.lists(site_names, max_size=6, unique=True)):
        sites[name] = _totals(draw, draw(st.integers(1, 1000)), kernel_names)
        if draw(st.booleans()):
            _replayed(draw, sites[name], site_names)
        if draw(st.booleans()):
            _timed(draw, sites[name])
    unattributed = _totals(draw, 0, kernel_names) if draw(st.booleans()) else SiteTotals()
    return Profile(sites, unattributed)


def _totals(draw, first: int, kernel_names) -> SiteTotals:
    totals = SiteTotals(first=first)
    for kernel in draw(st.lists(kernel_names, min_size=1, max_size=3, unique=True)):
        launches = draw(st.integers(1, 50))
        gpu_ns = draw(st.integers(0, 10**9))
        totals.kernels[kernel] = KernelTotals(launches, gpu_ns)
        totals.launches += launches
        totals.gpu_ns += gpu_ns
    return totals


def _replayed(draw, totals: SiteTotals, site_names) -> None:
    """Part of `totals` (never more) made graph work: by replay site, and unseen."""
    launches, gpu_ns = totals.launches, totals.gpu_ns
    for replay in draw(st.lists(site_names, max_size=3, unique=True)):
        part = KernelTotals(draw(st.integers(0, launches)), draw(st.integers(0, gpu_ns)))
        totals.replays[replay] = part
        launches, gpu_ns = launches - part.launches, gpu_ns - part.gpu_ns
    if draw(st.booleans()):
        totals.unseen = KernelTotals(draw(st.integers(1, max(launches, 1))), 0)
        totals.unseen.launches = min(totals.unseen.launches, launches)
        totals.unseen.gpu_ns = draw(st.integers(0, gpu_ns))


def _timed(draw, totals: SiteTotals) -> None:
    """Launch calls of `totals` timed (at most one per GPU record): the verdict's numbers."""
    totals.launch_calls = draw(st.integers(1, totals.launches))
    totals.launch_cpu_ns = draw(st.integers(0, 10**9))
    totals.idle_ns = draw(st.integers(0, 10**9))


documents = profiles().map(profile_document)


def of_own_fields(document: dict) -> dict:
    """A profile whose sites keep their schema's own fields alone, as most rank files are
    (still valid: graph work and launch times are parts of a site's numbers)."""
    fields = ("name", "kernel", "lib", "launches", "gpu_ns", "share", "order", "kernels")
    return document | {"sites": [{f: site[f] for f in fields} for site in document["sites"]]}


# Profiles as most rank files are: sites of their own fields alone (schema.py's common form).
plain_documents = documents.map(of_own_fields)


def profile_of(sites: dict[str, tuple[str, int, int]]) -> Profile:
    """A join's result, built by hand, of {name: (kernel, launches, gpu_ns)}, ranked in order."""
    built = {}
    for rank, (name, (kernel, launches, gpu_ns)) in enumerate(sites.items(), 1):
        built[name] = SiteTotals(launches, gpu_ns, rank, {kernel: KernelTotals(launches, gpu_ns)})
    return Profile(built, SiteTotals())


call_site_names = st.builds(
    "{} {}.py:{}".format,
    st.sampled_from(["<module>", "step", "main", "Solver.run"]),
    st.sampled_from(["app", "solver", "pkg/ops", "naïve/ünïcode"]),
    st.integers(1, 5000),
)
# {(call site, kernel): launches}: what census_of makes a census of.
site_counts = st.dictionaries(
    st.tuples(call_site_names, st.sampled_from(["axpy", "scale", "reduce", ""])),
    st.integers(1, 10**9),
    max_size=12,
)


def census_of(counts: dict[tuple[str, str], int]) -> dict:
    """A census of schema 1, built by hand (not by kname), of {(name, kernel): launches}."""
    total = sum(counts.values())
    sites = [
        {"name": name, "kernel": kernel, "lib": "numba", "launches": launches,
         "share": round(launches / total, 6), "order": order}
        for order, ((name, kernel), launches) in enumerate(counts.items(), 1)
    ]  # fmt: skip
    return {"kname": "0.1.0", "schema": 1, "sites": sites, "total_launches": total}


# What a terminal must never get raw: NUL, ESC (ANSI sequences), line breaks and other C0 and C1
# controls, Unicode's line separators, a BOM, and lone surrogates (a file name decoded with
# surrogateescape, or a JSON escape such as "\\ud800"): no UTF-8 encoder writes those.
TERMINAL_HOSTILE = "\x00\x1b\n\r\t\x08\x7f\x9b\u2028\u2029\ufeff\ud800\udcff"
_hostile_text = st.text(
    st.one_of(st.sampled_from(TERMINAL_HOSTILE), st.characters(exclude_categories=())),
    min_size=1,
    max_size=24,
)
# Some begin like a mangled C++ name, so they go through the demangler first.
hostile_names = st.one_of(_hostile_text, _hostile_text.map(lambda text: "_Z" + text))
hostile_documents = st.builds(
    lambda profile, version: profile_document(profile) | {"kname": version},
    profiles(hostile_names, hostile_names),
    hostile_names,
)


def terminal_safe(text: str) -> bool:
    """Whether `text` is lines of printable characters, each ending in a newline, that UTF-8
    can encode: no control character but the newlines that end rows."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return text.endswith("\n") and all(line.isprintable() for line in text.split("\n"))


# --------------------------------------------------------------------------
# CUDA graphs: programs that capture, instantiate, update, replay and free graphs
# --------------------------------------------------------------------------

CAPTURE_SITES = (
    "layer model.py:21", "layer model.py:22", "layer model.py:23", "build app.py:8",
    "step model.py:30 (compile)",  # captured at build time (torch.compile's cudagraph trees)
)  # fmt: skip
REPLAY_SITES = ("run runner.py:26", "run runner.py:40", "<no Python frame>")
INSTANTIATE_SITE = "compile runner.py:12"


@dataclass
class GraphProgram:
    """What CUPTI would deliver for a program using CUDA graphs, and what the join must give.

    `events` are in the order the join gets them: launch records and graph node records as the
    callbacks make them (synchronously, in program order), and buffers of activity records,
    which come later and in any order. `expected` is each site's records by kernel, `replays`
    each site's replayed records by replay site, `unseen` each replay site's records of nodes
    whose making was not seen: all worked out from the program's own state at each replay.
    """

    events: list = field(default_factory=list)
    streams: Streams = field(default_factory=Streams)
    expected: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    replays: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    unseen: dict[str, tuple[int, int]] = field(default_factory=dict)

    def launch(self, record: LaunchRecord) -> None:
        self.events.append(record)
        self.streams.launches.append(record)

    def node(self, record: GraphNodeRecord) -> None:
        self.events.append(record)
        self.streams.graph_nodes.append(record)

    def deliver(self, records: list[ActivityRecord]) -> None:
        if records:
            self.events.append(list(records))
            self.streams.activities.extend(records)

    def count(self, site: str, record: ActivityRecord, replay: str | None = "") -> None:
        """The truth: `record` belongs to `site`; replayed at `replay` ("": launched there, not
        replayed; None: replayed there, its node's making not seen)."""
        duration = record.duration
        kernels = self.expected.setdefault(site, {})
        launches, gpu_ns = kernels.get(record.name, (0, 0))
        kernels[record.name] = (launches + 1, gpu_ns + duration)
        if replay is None:
            launches, gpu_ns = self.unseen.get(site, (0, 0))
            self.unseen[site] = (launches + 1, gpu_ns + duration)
        elif replay:
            by_replay = self.replays.setdefault(site, {})
            launches, gpu_ns = by_replay.get(replay, (0, 0))
            by_replay[replay] = (launches + 1, gpu_ns + duration)


@st.composite
def graph_programs(draw, max_steps: int = 24) -> GraphProgram:
    """A program's graphs, step by step, with the events CUPTI gives for each step.

    Graphs are captured (each launch captured makes a node inside its launch call) or built node
    by node (each node the line that added it), some before profiling started (no event at all);
    some are a library's own (XLA's command buffers): built, instantiated and launched at once by
    one call of a replay line, that first launch's records delivered at once;
    instantiated (each node cloned into the executable graph, CUPTI's copy sometimes also
    reported as made, before or after the clone), some before profiling started; updated from
    another graph with as many nodes (cudaGraphExecUpdate); replayed from several lines and
    threads; freed (graphs, executable graphs, single nodes). Plain launches come between. The
    GPU records of each launch and replay wait, and come in buffers at any later step, in any
    order: after their graph was updated or freed, too.
    """
    program = GraphProgram()
    ids = itertools.count(1)  # node, graph and executable graph ids: CUPTI's are unique
    correlation = itertools.count(1)
    last = 0  # the last launch call's correlation id
    graphs: dict[int, list[tuple[int, str | None, str]]] = {}  # id -> (node, site, kernel)
    execs: dict[int, list[list]] = {}  # id -> [node, site, kernel] per node, the site as now
    first_launch: dict[int, str] = {}  # executable graph -> the line of its first launch
    waiting: list[ActivityRecord] = []
    clock = 1_000

    def record(correlation_id: int, kernel: str, node: int = 0, graph: int = 0):
        nonlocal clock
        clock += draw(st.integers(1, 1_000))
        kind = MEMCPY if kernel.startswith("[memcpy") else KERNEL
        return ActivityRecord(
            kind, correlation_id, kernel, clock, clock + draw(durations),
            draw(st.sampled_from([7, 13])), 0, graph, node,
        )  # fmt: skip

    def launch(site: str, graph: bool = False) -> int:
        nonlocal last
        last = next(correlation)
        thread = draw(st.sampled_from([1, 2]))
        api = "cudaGraphLaunch" if graph else "cudaLaunchKernel"
        program.launch(LaunchRecord(last, thread, site, api, clock, clock + 5, graph))
        return last

    def make_graph(seen: bool) -> None:
        graph = next(ids)
        nodes = []
        for _ in range(draw(st.integers(1, 4))):
            site = draw(st.sampled_from(CAPTURE_SITES))
            kernel = draw(st.sampled_from((*KERNEL_NAMES[:3], "[memcpy HtoD]")))
            node = next(ids)
            if seen:
                if draw(st.booleans()):  # captured: made inside the launch call captured
                    launch(site)
                program.node(GraphNodeRecord(NODE_CREATED, node, graph, 0, 0, site, last))
            nodes.append((node, site if seen else None, kernel))
        graphs[graph] = nodes

    def instantiate(graph: int, seen: bool) -> None:
        graph_exec = next(ids)
        copies = []
        for original, site, kernel in graphs[graph]:
            node = next(ids)
            if seen:
                cloned = GraphNodeRecord(NODE_CLONED, node, graph, graph_exec, original, "", last)
                made = GraphNodeRecord(
                    NODE_CREATED, node, graph, graph_exec, 0, INSTANTIATE_SITE, last
                )
                order = draw(st.sampled_from(["clone", "made, clone", "clone, made"]))
                for event in (made, cloned) if order == "made, clone" else (cloned, made):
                    if event is cloned or order != "clone":
                        program.node(event)
            copies.append([node, site if seen else None, kernel])
        execs[graph_exec] = copies

    def update(graph_exec: int, graph: int) -> None:
        for copy_, (original, site, _) in zip(execs[graph_exec], graphs[graph], strict=False):
            program.node(GraphNodeRecord(NODE_UPDATED, original, 0, graph_exec, copy_[0], "", last))
            copy_[1] = site  # for the replays launched from now on

    def library_graph() -> None:
        """Made by one call at a replay line (no launch call open), instantiated and launched."""
        site = draw(st.sampled_from(REPLAY_SITES))
        graph, graph_exec = next(ids), next(ids)
        copies = []
        for _ in range(draw(st.integers(1, 3))):
            node, copy_ = next(ids), next(ids)
            kernel = draw(st.sampled_from(KERNEL_NAMES[:3]))
            program.node(GraphNodeRecord(NODE_CREATED, node, graph, 0, 0, site, last))
            program.node(GraphNodeRecord(NODE_CLONED, copy_, graph, graph_exec, node, "", last))
            copies.append([copy_, site, kernel])
        execs[graph_exec] = copies
        program.deliver(replay(graph_exec, site))

    def replay(graph_exec: int, site: str | None = None) -> list[ActivityRecord]:
        site = site or draw(st.sampled_from(REPLAY_SITES))
        correlation_id = launch(site, graph=True)
        first = first_launch.setdefault(graph_exec, site)
        works = []
        for node, capture, kernel in execs[graph_exec]:
            work = record(correlation_id, kernel, node, graph_exec)
            works.append(work)
            if capture is None:
                program.count(site, work, None)
            elif capture.endswith(COMPILE_MARK) or capture == first:  # a library's own graph
                program.count(site, work, site)
            else:
                program.count(capture, work, site)
        return works

    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(st.sampled_from(
            ["graph", "graph", "old graph", "instantiate", "instantiate", "old exec", "update",
             "update", "replay", "replay", "replay", "free graph", "free exec", "free node",
             "launch", "deliver", "library graph"]
        ))  # fmt: skip
        if step in ("graph", "old graph"):
            make_graph(step == "graph")
        elif step in ("instantiate", "old exec") and graphs:
            instantiate(draw(st.sampled_from(sorted(graphs))), step == "instantiate")
        elif step == "update" and execs:
            graph_exec = draw(st.sampled_from(sorted(execs)))
            fits = [g for g, nodes in graphs.items() if len(nodes) == len(execs[graph_exec])]
            if fits:
                if draw(st.booleans()):  # replayed just before: the update is not for it
                    waiting.extend(replay(graph_exec))
                update(graph_exec, draw(st.sampled_from(sorted(fits))))
        elif step == "library graph":
            library_graph()
        elif step == "replay" and execs:
            for _ in range(draw(st.integers(1, 3))):
                waiting.extend(replay(draw(st.sampled_from(sorted(execs)))))
        elif step == "free graph" and graphs:
            graph = draw(st.sampled_from(sorted(graphs)))
            del graphs[graph]
            program.node(GraphNodeRecord(GRAPH_DESTROYED, 0, graph, 0, 0, "", last))
        elif step == "free exec" and execs:
            graph_exec = draw(st.sampled_from(sorted(execs)))
            del execs[graph_exec]
            program.node(GraphNodeRecord(EXEC_DESTROYED, 0, 0, graph_exec, 0, "", last))
        elif step == "free node" and graphs:
            graph = draw(st.sampled_from(sorted(graphs)))
            if graphs[graph]:
                node = graphs[graph].pop()[0]
                program.node(GraphNodeRecord(NODE_DESTROYED, node, graph, 0, 0, "", last))
        elif step == "launch":
            site = draw(st.sampled_from(CAPTURE_SITES))
            work = record(launch(site), draw(st.sampled_from(KERNEL_NAMES)))
            waiting.append(work)
            program.count(site, work)
        elif step == "deliver" and waiting:
            order = draw(st.permutations(range(len(waiting))))
            taken = draw(st.integers(1, len(waiting)))
            program.deliver([waiting[i] for i in order[:taken]])
            waiting[:] = [waiting[i] for i in order[taken:]]
    program.deliver([waiting[i] for i in draw(st.permutations(range(len(waiting))))])
    program.streams.meta["pid"] = 4242
    return program
