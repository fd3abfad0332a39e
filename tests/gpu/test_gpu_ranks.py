"""On GPUs: `kname profile -- torchrun --nproc-per-node 2` (tests/gpu/ranks_demo.py), one file
per rank, none from torchrun's agent, and `kname report` across the ranks.

Marked `gpu`, skipped without a CUDA driver, cupti-python or a CUDA build of torch. On one GPU
both ranks share it and talk through gloo; the NCCL test needs two GPUs (skipped with fewer):
there the all_reduce lines, blocking and asynchronous, carry the NCCL kernels' GPU time on each
rank, and a rank made slow on purpose is named the straggler of the compute line.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, profile_missing_reason

from kname.documents.files import load

DEMO = REPO / "tests" / "gpu" / "ranks_demo.py"
LINE = {
    match[1]: number
    for number, text in enumerate(DEMO.read_text().splitlines(), 1)
    if (match := re.search(r"#\s*site:\s*(\S+)\s*$", text))
}

pytestmark = pytest.mark.gpu


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


def site(marker: str) -> str:
    return f"main ranks_demo.py:{LINE[marker]}"


def profile_job(
    tmp_path: Path, *demo_args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`kname profile --json profile.json -- torchrun --standalone --nproc-per-node 2 ...`, with
    kname from the checkout (its start-up folder reaches torchrun and its workers)."""
    shutil.copy(DEMO, tmp_path / "ranks_demo.py")
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if not k.startswith("KNAME")}
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    torchrun = shutil.which("torchrun")
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    job = [*launcher, "--standalone", "--nproc-per-node", "2", "ranks_demo.py", *demo_args]
    command = [sys.executable, "-m", "kname", "profile", "--json", "profile.json", "--", *job]
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and output.count("RANKS DEMO DONE") == 2, output[-6000:]
    assert "internal error" not in output, output[-6000:]
    print(done.stderr[-4000:])  # rank 0's table, for the log of the run
    return done


def report(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    files = sorted(str(path) for path in tmp_path.glob("profile.rank*.json"))
    return subprocess.run(
        [sys.executable, "-m", "kname", "report", *files, *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def rank_files(tmp_path: Path) -> list[dict]:
    """The two ranks' profiles; the launcher (torchrun's agent) wrote none."""
    assert sorted(p.name for p in tmp_path.glob("profile*.json")) == [
        "profile.rank0.json",
        "profile.rank1.json",
    ]
    return [load(str(tmp_path / f"profile.rank{rank}.json")) for rank in (0, 1)]


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_torchrun_on_one_gpu_gives_two_rank_files_and_a_report_with_the_spread(tmp_path):
    # Both ranks on one GPU, also where the machine has more.
    done = profile_job(tmp_path, "--backend", "gloo", env={"CUDA_VISIBLE_DEVICES": "0"})
    # Rank 0's table alone, naming its process (the pid its profile records).
    lines = done.stderr.splitlines()
    (heading,) = [line for line in lines if line.startswith("kname profile of process ")]
    pid = load(str(tmp_path / "profile.rank0.json"))["ranks"][0]["pid"]
    assert heading.startswith(f"kname profile of process {pid} (rank 0 of 2): ")
    for rank, document in enumerate(rank_files(tmp_path)):
        (record,) = document["ranks"]
        assert (record["rank"], record["world_size"], record["launcher"]) == (rank, 2, "torchrun")
        assert record["device"] == "0"  # both ranks share the one GPU
        sites = {s["name"]: s for s in document["sites"]}
        assert sites[site("compute")]["launches"] == 20 and sites[site("compute")]["gpu_ns"] > 0
    table = report(tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "2 ranks)" in lines[0]
    assert lines[1].split()[7:] == ["rank", "min", "median", "max", "slowest", "kernels"]
    (compute,) = [line for line in lines if line.startswith(site("compute") + " ")]
    assert " rank " in compute
    by_rank = report(tmp_path, "--by-rank")
    assert by_rank.returncode == 0 and site("compute") in by_rank.stdout


@pytest.mark.skipif(_missing(gpus=2) is not None, reason=str(_missing(gpus=2)))
def test_on_two_gpus_nccl_kernels_go_to_their_collective_lines_and_the_slow_rank_is_named(
    tmp_path,
):
    profile_job(tmp_path, "--backend", "nccl", "--slow-rank", "1")
    for rank, document in enumerate(rank_files(tmp_path)):
        assert document["ranks"][0]["device"] == str(rank)
        sites = {s["name"]: s for s in document["sites"]}
        for marker in ("all_reduce", "all_reduce_async"):
            nccl = {
                name: kernel
                for name, kernel in sites[site(marker)]["kernels"].items()
                if "nccl" in name.lower()
            }
            assert nccl, (rank, marker, sites[site(marker)]["kernels"])
            assert sum(k["launches"] for k in nccl.values()) >= 20  # one a step, at least
            assert all(k["gpu_ns"] > 0 for k in nccl.values())
        assert document["unattributed"]["launches"] == 0
        # The slow rank computes three times as much at the compute line.
        assert sites[site("compute")]["launches"] == 20 * (3 if rank == 1 else 1)
    flagged = report(tmp_path, "--straggler", "20%", "--fail-on-straggler")
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert f"{site('compute')} (rank 1)" in flagged.stderr, flagged.stderr
    (compute,) = [line for line in flagged.stdout.splitlines() if line.startswith(site("compute"))]
    assert "! rank 1 " in compute
