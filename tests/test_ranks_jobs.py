"""A job of several processes under kname: each rank writes its own census, the launcher none.

Real processes of the installed wheel, launching real numba kernels on the CUDA simulator. The
launchers are stand-ins, since none is installed here: each starts its processes with the
variables the real one gives them (kname.ranks.LAUNCHERS says where those are documented) and
nothing else of it. torchrun's is a Python program named torchrun, as the real one's console
script is: kname starts in it too, and must know it for the launcher it is. mpirun's and srun's
are shell scripts, as the real ones are no Python. A script may also start the ranks itself,
with multiprocessing. `kname report` then merges the rank files. Which rank a process is and
where its files go is the same code on either hot path: the tests run on the default one (the
census tests count launches on both).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from support import Venv, cleaned, kernels, line_of

from kname.documents.owner import OWNER_RANK_VARIABLE, OWNER_VARIABLE

pytestmark = [pytest.mark.slow, pytest.mark.launches, pytest.mark.any_hot_path]

APP = kernels.program("""\
import os


def rank():
    for variable in ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if os.environ.get(variable):
            return int(os.environ[variable])
    return 0


def main():
    out, x = np.zeros(4), np.ones(4)
    for _ in range(2 + rank()):  # rank r launches 2 + r kernels here
        axpy[1, 4](out, 2.0, x)  # L:work


if __name__ == "__main__":
    main()
""")
WORK = f"main app.py:{line_of(APP, 'L:work')}"

# torchrun's agent, as far as kname sees it: workers with torchrun's variables (its
# local_elastic_agent's _start_workers), started and waited for by a Python process.
TORCHRUN = """\
#!{python}
import argparse, os, subprocess, sys

parser = argparse.ArgumentParser()
parser.add_argument("--nproc-per-node", type=int, default=1)
parser.add_argument("program", nargs=argparse.REMAINDER)
args = parser.parse_args()
size = args.nproc_per_node
workers = [
    subprocess.Popen(
        [sys.executable, *args.program],
        env=dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(size),
                 LOCAL_WORLD_SIZE=str(size), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT="29500", TORCHELASTIC_RUN_ID="none"),
    )
    for rank in range(size)
]
sys.exit(max(worker.wait() for worker in workers))
"""
# Open MPI's mpirun (-n N): its processes' OMPI_COMM_WORLD_* variables.
MPIRUN = """\
#!/bin/sh
[ "$1" = "-n" ] || exit 2
size=$2; shift 2
rank=0
while [ $rank -lt $size ]; do
    OMPI_COMM_WORLD_RANK=$rank OMPI_COMM_WORLD_SIZE=$size OMPI_COMM_WORLD_LOCAL_RANK=$rank \\
        OMPI_COMM_WORLD_LOCAL_SIZE=$size "$@" &
    rank=$((rank + 1))
done
status=0
for job in $(jobs -p); do wait $job || status=1; done
exit $status
"""
# Slurm's srun (-n N): its tasks' SLURM_* variables, one step of one node.
SRUN = MPIRUN.replace(
    "OMPI_COMM_WORLD_RANK=$rank OMPI_COMM_WORLD_SIZE=$size OMPI_COMM_WORLD_LOCAL_RANK=$rank \\\n"
    "        OMPI_COMM_WORLD_LOCAL_SIZE=$size",
    "SLURM_PROCID=$rank SLURM_STEP_NUM_TASKS=$size SLURM_LOCALID=$rank SLURM_NTASKS=$size \\\n"
    "        SLURM_JOB_ID=4242 SLURM_STEP_ID=0",
)


@pytest.fixture
def job(tmp_path: Path, kname_venv: Venv) -> Path:
    """A working directory with app.py, and the launchers' stand-ins in bin/."""
    (tmp_path / "app.py").write_text(APP)
    launchers = tmp_path / "bin"
    launchers.mkdir()
    scripts = {"torchrun": TORCHRUN.format(python=kname_venv.python), "mpirun": MPIRUN}
    for name, text in {**scripts, "srun": SRUN}.items():
        (launchers / name).write_text(text)
        (launchers / name).chmod(stat.S_IRWXU)
    return tmp_path


