"""GPU program for `kname profile` and CUDA graphs: each replayed kernel on the line that made it.

Run on a machine with a CUDA GPU, from the repository root, with kname from the checkout and
cupti-python of the machine's CUDA release (13.0.* for CUDA 13.0):

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 tests/gpu/graphs_demo.py OUT_DIR [--replays 50]

Sections, each skipped with a line (`SKIP <section>: <why>`) where its library is missing:

    torch    torch.cuda.graph around three lines, replayed with CUDAGraph.replay();
    cupy     a CuPy stream capture of two ufunc lines, replayed on the main thread and from a
             second thread on a stream of its own;
    core     a graph built node by node with cuda.core's GraphDefinition (a node per line),
             instantiated and replayed;
    update   a cuda.core graph instantiated from one definition and replayed, then updated
             (cudaGraphExecUpdate) from a definition of the same shape built on other lines with
             other parameters, and replayed again;
    compile  torch.compile(mode="reduce-overhead"): cudagraph trees record the compiled code and
             replay it; its kernels go to the line that called the compiled function.

A line whose GPU work is captured is marked `# capture: MARKER <- REPLAY, ...`, naming the
markers of the lines that replay it; a replaying line is marked `# replay: REPLAY` (or is itself
a captured line: torch.compile captures and replays at its call). The program warms everything up
unprofiled, then, profiled by kname's CUPTI collector with a stream log, captures every graph
anew (kname sees each node made) and replays each `--replays` times, and checks:

    every captured line is one call site with GPU time, all of it from replays (but compile's,
    whose first calls run eagerly), one record per replay per kernel, under exactly the replay
    lines named (`replayed_at`), none of it unseen; no replaying line has GPU time of its own;
    nothing is unattributed; the totals are the records'; the table shows each captured line
    with `(graph replayed at ...)`; the trace names each replayed kernel by its captured line
    with the replay line and graph id in its args; the page shows both; the recorded streams
    replay to the same totals; `kname report` reads the saved document.

Then it does it all again in a session that keeps no stream log (with kname's native callback
the records are joined in C: JOIN c), and prints CHECK lines, COLLECTOR and JOIN lines, the
table, and GRAPHS DEMO PASSED | GRAPHS DEMO FAILED (n), with the exit status 0 | 1.

Into OUT_DIR it writes graphs_h200.json (the recorded streams, for tests/data/:
tests/profiling/test_profiling_records.py replays them without a GPU), graphs.json (schema 2),
trace.json
and graphs.html.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from html import escape
from pathlib import Path

import numpy as np
from profile_demo import Checks, synchronize, versions  # beside this file

N = 1 << 16
MATRIX = 256
THIS_FILE = os.path.abspath(__file__)
CAPTURE = re.compile(r"#\s*capture:\s*(\S+)\s*<-\s*([\w\-, ]+?)\s*$")
REPLAY = re.compile(r"#\s*replay:\s*(\S+)\s*$")
KERNELS = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void shift(float* x, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b;
}
"""


# --- the sections: each captures anew at capture(), replays at replay() ----------------------


class TorchGraph:
    """torch.cuda.graph: three captured lines, one graph, CUDAGraph.replay()."""

    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.x = torch.rand(MATRIX, MATRIX, device="cuda")
        self.w = torch.rand(MATRIX, MATRIX, device="cuda")
        self.out = torch.empty(MATRIX, MATRIX, device="cuda")
        self.graph = None

    def body(self) -> None:
        y = self.x * 2.0  # capture: torch-mul <- torch-replay
        z = y @ self.w  # capture: torch-matmul <- torch-replay
        self.torch.add(z, 1.0, out=self.out)  # capture: torch-add <- torch-replay

    def warm(self) -> None:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warmed up off the capture, as PyTorch's docs ask
            for _ in range(3):
                self.body()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

    def capture(self) -> None:
        self.graph = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(self.graph):
            self.body()

    def replay(self, replays: int) -> None:
        for _ in range(replays):
            self.graph.replay()  # replay: torch-replay
        self.torch.cuda.synchronize()


