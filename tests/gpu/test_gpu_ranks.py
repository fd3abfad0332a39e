"""On GPUs: `kname profile -- torchrun --nproc-per-node 2` (tests/gpu/ranks_demo.py), one file
per rank, none from torchrun's agent, and `kname report` across the ranks.

Marked `gpu`, skipped without a CUDA driver, cupti-python or a CUDA build of torch. On one GPU
both ranks share it and talk through gloo (rank 1 made slow: the straggler of the compute line);
the NCCL tests need two GPUs (skipped with fewer): there the all_reduce lines, blocking and
asynchronous, carry the NCCL kernels' GPU time on each rank, a rank made slow on purpose is
named the straggler of the compute line, and the fast rank's NCCL time at the blocking
all_reduce is mostly waiting for it: reported as waiting (documents/collectives.py), not as its
own work, and no straggler. On each rank a CUDA graph is captured and replayed: its kernels on
the lines that made them, under the replaying line. The trigger-file window
(KNAME_PROFILE_TRIGGER) opens on both ranks of a torchrun job under `kname run`: each writes
its window's file, and `kname report` merges them (gloo on one GPU, NCCL on two).

On the day two GPUs are lent: tests/gpu/multi_gpu.sh runs these and the 1,024-rank merge.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, profile_missing_reason

from kname.documents.collectives import split_waiting
from kname.documents.files import load
from kname.documents.merge import merge_files
from kname.documents.schema import BY_RANK

DEMO = REPO / "tests" / "gpu" / "ranks_demo.py"
LINE = {
    match[1]: number
    for number, text in enumerate(DEMO.read_text().splitlines(), 1)
    if (match := re.search(r"#\s*site:\s*(\S+)\s*$", text))
}

pytestmark = pytest.mark.gpu


@functools.cache
def _gpus() -> int:
    probe = [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=300, check=False)
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0


def _missing(gpus: int = 1) -> str | None:
    missing = profile_missing_reason()
    if missing is not None:
        return missing
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    found = _gpus()
    if found < gpus:
        return f"needs {gpus} CUDA GPU{'s' if gpus > 1 else ''}; torch sees {found}"
    return None


# The function of each marked line that is not in main().
FUNCTION = {"replay": "replay_graph", "graph_matmul": "graph_body", "graph_relu": "graph_body"}
REPLAYS = 20  # of each rank's CUDA graph (ranks_demo.py's default)
ONE_GPU = {"CUDA_VISIBLE_DEVICES": "0"}  # both ranks on one GPU, also where there are more


def site(marker: str) -> str:
    return f"{FUNCTION.get(marker, 'main')} ranks_demo.py:{LINE[marker]}"


def job_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without KNAME_*, with `env`, and kname from the checkout (its start-up
    folder reaches torchrun and its workers)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    environ.update(env or {})
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    environ.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    return environ


def torchrun(*demo_args: str) -> list[str]:
    """`torchrun --standalone --nproc-per-node 2 ranks_demo.py ...`."""
    found = shutil.which("torchrun")
    launcher = [found] if found else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, "--standalone", "--nproc-per-node", "2", "ranks_demo.py", *demo_args]


def profile_job(
    tmp_path: Path, *demo_args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`kname profile --json profile.json -- torchrun --standalone --nproc-per-node 2 ...`."""
    shutil.copy(DEMO, tmp_path / "ranks_demo.py")
    command = [sys.executable, "-m", "kname", "profile", "--json", "profile.json", "--"]
    done = subprocess.run(
        [*command, *torchrun(*demo_args)], env=job_environment(env), cwd=tmp_path,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0 and output.count("RANKS DEMO DONE") == 2, output[-6000:]
    assert "internal error" not in output, output[-6000:]
    print(done.stderr[-4000:])  # rank 0's table, for the log of the run
    return done


def report(
    tmp_path: Path, *args: str, files: str = "profile.rank*.json"
) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    paths = sorted(str(path) for path in tmp_path.glob(files))
    return subprocess.run(
        [sys.executable, "-m", "kname", "report", *paths, *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def rank_files(tmp_path: Path, stem: str = "profile") -> list[dict]:
    """The two ranks' profiles; the launcher (torchrun's agent) wrote none."""
    assert sorted(p.name for p in tmp_path.glob(f"{stem}*.json")) == [
        f"{stem}.rank0.json",
        f"{stem}.rank1.json",
    ]
    return [load(str(tmp_path / f"{stem}.rank{rank}.json")) for rank in (0, 1)]


def sites_of(document: dict) -> dict[str, dict]:
    return {s["name"]: s for s in document["sites"]}


def assert_graph_replayed(document: dict) -> None:
    """The rank's CUDA graph: each captured line's kernels under the replaying line, REPLAYS
    times each (a kernel a replay), with GPU time."""
    sites = sites_of(document)
    for marker in ("graph_matmul", "graph_relu"):
        replayed = sites[site(marker)].get("replayed_at", {})
        assert list(replayed) == [site("replay")], (marker, sites[site(marker)])
        (work,) = replayed.values()
        assert work["launches"] >= REPLAYS and work["launches"] % REPLAYS == 0, (marker, work)
        assert work["gpu_ns"] > 0


def nccl_kernels(document: dict, marker: str) -> dict[str, dict]:
    kernels = sites_of(document)[site(marker)]["kernels"]
    return {name: kernel for name, kernel in kernels.items() if "nccl" in name.lower()}


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_torchrun_on_one_gpu_gives_two_rank_files_and_a_report_with_the_spread(tmp_path):
    done = profile_job(tmp_path, "--backend", "gloo", "--slow-rank", "1", env=ONE_GPU)
    # Rank 0's table alone, naming its process (the pid its profile records).
    lines = done.stderr.splitlines()
    (heading,) = [line for line in lines if line.startswith("kname profile of process ")]
    pid = load(str(tmp_path / "profile.rank0.json"))["ranks"][0]["pid"]
    assert heading.startswith(f"kname profile of process {pid} (rank 0 of 2): ")
    for rank, document in enumerate(rank_files(tmp_path)):
        (record,) = document["ranks"]
        assert (record["rank"], record["world_size"], record["launcher"]) == (rank, 2, "torchrun")
        assert record["device"] == "0"  # both ranks share the one GPU
        sites = sites_of(document)
        assert sites[site("compute")]["launches"] == 20 * (3 if rank == 1 else 1)
        assert sites[site("compute")]["gpu_ns"] > 0
        assert_graph_replayed(document)  # on each rank
        assert not nccl_kernels(document, "all_reduce")  # gloo: no NCCL, no waiting told
    table = report(tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "2 ranks)" in lines[0]
    assert lines[1].split()[7:] == ["rank", "min", "median", "max", "slowest", "kernels"]
    (compute,) = [line for line in lines if line.startswith(site("compute") + " ")]
    assert " rank 1 " in compute
    (graph,) = [line for line in lines if line.startswith(site("graph_matmul") + " ")]
    assert f"(graph replayed at {site('replay')}" in graph  # and how many of its launches
    flagged = report(tmp_path, "--straggler", "20%", "--fail-on-straggler")
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert f"{site('compute')} (rank 1)" in flagged.stderr, flagged.stderr
    by_rank = report(tmp_path, "--by-rank")
    assert by_rank.returncode == 0 and site("compute") in by_rank.stdout


@pytest.mark.skipif(_missing(gpus=2) is not None, reason=str(_missing(gpus=2)))
def test_on_two_gpus_nccl_kernels_go_to_their_collective_lines_and_the_slow_rank_is_named(
    tmp_path,
):
    profile_job(tmp_path, "--backend", "nccl", "--slow-rank", "1")
    for rank, document in enumerate(rank_files(tmp_path)):
        assert document["ranks"][0]["device"] == str(rank)
        for marker in ("all_reduce", "all_reduce_async"):
            nccl = nccl_kernels(document, marker)
            assert nccl, (rank, marker, sites_of(document)[site(marker)]["kernels"])
            assert sum(k["launches"] for k in nccl.values()) >= 20  # one a step, at least
            assert all(k["gpu_ns"] > 0 for k in nccl.values())
        assert document["unattributed"]["launches"] == 0
        # The slow rank computes three times as much at the compute line.
        assert sites_of(document)[site("compute")]["launches"] == 20 * (3 if rank == 1 else 1)
        assert_graph_replayed(document)  # on each rank
    # Rank 0 reaches each blocking all_reduce first: its NCCL kernel waits there for rank 1,
    # which is the least, the collective's own cost; rank 0's excess over it is waiting.
    merged = merge_files(sorted(map(str, tmp_path.glob("profile.rank*.json"))), load)
    at = sites_of(merged)[site("all_reduce")]
    collective = list(at[BY_RANK]["collective_ns"])
    own, waiting = split_waiting(collective)
    assert waiting[1] == 0 and own == collective[1], collective
    assert waiting[0] > own, collective  # mostly waiting: the slow rank's extra matmuls
    flagged = report(tmp_path, "--straggler", "20%", "--fail-on-straggler")
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert f"{site('compute')} (rank 1)" in flagged.stderr, flagged.stderr
    assert f"{site('all_reduce')} (rank 0)" not in flagged.stderr, flagged.stderr
    (compute,) = [line for line in flagged.stdout.splitlines() if line.startswith(site("compute"))]
    assert "! rank 1 " in compute
    (line,) = [
        line for line in flagged.stdout.splitlines() if line.startswith(site("all_reduce") + " ")
    ]
    assert "!" not in line  # its waiting is not the fast rank's own work
    assert f"{site('all_reduce')}: " in flagged.stdout and " waiting " in flagged.stdout
    by_rank = report(tmp_path, "--by-rank")
    assert by_rank.returncode == 0 and by_rank.stdout.split("\n")[1].split()[-1] == "waiting"
    print(flagged.stdout, by_rank.stdout)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_a_trigger_file_opens_one_window_on_both_ranks_of_a_torchrun_job(tmp_path, backend):
    gpus = 1 if backend == "gloo" else 2
    if _missing(gpus) is not None:
        pytest.skip(str(_missing(gpus)))
    shutil.copy(DEMO, tmp_path / "ranks_demo.py")
    trigger, ready = tmp_path / "kname.trigger", tmp_path / "ready"
    ready.mkdir()
    env = {"KNAME_PROFILE_TRIGGER": str(trigger), **(ONE_GPU if gpus == 1 else {})}
    demo = ["--backend", backend, "--slow-rank", "1", "--steps", "300", "--size", "512"]
    demo += ["--pause", "0.03", "--ready", str(ready)]
    log = tmp_path / "job.log"  # a file, not a pipe: nothing read while the job runs
    with log.open("w") as output:
        job = subprocess.Popen(
            [sys.executable, "-m", "kname", "run", "--", *torchrun(*demo)], cwd=tmp_path,
            env=job_environment(env), stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while len(list(ready.glob("ready.rank*"))) < 2:
            assert job.poll() is None, log.read_text()[-6000:]
            assert time.monotonic() < deadline, "the ranks never began their steps"
            time.sleep(0.05)
        trigger.write_text("duration=3\n")
        trigger.chmod(0o600)
        job.wait(timeout=300)
    said = log.read_text()
    assert job.returncode == 0 and said.count("RANKS DEMO DONE") == 2, said[-6000:]
    assert "internal error" not in said, said[-6000:]
    starts = []
    for rank, document in enumerate(rank_files(tmp_path, "kname-profile")):
        (record,) = document["ranks"]
        assert (record["rank"], record["world_size"], record["window"]["by"]) == (
            rank,
            2,
            "trigger",
        )
        starts.append(record["window"]["start_ns"])
        # A window of 3 s inside 300 steps of 30 ms or more: some steps, not all of them.
        launches = sites_of(document)[site("compute")]["launches"]
        assert 0 < launches < 300 * (3 if rank == 1 else 1), launches
        if backend == "nccl":
            assert nccl_kernels(document, "all_reduce"), sites_of(document)[site("all_reduce")]
    assert abs(starts[0] - starts[1]) < 0.5e9  # the same window on both ranks
    merged = report(tmp_path, files="kname-profile.rank*.json")
    assert merged.returncode == 0 and "2 ranks)" in merged.stdout, merged.stderr
    print(merged.stdout)
