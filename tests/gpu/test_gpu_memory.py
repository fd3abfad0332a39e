"""On a GPU: `kname profile --memory` names each line of tests/gpu/memory_demo.py with the bytes
it asked for, through the driver (raw cudaMalloc, cudaMallocAsync, cudaMallocManaged and
cudaHostAlloc through cuda-bindings; numba's device arrays), CuPy's pool and torch's caching
allocator, names the line holding the most at the peak, and matches every free (numba's, which
numba defers, once the demo's churn of small arrays has made numba run its pending frees).

Marked `gpu`, skipped without a CUDA driver or cupti-python; a library the machine lacks is left
out (the demo prints what it expects). Runs `kname profile -- python memory_demo.py` with
KNAME_PROFILE_MEMORY=1 (what `--memory` sets), once per launch callback (native, Python).
Pool rounding: torch and CuPy round a block up to 512 bytes, so whole MiB are exact; the check
allows 1% over what was asked.
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest
from support import REPO, profile_missing_reason
from support.gpu_programs import SITE, profiled_run

from kname.documents.backward_lines import BACKWARD_OF
from kname.profiling.capture import NO_PYTHON_FRAME, UNNAMED

DEMO = REPO / "tests" / "gpu" / "memory_demo.py"
# Where each source's allocations are seen: the driver's device or pinned view, or a pool's.
VIEW = {"driver": "device", "torch": "torch", "cupy": "cupy"}

pytestmark = pytest.mark.gpu


def demo_marks() -> dict[str, dict]:
    spec = importlib.util.spec_from_file_location("memory_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.marked_lines()


def expected(stdout: str) -> dict[str, dict]:
    """The demo's `EXPECT tag source bytes alloc free` lines: what this machine ran."""
    rows = {}
    for line in stdout.splitlines():
        if line.startswith("EXPECT "):
            _, tag, source, size, alloc, _free = line.split()
            rows[tag] = {"source": source, "bytes": int(size), "alloc": int(alloc)}
    return rows


def by_line(document: dict) -> dict[int, dict]:
    """{line number of memory_demo.py: its site}."""
    sites = {}
    for site in document["sites"]:
        match = SITE.fullmatch(site["name"])
        if match and match["path"] == "memory_demo.py":
            sites[int(match["line"])] = site
    return sites


@pytest.mark.skipif(profile_missing_reason() is not None, reason=str(profile_missing_reason()))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_each_line_holds_the_bytes_it_asked_for_and_the_peak_line_is_named(
    tmp_path, callbacks
) -> None:
    document, run = profiled_run(
        DEMO, tmp_path, callbacks, "MEMORY DEMO DONE", KNAME_PROFILE_MEMORY="1"
    )
    rows = expected(run.stdout)
    assert rows, run.stdout
    sites = by_line(document)
    for tag, row in rows.items():
        view = "pinned" if tag == "raw_pinned" else VIEW[row["source"]]
        site = sites.get(row["alloc"])
        assert site is not None and view in site.get("memory", {}), (tag, sorted(sites))
        numbers = site["memory"][view]
        assert row["bytes"] <= numbers["allocated"] <= 1.01 * row["bytes"], (tag, numbers)
        # Frees matched to the allocating line; numba's arrives late, from the demo's churn
        # line (numba defers its frees: docs/memory.md), and is still charged here.
        assert numbers["freed"] == numbers["allocated"], (tag, numbers, run.stdout[-400:])
    if "torch_peak" in rows:
        peak_site = sites[rows["torch_peak"]["alloc"]]
        held = {
            number: site["memory"]["torch"]["at_peak"]
            for number, site in sites.items()
            if "torch" in site.get("memory", {})
        }
        assert max(held, key=held.get) == rows["torch_peak"]["alloc"], held
        assert peak_site["memory"]["torch"]["at_peak"] >= rows["torch_peak"]["bytes"]
        assert document["memory"]["torch"]["peak"] >= sum(
            row["bytes"] for tag, row in rows.items() if row["source"] == "torch"
        )
    if "numba_array" in rows:  # the churn line freed numba_array (and made its own arrays)
        churn = sites.get(demo_marks()["numba_array"]["free"], {}).get("memory", {})
        assert churn.get("device", {}).get("allocations", 0) >= 1, sorted(sites)
    marks = demo_marks()
    assert set(rows) <= set(marks)  # the demo printed what its marks say