class CupyGraph:
    """A CuPy stream capture of two lines, replayed here and from another thread and stream."""

    name = "cupy"

    def __init__(self) -> None:
        import cupy as cp
        from cupy.cuda import graph

        self.cp, self.graph_type = cp, graph.Graph
        self.x = cp.ones(N, dtype=cp.float32)
        self.y = cp.empty_like(self.x)
        self.z = cp.empty_like(self.x)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.other = cp.cuda.Stream(non_blocking=True)
        self.graph = None
        self.is_cupys_graph = False

    def body(self) -> None:
        cp = self.cp
        cp.multiply(self.x, 2.0, out=self.y)  # capture: cupy-mul <- cupy-replay, cupy-thread
        cp.add(self.y, self.x, out=self.z)  # capture: cupy-add <- cupy-replay, cupy-thread

    def warm(self) -> None:
        with self.stream:
            self.body()
        self.stream.synchronize()

    def capture(self) -> None:
        with self.stream:
            self.stream.begin_capture()
            self.body()
            self.graph = self.stream.end_capture()
        self.is_cupys_graph = isinstance(self.graph, self.graph_type)

    def replay(self, replays: int) -> None:
        for _ in range(replays):
            self.graph.launch(self.stream)  # replay: cupy-replay
        self.stream.synchronize()
        worker = threading.Thread(target=self.replay_elsewhere, args=(replays,))
        worker.start()
        worker.join()

    def replay_elsewhere(self, replays: int) -> None:
        for _ in range(replays):
            self.graph.launch(self.other)  # replay: cupy-thread
        self.other.synchronize()


