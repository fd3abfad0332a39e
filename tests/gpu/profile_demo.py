"""GPU program for `kname profile`: GPU time per line, checked end to end, and next to Proton's.

Run on a machine with a CUDA GPU, from the repository root, with kname from the checkout and
cupti-python of the machine's CUDA release (13.0.* for CUDA 13.0):

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 tests/gpu/profile_demo.py OUT_DIR

Each line marked `# site: MARKER KIND` below launches GPU work: numba-cuda kernels (through
kname's launch wrapper), CuPy (`cupy.ones`, a ufunc, a RawKernel, copies both ways, a memset),
torch (`t + t`, `t @ u` through cuBLAS, a CUDA graph replay), a Triton kernel, and CuPy on a
second thread and stream. The program runs the work once to compile, once more without
profiling (the baseline), then profiled by kname's CUPTI collector, and prints:

    the profile table;
    COLLECTOR <what>                            the launch callbacks: kname's native one
        (kname._native_cupti, built in place: python setup.py build_ext --inplace), or CUPTI's
        Python binding (with KNAME_NATIVE=0, or where the extension is not built), and why;
    ACTIVITY native | python                    who read CUPTI's activity buffers: kname's
        recorder in C (with the native callback; CHECK activity-native-records-whole: no
        record lost on the way) or cupti-python;
    CHECK <name> ok | CHECK <name> FAIL: <why>   every line has GPU time, nothing is
        unattributed, totals agree with the records, graph kernels go to the replay line,
        copies and sets are their own rows, the recorded streams replay to the same totals,
        the trace and the page parse;
    TIME ...                                    CPU time of the profiled loop against the baseline;
    JOIN c | python / CHECK c-join-...          the work again in a session keeping no streams:
        with the native callback joined in C (native_join.py), every line there too;
    CHECK external-... / handover-...           the work again with wrapped launches tagged by
        CUPTI external correlation ids: the tags arrive and name the same sites as the
        launch callback did (TIME external-correlation: what tagging costs);
    TIME <lib>: ...                             each library's step alone, unprofiled and
        profiled, interleaved: the added CPU time per launch call;
    CLI ... / CHECK cli-...                     `kname profile --json --trace --html -- python
        this --cli-child` (KNAME_MODE=profile from start-up): its table, and its files;
    PROTON <marker> <line> <kname ns> <proton ns> <diff %>   after running the same work in a
        child process under Proton (triton.profiler, context="python"), per line;
    PROFILE DEMO PASSED | PROFILE DEMO FAILED (n)   and the exit status 0 | 1.

Into OUT_DIR it writes profile_h200.json (the recorded launch and activity streams, for
tests/data/: tests/profiling/test_profiling_records.py replays them without a GPU), profile.json
(schema 2),
trace.json (open in Perfetto), profile.html, proton.hatchet and cli/ (the command's files). A
library that is not installed is skipped (`SKIP <lib>: <reason>`) and its lines are not expected.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from html import escape
from pathlib import Path

# numba-cuda 0.30 calls numpy.row_stack, which numpy 2.5 removed: alias it here, in this program
# only (never inside kname), before numba is imported.
import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

N = 1 << 16
MATRIX = 512
RAW_SOURCE = r"""
extern "C" __global__ void scale_raw(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 0.5f;
}
"""
MARKER = re.compile(r"#\s*site:\s*(\S+)\s+(kernel|memcpy|memset|graph)\s*$")
CAPTURED = re.compile(r"#\s*captured:\s*(\S+)")  # the line a graph marker's work is captured at
PROTON_FRAME = re.compile(r"^(?P<file>.+\.py):(?P<line>\d+)@(?P<function>.*)$")
THIS_FILE = os.path.abspath(__file__)
REPO = Path(THIS_FILE).parent.parent.parent


# --- the work: each marked line is one call site ------------------------------------------


def numba_setup():
    from numba import cuda

    @cuda.jit
    def axpy_numba(out, a, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + out[i]

    x = cuda.to_device(np.ones(N, dtype=np.float32))
    return axpy_numba, cuda.device_array_like(x), x


def numba_step(state) -> None:
    kernel, out, x = state
    kernel[N // 256, 256](out, 2.0, x)  # site: numba-a kernel
    kernel[N // 256, 256](out, 3.0, x)  # site: numba-b kernel


def cupy_setup():
    import cupy as cp

    return cp, cp.RawKernel(RAW_SOURCE, "scale_raw"), np.ones(N, dtype=np.float32)


def cupy_step(state) -> None:
    cp, raw, host = state
    a = cp.ones(N, dtype=cp.float32)  # site: cupy-ones kernel
    b = a + a  # site: cupy-ufunc kernel
    raw((N // 256,), (256,), (b, np.int32(N)))  # site: cupy-raw kernel
    c = cp.asarray(host)  # site: cupy-htod memcpy
    c.get()  # site: cupy-dtoh memcpy
    cp.zeros(N, dtype=cp.float32)  # site: cupy-memset memset


def torch_setup():
    import torch

    t = torch.ones(N, device="cuda")
    left = torch.rand(MATRIX, MATRIX, device="cuda")
    right = torch.rand(MATRIX, MATRIX, device="cuda")
    static = torch.ones(N, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture, as PyTorch's docs ask
        for _ in range(3):
            static * 2 + 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static * 2 + 1  # captured: torch-graph (two kernels, captured once, replayed per step)
    return t, left, right, graph


def torch_step(state) -> None:
    t, left, right, graph = state
    t + t  # site: torch-add kernel
    left @ right  # site: torch-matmul kernel
    graph.replay()  # site: torch-graph graph


def triton_setup():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_one_triton(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

    return add_one_triton, torch.zeros(N, device="cuda")


def triton_step(state) -> None:
    kernel, x = state
    kernel[(N // 256,)](x, N, BLOCK=256)  # site: triton-add kernel


def thread_setup():
    import cupy as cp

    return cp, cp.ones(N, dtype=cp.float32)


def thread_work(state, iterations: int) -> None:
    cp, x = state
    with cp.cuda.Stream(non_blocking=True) as stream:
        for _ in range(iterations):
            x * 3  # site: cupy-thread kernel
        stream.synchronize()


LIBRARIES = (
    ("numba", numba_setup, numba_step),
    ("cupy", cupy_setup, cupy_step),
    ("torch", torch_setup, torch_step),
    ("triton", triton_setup, triton_step),
    ("thread", thread_setup, None),
)


class Workload:
    """Every library that is there, set up (compiled, allocated, graph captured) once."""

    def __init__(self) -> None:
        self.states: dict[str, object] = {}
        self.failed = 0
        for lib, setup, step in LIBRARIES:
            try:
                state = setup()
                if step is not None:
                    step(state)  # the first launch compiles
                else:
                    thread_work(state, 1)
                self.states[lib] = state
            except ImportError as exc:
                print(f"SKIP {lib}: {exc}")
            except Exception as exc:
                print(f"FAIL {lib}: {type(exc).__name__}: {exc}")
                self.failed += 1
        synchronize()

    def run(self, iterations: int) -> None:
        """The marked lines, `iterations` times each; the second thread alongside."""
        worker = None
        if "thread" in self.states:
            worker = threading.Thread(target=thread_work, args=(self.states["thread"], iterations))
            worker.start()
        for _ in range(iterations):
            for lib, _setup, step in LIBRARIES:
                if step is not None and lib in self.states:
                    step(self.states[lib])
        if worker is not None:
            worker.join()
        synchronize()

    def markers(self) -> dict[str, tuple[int, str]]:
        """{marker: (line, kind)} of the libraries that are set up."""
        lib_of = {"numba": "numba", "cupy": "cupy", "torch": "torch", "triton": "triton"}
        found = {}
        for number, text in enumerate(Path(THIS_FILE).read_text().splitlines(), 1):
            match = MARKER.search(text)
            if match is None:
                continue
            marker, kind = match.groups()
            lib = "thread" if marker == "cupy-thread" else lib_of[marker.split("-")[0]]
            if lib in self.states:
                found[marker] = (number, kind)
        return found

    def captured_lines(self) -> dict[str, int]:
        """{graph marker: the line its graph's work is captured at}."""
        lines = Path(THIS_FILE).read_text().splitlines()
        return {
            match.group(1): number
            for number, text in enumerate(lines, 1)
            if (match := CAPTURED.search(text)) is not None
        }


def synchronize() -> None:
    for name in ("torch", "cupy"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        if name == "torch" and module.cuda.is_available():
            module.cuda.synchronize()
        elif name == "cupy":
            module.cuda.Device().synchronize()


# --- kname's profile ----------------------------------------------------------------------


class Checks:
    def __init__(self) -> None:
        self.failed = 0

    def check(self, name: str, ok: bool, why: str = "") -> None:
        print(f"CHECK {name} ok" if ok else f"CHECK {name} FAIL: {why}")
        self.failed += not ok


def kname_phase(args, work: Workload, checks: Checks) -> tuple[dict[int, int], dict[str, str]]:
    """Profile the work with kname; check and write everything; {line: gpu_ns} per marked line
    and {marker: site name}."""
    from kname.documents.build import profile_document
    from kname.documents.pages.profile import render_profile_page as render_page
    from kname.documents.schema import render_json, validate
    from kname.profiling.cupti_collector import binding_versions
    from kname.profiling.join import replay
    from kname.profiling.records import streams_from_json, streams_to_json
    from kname.profiling.session import ProfileSession
    from kname.profiling.trace import trace_json

    session = ProfileSession(keep_streams=True)
    baseline = timed(work, args.iterations)
    if not session.start():
        checks.check("cupti-start", False, "the collector did not start (see the line above)")
        return {}, {}
    print(f"COLLECTOR {session.collector.launch_callbacks}")
    profiled = timed(work, args.iterations)
    session.stop()
    check_activity_reader(checks, session.collector)
    document = validate(session.document(), "live")
    print(session.table())
    streams = session.streams(iterations=args.iterations)
    records = streams.activities
    checks.check("records-arrived", bool(records), f"{len(streams.launches)} launches, 0 records")
    checks.check(
        "nothing-unattributed",
        document["unattributed"]["launches"] == 0,
        json.dumps(document["unattributed"])[:300],
    )
    checks.check(
        "totals-agree",
        document["total_gpu_ns"] == sum(r.duration for r in records)
        and document["total_launches"] == len(records),
        f"{document['total_gpu_ns']} ns vs {sum(r.duration for r in records)} ns of records",
    )
    sites = {site["name"]: site for site in document["sites"]}
    expected, kinds, per_line = {}, {}, {}
    for marker, (line, kind) in work.markers().items():
        found = [name for name in sites if name.endswith(f"profile_demo.py:{line}")]
        ok = len(found) == 1 and sites[found[0]]["gpu_ns"] > 0
        ok = ok and sites[found[0]]["launches"] >= args.iterations
        checks.check(f"line-{marker}", ok, f"line {line}: sites {found}")
        if not found:
            continue
        expected[marker], kinds[marker] = found[0], kind
        per_line[line] = sites[found[0]]["gpu_ns"]
        check_kind(checks, marker, kind, found[0], streams, args.iterations)
    live = {name: [s["launches"], s["gpu_ns"]] for name, s in sites.items()}
    meta = {
        "expected_sites": expected,
        "expected_kinds": kinds,
        "live_totals": live,
        "versions": versions(binding_versions()),
    }
    streams.meta.update(meta)
    text = streams_to_json(streams)
    replayed = profile_document(replay(streams_from_json(text, "recorded")))
    checks.check(
        "replay-agrees",
        {name: [s["launches"], s["gpu_ns"]] for name, s in _sites(replayed).items()} == live,
        "the recorded streams do not replay to the live totals",
    )
    trace_text = trace_json(streams)
    if session.collector.trace is not None:  # the native path: the trace kept and written in C
        checks.check(
            "trace-from-c-as-trace-py", session._trace_text() == trace_text, "the texts differ"
        )
    trace = json.loads(trace_text)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    timed_count = sum(1 for r in records if r.start) + sum(1 for r in streams.launches if r.start)
    checks.check("trace-parses", len(complete) == timed_count, f"{len(complete)} vs {timed_count}")
    page = render_page(document)
    missing = [name for name in sites if f'<tr data-site="{escape(name)}">' not in page]
    checks.check("page-has-every-site", not missing, f"not on the page: {missing}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile_h200.json").write_text(text)
        (out / "profile.json").write_text(render_json(document))
        (out / "trace.json").write_text(json.dumps(trace))
        (out / "profile.html").write_text(page)
        print(f"WROTE {out}/profile_h200.json profile.json trace.json profile.html")
    launches = len(streams.launches) / max(args.iterations, 1)
    print(
        f"TIME kname baseline {baseline:.4f} s, profiled {profiled:.4f} s for {args.iterations} "
        f"iterations of {launches:.0f} launch calls: "
        f"{1e6 * (profiled - baseline) / max(len(streams.launches), 1):+.1f} us per launch call"
    )
    return per_line, expected


def check_activity_reader(checks: Checks, collector) -> None:
    """With kname's native launch callback the activity buffers are read in C too, and none of
    their records was lost on the way (past the recorder's bound, or dropped by CUPTI)."""
    reader = collector.activity_reader
    print(f"ACTIVITY {reader}")
    native = collector.launch_callbacks.startswith("kname's native")
    checks.check("activity-reader", reader == ("native" if native else "python"), reader)
    if native:
        counts = collector.activity_counts()
        lost = counts["waiting"] or counts["dropped"] or counts["cupti_dropped"]
        ok = not lost and not counts["names_past_bound"] and counts["names"] > 0
        checks.check("activity-native-records-whole", ok, str(counts))


def check_kind(checks: Checks, marker: str, kind: str, site: str, streams, iterations: int):
    by_id = {launch.correlation_id: launch.site for launch in streams.launches}
    mine = [r for r in streams.activities if by_id.get(r.correlation_id) == site]
    if kind == "graph":
        # Captured before profiling started: kname did not see its nodes made, so its kernels
        # stay with the replay line (counted there as replayed_unseen).
        in_graph = [r for r in mine if r.graph_id]
        ok = len(in_graph) >= 2 * iterations and len(in_graph) == len(mine)
        checks.check(f"kind-{marker}", ok, f"{len(in_graph)} graph kernels of {len(mine)}")
    else:
        ok = bool(mine) and all(r.kind == kind for r in mine)
        checks.check(f"kind-{marker}", ok, f"kinds {sorted({r.kind for r in mine})}")


def c_join_phase(args, work: Workload, checks: Checks, expected: dict[str, str]) -> None:
    """The work again in a session that keeps no streams: with the native callback its records
    are joined in C (no Python object per record); every line has its GPU time there too."""
    from kname.profiling.native_join import NativeJoin
    from kname.profiling.session import ProfileSession

    session = ProfileSession()
    if not session.start():
        checks.check("c-join-start", False, "the collector did not start (see the line above)")
        return
    timed(work, args.iterations)
    session.stop()
    native = session.collector.launch_callbacks.startswith("kname's native")
    in_c = isinstance(session.join, NativeJoin)
    print(f"JOIN {'c' if in_c else 'python'}")
    checks.check("c-join-in-use", in_c == native, type(session.join).__name__)
    profile = session.join.profile()
    checks.check(
        "c-join-nothing-unattributed",
        profile.unattributed.launches == 0,
        f"{profile.unattributed.launches} records, {profile.unattributed.gpu_ns} ns",
    )
    counted = profile.total_launches + profile.earlier_records
    checks.check(
        "c-join-every-record-counted",
        counted == session.join.record_count,
        f"{counted} counted of {session.join.record_count} records",
    )
    sites = {site["name"]: site for site in session.sites}
    for marker, name in expected.items():
        site = sites.get(name)
        ok = site is not None and site["gpu_ns"] > 0 and site["launches"] >= args.iterations
        checks.check(f"c-join-line-{marker}", ok, f"{name}: {site}")
    if in_c:
        counts = session.join.counts()
        ok = not counts["trimmed"] and not counts["no_memory"] and not counts["orphans"]
        checks.check("c-join-within-bounds", ok, str(counts))


def external_phase(args, work: Workload, checks: Checks, expected: dict[str, str]) -> None:
    """The work again, with wrapped launches also tagged by CUPTI external correlation ids."""
    import functools

    from kname.profiling.cupti_collector import CuptiCollector
    from kname.profiling.session import ProfileSession

    tagging = functools.partial(CuptiCollector, external_correlation=True)
    session = ProfileSession(keep_streams=True, collector=tagging)
    baseline = timed(work, args.iterations)
    if not session.start():
        checks.check("external-start", False, "the collector did not start (see the line above)")
        return
    profiled = timed(work, args.iterations)
    session.stop()
    streams = session.streams()
    document = session.document()
    checks.check(
        "external-nothing-unattributed",
        document["unattributed"]["launches"] == 0,
        json.dumps(document["unattributed"])[:300],
    )
    check_handover(checks, work, streams, expected)
    print(
        f"TIME external-correlation baseline {baseline:.4f} s, profiled {profiled:.4f} s: "
        f"{1e6 * (profiled - baseline) / max(len(streams.launches), 1):+.1f} us per launch call "
        f"({len(streams.externals)} external correlations)"
    )


def library_times(args, work: Workload) -> None:
    """TIME <lib>: each library's step alone, unprofiled and profiled, interleaved (medians)."""
    import statistics

    from kname.profiling.session import ProfileSession

    for lib, _setup, step in LIBRARIES:
        if step is None or lib not in work.states:
            continue
        state = work.states[lib]
        unprofiled, profiled, calls, records = [], [], 0, 0
        for _ in range(5):
            step(state)  # the sites were built anew when the last session stopped: not timed
            synchronize()
            unprofiled.append(timed_step(step, state, args.iterations))
            session = ProfileSession()
            session.start()
            step(state)  # every site built anew for the session: not timed
            synchronize()
            launches, gpu = session.join.launch_count, session.join.record_count
            profiled.append(timed_step(step, state, args.iterations))
            session.stop()
            calls = session.join.launch_count - launches
            records = session.join.record_count - gpu
        before, after = statistics.median(unprofiled), statistics.median(profiled)
        per_step = 1e6 / args.iterations
        print(
            f"TIME {lib}: {per_step * before:.1f} us per step unprofiled, "
            f"{per_step * after:.1f} us profiled; {calls / args.iterations:.0f} launch calls and "
            f"{records / args.iterations:.0f} GPU records per step: "
            f"{1e6 * (after - before) / max(calls, 1):+.2f} us per launch call"
        )


def timed_step(step, state, iterations: int) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        step(state)
    synchronize()
    return time.perf_counter() - start


def cli_phase(args, work: Workload, checks: Checks) -> None:
    """`kname profile --json --trace --html -- python this --cli-child`: the command's outputs."""
    out = Path(args.out or ".") / "cli"
    out.mkdir(parents=True, exist_ok=True)
    names = {"json": "profile.json", "trace": "trace.json", "html": "profile.html"}
    files = {kind: out / name for kind, name in names.items()}
    for path in files.values():
        path.unlink(missing_ok=True)
    # KNAME_NATIVE stays: the command's child uses the launch callbacks this run is checking.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME") or k == "KNAME_NATIVE"}
    # The checkout is not installed: its sitecustomize example starts kname in the child.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "sitecustomize_example"), str(REPO)])
    env["KNAME_SKIP"] = os.environ.get("KNAME_SKIP", "torch")
    command = [
        sys.executable, "-m", "kname", "profile", *(f"--{k}={v}" for k, v in files.items()),
        "--top", "40", "--", sys.executable, THIS_FILE, "--cli-child",
        "--iterations", str(args.iterations),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    table = [line for line in done.stderr.splitlines() if not line.startswith("kname: ")]
    print("CLI " + "\nCLI ".join(table[:40]))
    checks.check("cli-ran", done.returncode == 0, done.stderr[-2000:])
    # The command's child printed its table, naming its process.
    heading = re.compile(r"kname profile of process \d+: ")
    checks.check("cli-table", any(heading.match(line) for line in table), "")
    from kname.documents.files import load

    try:
        document = load(str(files["json"]))
    except Exception as exc:
        checks.check("cli-json", False, str(exc))
        return
    checks.check("cli-json", document["unattributed"]["launches"] == 0, "unattributed records")
    sites = _sites(document)
    captured = work.captured_lines()
    for marker, (line, kind) in work.markers().items():
        if kind == "graph":
            # kname profile ran from start-up: it saw the graph captured, and gives its kernels
            # the capture line, replayed at the marked line.
            found = [n for n in sites if n.endswith(f"profile_demo.py:{captured[marker]}")]
            replayed = sites[found[0]].get("replayed_at", {}) if len(found) == 1 else {}
            ok = any(r.endswith(f"profile_demo.py:{line}") for r in replayed)
            checks.check(f"cli-line-{marker}", ok, f"capture line sites {found}: {replayed}")
            continue
        found = [n for n in sites if n.endswith(f"profile_demo.py:{line}")]
        checks.check(f"cli-line-{marker}", len(found) == 1, f"line {line}: {found}")
    try:
        events = json.loads(files["trace"].read_text())["traceEvents"]
        checks.check("cli-trace", any(e["ph"] == "X" for e in events), "no complete events")
    except Exception as exc:
        checks.check("cli-trace", False, str(exc))
    html = files["html"].read_text() if files["html"].exists() else ""
    checks.check("cli-html", "<svg" in html, "no page or no chart")


def cli_child(iterations: int) -> int:
    """The program `kname profile` runs in cli_phase: the work, under KNAME_MODE=profile."""
    work = Workload()
    work.run(iterations)
    return work.failed


def check_handover(checks: Checks, work: Workload, streams, expected: dict[str, str]) -> None:
    """Launches kname wraps handed their site over: CUPTI linked their API calls to it, and the
    link names the same site as the launch callback did."""
    if "numba" not in work.states:
        print("SKIP handover: numba (a library kname wraps) is not installed")
        return
    by_id = {launch.correlation_id: launch.site for launch in streams.launches}
    linked = {link.correlation_id: streams.external_sites.get(link.external_id)
              for link in streams.externals}  # fmt: skip
    checks.check(
        "handover-external-ids",
        expected.get("numba-a") in linked.values() and expected.get("numba-b") in linked.values(),
        f"{len(streams.externals)} external correlations, sites {sorted(set(linked.values()))}",
    )
    disagree = {cid: (site, by_id[cid]) for cid, site in linked.items()
                if cid in by_id and by_id[cid] != site}  # fmt: skip
    checks.check(
        "handover-agrees", not disagree, f"{len(disagree)} differ: {list(disagree.items())[:3]}"
    )


def _sites(document) -> dict:
    return {site["name"]: site for site in document["sites"]}


def timed(work: Workload, iterations: int) -> float:
    start = time.perf_counter()
    work.run(iterations)
    return time.perf_counter() - start


def versions(extra: dict[str, str]) -> dict[str, str]:
    from importlib import metadata

    import kname

    found = {"python": sys.version.split()[0], "kname": kname.__version__, **extra}
    for name in ("numba-cuda", "cupy-cuda13x", "torch", "triton", "nvtx", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    try:
        import torch

        found["device"] = torch.cuda.get_device_name()
    except Exception:
        pass
    try:
        from cuda.bindings import driver

        found["driver"] = str(driver.cuDriverGetVersion()[1])
    except Exception:
        pass
    return found


# --- Proton, in a child process (CUPTI takes one subscriber per process) -------------------


def proton_child(path: str, iterations: int) -> int:
    """Run the same work under Proton's python context; print the CPU times."""
    import triton.profiler as proton

    work = Workload()
    baseline = timed(work, iterations)
    proton.start(path, context="python")
    profiled = timed(work, iterations)
    proton.finalize()
    print(f"PROTON_TIME {baseline:.6f} {profiled:.6f}")
    return 0


def proton_per_line(hatchet: Path) -> dict[int, int]:
    """{line of this file: GPU ns} from Proton's tree: each kernel under its nearest frame here."""
    database = json.loads(hatchet.read_text())
    root = database[0] if isinstance(database, list) else database
    per_line: dict[int, int] = {}

    def visit(node: dict, line: int | None) -> None:
        name = node.get("frame", {}).get("name", "")
        frame = PROTON_FRAME.match(name)
        if frame and os.path.abspath(frame["file"]) == THIS_FILE:
            line = int(frame["line"])
        elif not frame and line is not None:
            time_ns = node.get("metrics", {}).get("time (ns)", 0)
            per_line[line] = per_line.get(line, 0) + int(time_ns)
        for child in node.get("children", []):
            visit(child, line)

    visit(root, None)
    return per_line


def proton_phase(args, work: Workload, kname_lines: dict[int, int], checks: Checks) -> None:
    out = Path(args.out or ".")
    out.mkdir(parents=True, exist_ok=True)
    name = str(out / "proton")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    done = subprocess.run(
        [sys.executable, THIS_FILE, "--proton-child", name, "--iterations", str(args.iterations)],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    print(done.stdout.strip())
    if done.returncode != 0:
        checks.check("proton-ran", False, done.stderr.strip()[-2000:])
        return
    hatchet = Path(name + ".hatchet")
    if not hatchet.exists():
        hatchet = next(iter(sorted(out.glob("proton*"))), hatchet)
    proton_lines = proton_per_line(hatchet)
    markers = {line: marker for marker, (line, _) in work.markers().items()}
    worst = 0.0
    for line in sorted(markers):
        mine, theirs = kname_lines.get(line, 0), proton_lines.get(line, 0)
        if not theirs:  # Proton records kernels only: a copy's or a set's line has no time there
            print(f"PROTON {markers[line]} {line} {mine} - (not recorded by Proton)")
            continue
        diff = 100 * (mine - theirs) / theirs
        worst = max(worst, abs(diff))
        print(f"PROTON {markers[line]} {line} {mine} {theirs} {diff:+.2f}%")
    others = {line: ns for line, ns in proton_lines.items() if line not in markers}
    if others:
        print(f"PROTON lines without a marker: {others}")
    total_mine, total_theirs = sum(kname_lines.values()), sum(proton_lines.values())
    print(f"PROTON total {total_mine} {total_theirs}")
    checks.check(
        f"proton-within-{args.tolerance:g}%",
        worst <= args.tolerance,
        f"the largest difference per line is {worst:.2f}% (separate runs: kernel times vary)",
    )


def start_kname(without_wrappers: bool) -> None:
    """kname as `KNAME=1` starts it (its launch wrappers on), or only its call-site rules."""
    import kname
    from kname import callsite
    from kname.config import read_config

    if "KNAME_SKIP" not in os.environ:
        # torch is not among kname's library modules yet, and some of its launch paths run
        # Python code of its own (CUDAGraph.replay): without this they would be named after it.
        os.environ["KNAME_SKIP"] = "torch"
        print("NOTE KNAME_SKIP=torch (torch is not yet one of kname's library modules)")
    if without_wrappers:
        config = read_config()
        callsite.configure(config.skip, config.format, config.depth, False)
    elif not kname.is_installed():
        kname.install()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="directory for the recorded streams and outputs")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=2.0, help="percent, per line")
    parser.add_argument("--no-proton", action="store_true")
    parser.add_argument("--no-install", action="store_true", help="no kname launch wrappers")
    parser.add_argument("--no-cli", action="store_true", help="no `kname profile` run")
    parser.add_argument("--proton-child", metavar="NAME", help=argparse.SUPPRESS)
    parser.add_argument("--cli-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proton_child:
        return proton_child(args.proton_child, args.iterations)
    if args.cli_child:
        return cli_child(args.iterations)
    start_kname(args.no_install)
    work = Workload()
    checks = Checks()
    checks.failed += work.failed
    per_line, expected = kname_phase(args, work, checks)
    c_join_phase(args, work, checks, expected)
    if not args.no_install:
        external_phase(args, work, checks, expected)
    library_times(args, work)
    if not args.no_cli:
        cli_phase(args, work, checks)
    if not args.no_proton and "triton" in sys.modules:
        proton_phase(args, work, per_line, checks)
    elif not args.no_proton:
        print("SKIP proton: Triton is not installed")
    if checks.failed:
        print(f"PROFILE DEMO FAILED ({checks.failed})")
        return 1
    print("PROFILE DEMO PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