def run(venv: Venv, job: Path, *command: str, **env: str) -> subprocess.CompletedProcess:
    """`command` in `job`, from a shell with the venv and the launchers on PATH."""
    environ = {k: v for k, v in os.environ.items() if not cleaned(k)}  # KNAME_NATIVE stays
    for variable in ("PYTHONPATH", OWNER_VARIABLE, OWNER_RANK_VARIABLE):
        environ.pop(variable, None)
    path = [str(job / "bin"), str(venv.root / "bin"), environ.get("PATH", "")]
    environ.update(PATH=os.pathsep.join(path), NUMBA_ENABLE_CUDASIM="1", **env)
    done = subprocess.run(
        list(command), cwd=job, env=environ, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done


def censuses(job: Path) -> dict[str, dict]:
    """Every census file written in `job` (and below), by its path there."""
    return {
        str(path.relative_to(job)): json.loads(path.read_text())
        for path in sorted(job.rglob("*.json"))
    }


def who_and_what(census: dict) -> tuple:
    """(rank, world size, launcher, launches at the app's line) of a one-process census."""
    (record,) = census["ranks"]
    launches = {site["name"]: site["launches"] for site in census["sites"]}
    return record["rank"], record["world_size"], record["launcher"], launches.get(WORK)


def test_under_torchrun_each_worker_writes_its_rank_and_the_launcher_nothing(kname_venv, job):
    run(kname_venv, job, "kname", "run", "--report", "census.json", "--",
        "torchrun", "--nproc-per-node", "2", "app.py")  # fmt: skip
    written = censuses(job)
    assert sorted(written) == ["census.rank0.json", "census.rank1.json"]  # none by the agent
    assert who_and_what(written["census.rank0.json"]) == (0, 2, "torchrun", 2)
    assert who_and_what(written["census.rank1.json"]) == (1, 2, "torchrun", 3)
    record = written["census.rank1.json"]["ranks"][0]
    assert (record["local_rank"], record["host"]) == (1, socket.gethostname())


def test_under_mpirun_four_ranks_write_four_files_that_kname_report_merges(kname_venv, job):
    run(kname_venv, job, "kname", "run", "--report", "census.json", "--",
        "mpirun", "-n", "4", "python", "app.py")  # fmt: skip
    written = censuses(job)
    assert sorted(written) == [f"census.rank{rank}.json" for rank in range(4)]
    for rank in range(4):
        assert who_and_what(written[f"census.rank{rank}.json"]) == (rank, 4, "openmpi", 2 + rank)
    files = sorted(str(job / name) for name in written)
    table = run(kname_venv, job, "kname", "report", *files).stdout.splitlines()
    assert table[0].endswith("4 ranks): 14 launches from 1 call site")
    assert table[1].split()[-5:] == ["rank", "min", "median", "max", "slowest"]
    # launches: 2 + rank on each; the most on rank 3, 43% over the median (3.5)
    assert table[2].split()[-9:] == ["14", "100.0%", "1", "2", "3.5", "5", "rank", "3", "(+43%)"]
    by_rank = run(kname_venv, job, "kname", "report", *files, "--by-rank").stdout.splitlines()
    assert [line.split()[-3:-1] for line in by_rank[2:]] == [["0", "2"], ["1", "3"], ["2", "4"],
                                                            ["3", "5"]]  # fmt: skip


def test_srun_starts_kname_in_each_task_and_placeholders_name_the_files(kname_venv, job):
    host = socket.gethostname()
    (job / "out" / host).mkdir(parents=True)
    run(kname_venv, job, "srun", "-n", "2", "kname", "run", "--report",
        "out/{host}/c.{rank}.json", "--", "python", "app.py")  # fmt: skip
    written = censuses(job)
    assert sorted(written) == [f"out/{host}/c.0.json", f"out/{host}/c.1.json"]
    assert who_and_what(written[f"out/{host}/c.1.json"]) == (1, 2, "slurm", 3)


def test_kname_ranks_profiles_only_the_ranks_it_names(kname_venv, job):
    run(kname_venv, job, "kname", "run", "--report", "census.json", "--",
        "mpirun", "-n", "4", "python", "app.py", KNAME_RANKS="0,3")  # fmt: skip
    assert sorted(censuses(job)) == ["census.rank0.json", "census.rank3.json"]


def test_a_bad_placeholder_is_one_line_at_start_up_and_nothing_is_written(kname_venv, job):
    done = run(kname_venv, job, "kname", "run", "--report", "c.{rnak}.json", "--",
               "mpirun", "-n", "2", "python", "app.py")  # fmt: skip
    said = [line for line in done.stderr.splitlines() if "c.{rnak}.json" in line]
    assert (
        said
        == [
            "kname: KNAME_REPORT='c.{rnak}.json' has an unknown placeholder '{rnak}'; accepted: "
            "{rank} {host} {pid}, and {{ and }} for a brace; nothing is written there"
        ]
        * 2
    )  # once in each rank, each on a line of its own
    assert censuses(job) == {}


# A script that starts a job's processes itself with multiprocessing, giving each torchrun's
# variables: a spawned process takes the environment as it is when it starts.
SPAWNER = """\
import multiprocessing
import os
import sys

import app

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    workers = []
    for rank in range(4):
        os.environ.update(RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank))
        workers.append(context.Process(target=app.main))
        workers[-1].start()
    for variable in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        del os.environ[variable]  # this script is no rank
    for worker in workers:
        worker.join()
    sys.exit(max(worker.exitcode for worker in workers))
"""


def test_workers_multiprocessing_starts_with_ranks_own_their_files_and_the_script_its_own(
    kname_venv, job
):
    (job / "spawner.py").write_text(SPAWNER)
    done = run(kname_venv, job, "kname", "run", "--report", "census.json", "--",
               "python", "spawner.py")  # fmt: skip
    written = censuses(job)
    # multiprocessing's resource tracker, started with rank 0's variables, launched nothing: it
    # writes no file beside rank 0's
    assert sorted(written) == ["census.json", *(f"census.rank{rank}.json" for rank in range(4))]
    assert "another process wrote" not in done.stderr
    assert written["census.json"]["total_launches"] == 0  # the script launched nothing itself
    assert [who_and_what(written[f"census.rank{r}.json"]) for r in range(4)] == [
        (rank, 4, "torchrun", 2 + rank) for rank in range(4)
    ]