class CoreKernels:
    """cuda.core: a stream, a buffer and two kernels (KERNELS), for the node-by-node sections."""

    def __init__(self) -> None:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions
        from cuda.core.graph import GraphDefinition

        device = Device()
        device.set_current()
        self.definition = GraphDefinition
        self.stream = device.create_stream()
        options = ProgramOptions(arch=f"sm_{device.arch}")
        module = Program(KERNELS, code_type="c++", options=options).compile("cubin")
        self.scale, self.shift = module.get_kernel("scale"), module.get_kernel("shift")
        self.buffer = device.allocate(N * 4, stream=self.stream)
        self.config = LaunchConfig(grid=N // 256, block=256)
        self.n = np.int32(N)

    def args(self, kernel, value: float) -> tuple:
        """A node's (or a launch's) config, kernel and arguments: kernel(buffer, value, N)."""
        return self.config, kernel, self.buffer, np.float32(value), self.n

    def warm(self) -> None:
        from cuda.core import launch

        launch(self.stream, *self.args(self.scale, 1.0))
        launch(self.stream, *self.args(self.shift, 0.0))
        self.stream.sync()


class CoreGraph(CoreKernels):
    """A graph built node by node with cuda.core's GraphDefinition, instantiated, replayed."""

    name = "core"

    def capture(self) -> None:
        definition = self.definition()
        node = definition.launch(*self.args(self.scale, 2.0))  # capture: core-scale <- core-replay
        node.launch(*self.args(self.shift, 1.0))  # capture: core-shift <- core-replay
        self.graph = definition.instantiate()

    def replay(self, replays: int) -> None:
        for _ in range(replays):
            self.graph.launch(self.stream)  # replay: core-replay
        self.stream.sync()


class CoreUpdate(CoreKernels):
    """A cuda.core graph replayed, updated from another definition (other lines, other
    parameters, the same shape: cudaGraphExecUpdate), and replayed again."""

    name = "update"

    def capture(self) -> None:
        old = self.definition()
        node = old.launch(*self.args(self.scale, 2.0))  # capture: update-a1 <- update-old
        node.launch(*self.args(self.shift, 1.0))  # capture: update-a2 <- update-old
        self.graph = old.instantiate()
        new = self.definition()
        node = new.launch(*self.args(self.scale, 0.5))  # capture: update-b1 <- update-new
        node.launch(*self.args(self.shift, -1.0))  # capture: update-b2 <- update-new
        self.new = new

    def replay(self, replays: int) -> None:
        for _ in range(replays):
            self.graph.launch(self.stream)  # replay: update-old
        self.stream.sync()
        self.graph.update(self.new)  # cudaGraphExecUpdate: the new definition's parameters
        for _ in range(replays):
            self.graph.launch(self.stream)  # replay: update-new
        self.stream.sync()


class Compiled:
    """torch.compile(mode="reduce-overhead"): compiled anew at each capture(), its first calls
    eager, then recorded and replayed by cudagraph trees, all at the one calling line."""

    name = "compile"
    eager = True  # its line also runs eagerly: not all of its GPU work is replayed

    def __init__(self) -> None:
        import torch
        import triton  # noqa: F401 - Inductor's kernels are Triton's

        self.torch = torch
        self.x = torch.rand(MATRIX, MATRIX, device="cuda")
        self.w = torch.rand(MATRIX, MATRIX, device="cuda")
        self.compiled = None

    @staticmethod
    def body(x, w):
        import torch

        return torch.relu(x @ w) + 1.0

    def warm(self) -> None:
        self.capture()
        self.replay(3)  # compiled once, so that the profiled compile finds Inductor's cache

    def capture(self) -> None:
        self.torch._dynamo.reset()
        self.compiled = self.torch.compile(self.body, mode="reduce-overhead")

    def replay(self, replays: int) -> None:
        mark_step = getattr(self.torch.compiler, "cudagraph_mark_step_begin", None)
        for _ in range(replays + 3):  # the first calls warm up and record
            if mark_step is not None:
                mark_step()
            self.compiled(self.x, self.w)  # capture: compile-call <- compile-call
        self.torch.cuda.synchronize()


SECTIONS = (TorchGraph, CupyGraph, CoreGraph, CoreUpdate, Compiled)


class Marks:
    """The marked lines of this file, by marker."""

    def __init__(self) -> None:
        self.captures: dict[str, tuple[int, list[str]]] = {}  # marker -> (line, replay markers)
        self.lines: dict[str, int] = {}  # every marker -> its line
        for number, text in enumerate(Path(THIS_FILE).read_text().splitlines(), 1):
            capture, replay = CAPTURE.search(text), REPLAY.search(text)
            if capture is not None:
                replays = [r.strip() for r in capture.group(2).split(",") if r.strip()]
                self.captures[capture.group(1)] = (number, replays)
                self.lines[capture.group(1)] = number
            elif replay is not None:
                self.lines[replay.group(1)] = number

    def of(self, section: str) -> dict[str, tuple[int, list[str]]]:
        return {m: v for m, v in self.captures.items() if m.split("-")[0] == section}


def set_up() -> tuple[list, int]:
    """Every section whose library is there, warmed up; and how many failed."""
    sections, failed = [], 0
    for section in SECTIONS:
        try:
            made = section()
            made.warm()
            sections.append(made)
        except (ImportError, AttributeError) as exc:  # a library, or a release without the API
            print(f"SKIP {section.name}: {type(exc).__name__}: {exc}")
        except Exception as exc:
            print(f"FAIL {section.name}: {type(exc).__name__}: {exc}")
            failed += 1
    synchronize()
    return sections, failed


def run(sections: list, replays: int, checks: Checks, phase: str) -> None:
    """Each section captures anew, then replays: while a session collects."""
    for section in sections:
        try:
            section.capture()
            section.replay(replays)
        except Exception as exc:
            checks.check(f"{phase}-{section.name}-ran", False, f"{type(exc).__name__}: {exc}")
    synchronize()


# --- what the profile must say ----------------------------------------------------------------


def site_at(sites: dict, line: int) -> list[str]:
    return [name for name in sites if name.endswith(f"graphs_demo.py:{line}")]


def expected_parents(marks: Marks, sections: list, sites: dict) -> dict[str, tuple[str, set]]:
    """{capture marker: (its site, the sites it was replayed at)}, for the sections that ran,
    where each of the lines that replay it (and no other) is one of those replay sites; a
    marker whose line has no single site, or whose replay sites are not those, is left out
    (its checks say so). A replaying line has no GPU time of its own: its site is known only
    from the sites it replayed."""
    expected = {}
    for section in sections:
        for marker, (line, replays) in marks.of(section.name).items():
            found = site_at(sites, line)
            if len(found) != 1:
                continue
            replayed_at = sites[found[0]].get("replayed_at", {})
            lines = {marks.lines[replay] for replay in replays}
            parents = {p for p in replayed_at for n in lines if p.endswith(f"graphs_demo.py:{n}")}
            if len(parents) == len(lines) == len(replayed_at):
                expected[marker] = (found[0], parents)
    return expected


def check_document(
    document: dict, marks: Marks, sections: list, replays_each: int, checks: Checks, phase: str
) -> dict[str, tuple[str, set]]:
    """Every captured line has its replayed launches under its replay lines; nothing else."""
    sites = {site["name"]: site for site in document["sites"]}
    checks.check(
        f"{phase}-nothing-unattributed",
        document["unattributed"]["launches"] == 0,
        json.dumps(document["unattributed"])[:300],
    )
    unseen = {name: s["replayed_unseen"] for name, s in sites.items() if "replayed_unseen" in s}
    checks.check(f"{phase}-no-unseen-node", not unseen, json.dumps(unseen)[:300])
    eager = {s.name for s in sections if getattr(s, "eager", False)}
    for section in sections:
        for marker, (line, _) in marks.of(section.name).items():
            found = site_at(sites, line)
            checks.check(f"{phase}-line-{marker}", len(found) == 1, f"line {line}: {found}")
    expected = expected_parents(marks, sections, sites)
    for section in sections:
        for marker, (line, replays) in marks.of(section.name).items():
            name = next(iter(site_at(sites, line)), "")
            replayed = sites[name].get("replayed_at", {}) if name else {}
            lines = [marks.lines[replay] for replay in replays]
            checks.check(
                f"{phase}-parents-{marker}",
                marker in expected and sites[name]["gpu_ns"] > 0,
                f"replayed at {sorted(replayed)}, expected the lines {lines}",
            )
            if marker not in expected:
                continue
            counts = [count["launches"] for count in replayed.values()]
            if section.name in eager:
                ok = all(count >= replays_each for count in counts)
            else:
                ok = all(count > 0 and count % replays_each == 0 for count in counts)
                ok = ok and sum(counts) == sites[name]["launches"]
                # one record per replay per kernel: each kernel of the line, a multiple of them
                kernels = sites[name]["kernels"].values()
                ok = ok and all(k["launches"] % replays_each == 0 for k in kernels)
            checks.check(
                f"{phase}-replays-{marker}", ok, f"{replayed} of {sites[name]['launches']}"
            )
    captured_lines = {marks.captures[m][0] for m in expected}
    for marker, line in marks.lines.items():
        if marker in marks.captures or line in captured_lines:
            continue
        if not any(marker in r for s in sections for _, r in marks.of(s.name).values()):
            continue  # a section that did not run
        found = site_at(sites, line)
        checks.check(f"{phase}-replay-line-{marker}", not found, f"GPU time of its own: {found}")
    return expected


def check_outputs(streams, document: dict, expected: dict, checks: Checks) -> None:
    """The table, the trace, the page and the recorded streams say the same."""
    from kname.documents.build import profile_document
    from kname.documents.pages.profile import render_profile_page as render_page
    from kname.documents.tables import render_profile_table
    from kname.profiling.join import replay
    from kname.profiling.records import streams_from_json, streams_to_json
    from kname.profiling.trace import trace_json

    table = render_profile_table(document)
    rows = table.splitlines()
    for marker, (name, _) in expected.items():
        ok = any(row.startswith(f"{name}  (graph replayed at ") for row in rows)
        checks.check(f"table-{marker}", ok, f"no row '{name}  (graph replayed at ...'")
    events = [e for e in json.loads(trace_json(streams))["traceEvents"] if e["ph"] == "X"]
    for marker, (name, parents) in expected.items():
        mine = [e for e in events if e["name"].startswith(f"{name} / ")]
        replayed = [e for e in mine if e["args"].get("graph_id")]  # (compile's: eager ones too)
        ok = bool(replayed) and all(e["args"].get("replayed_at") in parents for e in replayed)
        checks.check(f"trace-{marker}", ok, f"{len(replayed)} of {len(mine)}: {mine[:1]}")
    page = render_page(document)
    for marker, (name, _) in expected.items():
        row = page.partition(f'<tr data-site="{escape(name)}">')[2].partition("</tr>")[0]
        ok = '<div class="graph">graph replayed at ' in row
        checks.check(f"page-{marker}", ok, f"no row of {name} with its replay lines")
    replayed = profile_document(replay(streams_from_json(streams_to_json(streams), "recorded")))
    checks.check(
        "replay-agrees",
        totals_of(replayed) == totals_of(document),
        "the recorded streams do not replay to the live totals",
    )


def totals_of(document: dict) -> dict[str, list]:
    return {
        s["name"]: [s["launches"], s["gpu_ns"], s.get("replayed_at", {})] for s in document["sites"]
    }


def profiled_phase(args, sections: list, marks: Marks, checks: Checks) -> None:
    """Profiled with a stream log: checks, and the files written."""
    from kname.documents.files import load
    from kname.documents.pages.profile import render_profile_page as render_page
    from kname.documents.schema import render_json, validate
    from kname.documents.tables import render_table
    from kname.profiling.cupti_collector import binding_versions
    from kname.profiling.records import streams_to_json
    from kname.profiling.session import ProfileSession
    from kname.profiling.trace import trace_json

    session = ProfileSession(keep_streams=True)
    if not session.start():
        checks.check("cupti-start", False, "the collector did not start (see the line above)")
        return
    print(f"COLLECTOR {session.collector.launch_callbacks}")
    run(sections, args.replays, checks, "logged")
    session.stop()
    document = validate(session.document(), "live")
    print(session.table())
    streams = session.streams(replays=args.replays)
    records = streams.activities
    checks.check(
        "totals-agree",
        document["total_gpu_ns"] == sum(r.duration for r in records)
        and document["total_launches"] == len(records),
        f"{document['total_gpu_ns']} ns vs {sum(r.duration for r in records)} ns of records",
    )
    checks.check("graph-nodes-recorded", bool(streams.graph_nodes), "no graph node record")
    cupy = [s for s in sections if s.name == "cupy"]
    if cupy:
        checks.check("cupy-graph-is-cupys", cupy[0].is_cupys_graph, "isinstance(graph, Graph)")
    expected = check_document(document, marks, sections, args.replays, checks, "logged")
    check_outputs(streams, document, expected, checks)
    streams.meta.update(
        captures={marker: name for marker, (name, _) in expected.items()},
        replayed_at={marker: sorted(parents) for marker, (_, parents) in expected.items()},
        eager=[s.name for s in sections if getattr(s, "eager", False)],
        live_totals=totals_of(document),
        versions=versions(binding_versions()),
    )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "graphs_h200.json").write_text(streams_to_json(streams))
        (out / "graphs.json").write_text(render_json(document))
        (out / "trace.json").write_text(trace_json(streams))
        (out / "graphs.html").write_text(render_page(document))
        report = render_table(load(str(out / "graphs.json")), source="graphs.json")
        checks.check("report-reads-it", "(graph replayed at " in report, report[:300])
        print(f"WROTE {out}/graphs_h200.json graphs.json trace.json graphs.html")