STEP = REPO / "tests" / "gpu" / "memory_cost.py"


def torch_view(document: dict) -> dict[str, dict]:
    """{site name: its torch view} of a profile."""
    return {
        site["name"]: site["memory"]["torch"]
        for site in document["sites"]
        if "torch" in site.get("memory", {})
    }


# How torch's blocks are followed in each run: its allocator's tracker (the default, with the
# native launch callback), the GPU trace's C hook, the GPU trace's Python hook.
TORCH_PATHS = {
    "tracker": ("native", {}),
    "hook": ("native", {"KNAME_PROFILE_TORCH_TRACKER": "0"}),
    "python": ("python", {}),
}


def blocks_by_line(view: dict[str, dict]) -> Counter:
    """{(file, line): blocks handed out} of a torch view; a backward block counts for its pass's
    line."""
    lines: Counter = Counter()
    for name, numbers in view.items():
        match = SITE.match(name)
        lines[(match["path"], int(match["line"])) if match else (name, 0)] += numbers["allocations"]
    return lines


@pytest.mark.skipif(profile_missing_reason() is not None, reason=str(profile_missing_reason()))
@pytest.mark.parametrize("per_forward_line", [False, True], ids=["pass", "backward-lines"])
def test_a_training_steps_blocks_go_to_the_same_lines_through_the_tracker_and_both_hooks(
    tmp_path, per_forward_line
) -> None:
    """tests/gpu/memory_cost.py (Adam on two conv and two linear layers, 300 steps) under
    --memory: torch's allocator tracker (built here, no fallback said), the GPU trace's C hook
    and its Python hook charge the same blocks to the same names, the backward pass's
    (allocated on autograd's thread, no Python frame) to its line, none left unnamed. With
    --backward-lines the default path is the GPU trace's too (`tracker` below), and a backward
    block whose forward line is known goes to `pass [backward of line]`."""
    views, runs = {}, {}
    backward_lines = {"KNAME_PROFILE_BACKWARD": "1"} if per_forward_line else {}
    for path, (callbacks, settings) in TORCH_PATHS.items():
        (tmp_path / path).mkdir()
        document, runs[path] = profiled_run(
            STEP, tmp_path / path, callbacks, "ALLOC", KNAME_PROFILE_MEMORY="1",
            **settings, **backward_lines,
        )  # fmt: skip
        views[path] = torch_view(document)
    assert "allocator tracker is not used" not in runs["tracker"].stderr, runs["tracker"].stderr
    tracker, native, python = views["tracker"], views["hook"], views["python"]
    # With --backward-lines a backward block goes to its pass and its forward line
    # (BACKWARD_OF); without, to its pass alone.
    assert any(BACKWARD_OF in name for name in tracker) == per_forward_line, sorted(tracker)
    for other in (tracker, python):
        assert native.keys() == other.keys(), sorted(native.keys() ^ other.keys())
        for name, numbers in native.items():
            # The same program: the same blocks, but for a warm-up's one-off (cuDNN's workspace).
            assert abs(numbers["allocations"] - other[name]["allocations"]) <= 2, name
            assert numbers["frees"] <= numbers["allocations"], name
    tracked = blocks_by_line(tracker)
    backward_line = next(
        number
        for number, text in enumerate(STEP.read_text().splitlines(), 1)
        if "loss.backward()" in text
    )
    assert tracked[("memory_cost.py", backward_line)] >= 300, sorted(tracked)
    for view in views.values():
        assert NO_PYTHON_FRAME not in view and UNNAMED not in view, sorted(view)
