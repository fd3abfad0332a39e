"""On a GPU: `kname attach` and KNAME_PROFILE_TRIGGER on a torch loop (tests/gpu/attach_demo.py)
started with KNAME=1, from this checkout.

- A window of 3 s in a 16 s loop that replays a CUDA graph: the profile holds the window's
  launches and no others (the loop counts, from kname's collecting phase, the iterations
  certainly in the window and those possibly in it), with GPU time on each marked line; the
  graph captured before the window is said plainly to stay at its replay line; and, graphs
  having run under CUPTI, kname says it leaves CUPTI attached (a traced graph fails once CUPTI is
  finalized: measured, docs/attach.md).
- Two windows in a loop without graphs: CUPTI is finalized after each (at the loop's next CUDA
  call), the second window still records, each is bounded by the loop's counts, and the loop's
  iteration time after each window is the time before the first, within the A/A spread of the
  two halves before it (or 5%).
- Two ranks (RANK=0/1, one GPU) and one trigger file: each writes its rank file for the same
  window, which `kname report --straggler` reads.

Marked `gpu`, skipped without a CUDA driver, cupti-python or a CUDA build of torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, profile_missing_reason
from support.gpu_programs import marked_lines

from kname.documents.files import load

DEMO = REPO / "tests" / "gpu" / "attach_demo.py"
LINE = {marker: number for number, marker in marked_lines(DEMO).items()}
PER_ITERATION = {"mul": 8, "add": 1}  # launches each iteration makes at each line
GRAPH_KERNELS = 4  # the captured graph's kernels, replayed once an iteration

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _gpu_and_torch() -> None:
    missing = profile_missing_reason()
    if missing is None and importlib.util.find_spec("torch") is None:
        missing = "torch is not installed"
    if missing is not None:
        pytest.skip(missing)


def site(function: str, marker: str) -> str:
    return f"{function} attach_demo.py:{LINE[marker]}"


def start_demo(folder: Path, seconds: float, env: dict[str, str] | None = None):
    """The demo under `kname run` in `folder`, once its timed loop has begun: (process, pid of
    the program, its summary's path)."""
    folder.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    environ.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **(env or {}))
    ready, summary = folder / "ready", folder / "summary.json"
    command = [sys.executable, "-m", "kname", "run", "--", sys.executable, str(DEMO),
               str(seconds), str(summary), str(ready)]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=folder, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not ready.exists() or not ready.read_text():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the demo never began its loop"
        time.sleep(0.05)
    return process, int(ready.read_text()), summary


def finished(process: subprocess.Popen, summary: Path) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0 and "attach demo done" in out, err[-4000:]
    assert "internal error" not in err, err[-4000:]
    return json.loads(summary.read_text())


def assert_window_only(profile: dict, window: dict) -> None:
    """Each marked line holds the launches of the iterations run with the window open: at least
    those open at both ends, at most those open at either; each with GPU time."""
    sites = {entry["name"]: entry for entry in profile["sites"]}
    for marker, launches in PER_ITERATION.items():
        entry = sites[site("step", marker)]
        low, high = launches * window["inside"], launches * window["touched"]
        assert low <= entry["launches"] <= high, (marker, entry["launches"], window)
        assert entry["gpu_ns"] > 0
    assert window["inside"] > 0


def test_attach_profiles_only_the_window_and_says_graphs_keep_cupti(tmp_path) -> None:
    process, pid, summary = start_demo(tmp_path / "kname", 16)
    time.sleep(5)
    done = attach(pid, 3, "p.json", tmp_path)
    assert done.returncode == 0, done.stderr
    counts = finished(process, summary)
    print(done.stdout, done.stderr, json.dumps(counts))
    profile = load(str(tmp_path / "p.json"))
    (window,) = counts["windows"]
    assert_window_only(profile, window)
    assert site("step", "mul") in done.stdout  # the table, printed by the command
    # The graph was captured before the window: its kernels stay at the replay line, said so.
    replay = {entry["name"]: entry for entry in profile["sites"]}[site("step", "replay")]
    assert replay["replayed_unseen"]["launches"] >= GRAPH_KERNELS * window["inside"]
    assert "CUDA graphs captured before the window" in done.stderr
    # Graphs ran under CUPTI: it stays attached (no finalize), said so, and the loop runs on.
    assert "CUPTI stays attached to this process after the window" in done.stderr
    assert counts["finalize"][:2] == [0, 0]
    before, after = counts["segments_us"]
    print(f"CUPTI attached: after/before {after / before - 1:+.1%} ({before:.1f} us, {after:.1f})")


def test_after_each_window_cupti_is_finalized_and_the_loop_runs_as_before(tmp_path) -> None:
    process, pid, summary = start_demo(tmp_path / "kname", 16, {"ATTACH_DEMO_GRAPH": "0"})
    time.sleep(4)
    first = attach(pid, 2, "p.json", tmp_path)
    time.sleep(2.5)
    second = attach(pid, 2, "q.json", tmp_path)  # after CUPTI was finalized
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    counts = finished(process, summary)
    print(first.stderr, second.stderr, json.dumps(counts))
    profiles = [load(str(tmp_path / name)) for name in ("p.json", "q.json")]
    for profile, window in zip(profiles, counts["windows"], strict=True):  # two windows
        assert_window_only(profile, window)
    assert "CUPTI stays attached" not in first.stderr + second.stderr
    assert counts["finalize"] == [0, 2, 0]  # finalized twice, no waiting one, no error
    # After each window an iteration takes what it took before the first, within the spread of
    # the two halves before it (an A/A pair), or 5%.
    halves = counts["median_first_half_us"], counts["median_second_half_us"]
    spread = abs(halves[0] - halves[1]) / min(halves)
    before, *afters = counts["segments_us"]
    changes = [after / before - 1 for after in afters]
    print(f"after/before {[f'{c:+.1%}' for c in changes]}, A/A spread {spread:.1%}")
    assert len(changes) == 2 and all(abs(c) <= max(3 * spread, 0.05) for c in changes)


def attach(pid: int, seconds: float, output: str, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kname", "attach", str(pid), "--duration", str(seconds), "--json",
         output], cwd=folder, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_one_trigger_gives_two_ranks_their_files_for_the_same_window(tmp_path) -> None:
    trigger = tmp_path / "kname.trigger"
    started = []
    for rank in (0, 1):
        env = {"KNAME_PROFILE_TRIGGER": str(trigger), "RANK": str(rank), "WORLD_SIZE": "2"}
        env["LOCAL_RANK"] = str(rank)
        started.append(start_demo(tmp_path / f"rank{rank}", 12, env))
    time.sleep(1)
    trigger.write_text("duration=3\n")
    trigger.chmod(0o600)
    starts = []
    for rank, (process, _, summary) in enumerate(started):
        (window,) = finished(process, summary)["windows"]
        profile = load(str(tmp_path / f"kname-profile.rank{rank}.json"))
        assert_window_only(profile, window)
        record = profile["ranks"][0]
        assert (record["rank"], record["world_size"], record["window"]["by"]) == (
            rank,
            2,
            "trigger",
        )
        starts.append(record["window"]["start_ns"])
    assert abs(starts[0] - starts[1]) < 0.5e9  # the same window on both ranks
    report = subprocess.run(
        [sys.executable, "-m", "kname", "report", "kname-profile.rank0.json",
         "kname-profile.rank1.json", "--straggler", "20%"], cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert site("step", "mul") in report.stdout