def c_join_phase(args, sections: list, marks: Marks, checks: Checks) -> None:
    """The same in a session that keeps no stream log: with the native callback, joined in C."""
    from kname.profiling.native_join import NativeJoin
    from kname.profiling.session import ProfileSession

    session = ProfileSession()
    if not session.start():
        checks.check("c-join-start", False, "the collector did not start (see the line above)")
        return
    run(sections, args.replays, checks, "c-join")
    session.stop()
    native = session.collector.launch_callbacks.startswith("kname's native")
    in_c = isinstance(session.join, NativeJoin)
    print(f"JOIN {'c' if in_c else 'python'}")
    checks.check("c-join-in-use", in_c == native, type(session.join).__name__)
    check_document(session.document(), marks, sections, args.replays, checks, "c-join")
    if in_c:
        counts = session.join.counts()
        ok = not counts["no_memory"] and not counts["nodes_capped"] and not counts["orphans"]
        checks.check("c-join-within-bounds", ok, str(counts))


def start_kname() -> None:
    """kname as KNAME=1 starts it: its launch wrappers on (CuPy's graph launch among them)."""
    import kname

    if "KNAME_SKIP" not in os.environ:
        # torch's frames (CUDAGraph.replay, Dynamo, Inductor's generated code, which it names
        # torch._inductor...) are library code here, whatever kname's torch unit says.
        os.environ["KNAME_SKIP"] = "torch"
        print("NOTE KNAME_SKIP=torch")
    if not kname.is_installed():
        kname.install()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="directory for the recorded streams and outputs")
    parser.add_argument("--replays", type=int, default=50)
    args = parser.parse_args()
    start_kname()
    marks = Marks()
    checks = Checks()
    sections, failed = set_up()
    checks.failed += failed
    checks.check("some-section-ran", bool(sections), "no section could be set up")
    profiled_phase(args, sections, marks, checks)
    c_join_phase(args, sections, marks, checks)
    if checks.failed:
        print(f"GRAPHS DEMO FAILED ({checks.failed})")
        return 1
    print("GRAPHS DEMO PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
