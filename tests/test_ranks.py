"""Tests for kname.ranks: who a process is in a job, found in its launcher's environment (each
rank's own output path is in test_rank_paths.py).

The environments are the variables each launcher sets, as its source or documentation gives them
(see kname.ranks.LAUNCHERS); no launcher runs here.
"""

from __future__ import annotations

import itertools
import json
import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kname.config import format_ranks, read_config
from kname.ranks import (
    LAUNCHERS,
    LONE,
    Rank,
    find_rank,
    is_launcher,
    meta,
    selected,
    visible_device,
)

# What each launcher gives one process: rank 5 of 8, the second on its node.
TORCHRUN = {
    "LOCAL_RANK": "1", "RANK": "5", "GROUP_RANK": "2", "ROLE_RANK": "5", "ROLE_NAME": "default",
    "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "4", "ROLE_WORLD_SIZE": "8",
    "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "none",
}  # fmt: skip
OPEN_MPI = {
    "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_UNIVERSE_SIZE": "8", "OMPI_COMM_WORLD_NODE_RANK": "1",
}  # fmt: skip
HYDRA = {
    "PMI_RANK": "5", "PMI_SIZE": "8", "PMI_FD": "7", "MPI_LOCALNRANKS": "2",
    "MPI_LOCALRANKID": "1", "PMI_HOSTNAME": "node2",
}  # fmt: skip
SRUN = {
    "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8", "SLURM_NPROCS": "8",
    "SLURM_STEP_NUM_NODES": "4", "SLURM_NNODES": "4",
}  # fmt: skip
# An sbatch script (the batch step): one process, though Slurm gives it task 0 and the job's
# task count.
SBATCH_SCRIPT = {
    "SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
    "SLURM_NTASKS": "8", "SLURM_NPROCS": "8", "SLURM_NNODES": "4", "ENVIRONMENT": "BATCH",
}  # fmt: skip
ENVIRONMENTS = {"torchrun": TORCHRUN, "openmpi": OPEN_MPI, "pmi": HYDRA, "slurm": SRUN}


def the_problem(rank: Rank) -> str:
    assert len(rank.problems) == 1, rank.problems
    return rank.problems[0]


# --------------------------------------------------------------------------
# Each launcher
# --------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", sorted(ENVIRONMENTS))
def test_each_launchers_environment_gives_its_rank_local_rank_and_world_size(launcher) -> None:
    found = find_rank(ENVIRONMENTS[launcher])
    assert found == Rank(rank=5, local_rank=1, world_size=8, launcher=launcher)
    assert found.problems == ()


def test_no_launcher_is_a_lone_process_rank_0_of_1() -> None:
    assert find_rank({"PATH": "/usr/bin", "HOME": "/home/me"}) == LONE
    assert Rank(rank=0, local_rank=0, world_size=1, launcher=None) == LONE


def test_an_sbatch_script_is_a_lone_process_though_slurm_gives_it_task_0_of_the_job() -> None:
    # SLURM_NTASKS is the job's; only srun's steps set SLURM_STEP_NUM_TASKS.
    found = find_rank(SBATCH_SCRIPT)
    assert found == LONE
    assert found.problems == ()


def test_find_rank_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for launcher in LAUNCHERS:
        for variable in launcher[1:]:
            monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert find_rank() == Rank(rank=2, local_rank=None, world_size=4, launcher="openmpi")


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda launcher: launcher.name)
def test_a_launcher_counts_only_with_both_its_rank_and_its_world_size(launcher) -> None:
    # RANK alone is a common name for other things: without WORLD_SIZE it says nothing.
    assert find_rank({launcher.rank: "1"}) == LONE
    assert find_rank({launcher.world_size: "4", launcher.local_rank: "1"}) == LONE
    assert find_rank({launcher.rank: " ", launcher.world_size: "4"}).problems == ()


def test_a_launcher_without_a_local_rank_leaves_it_unknown() -> None:
    found = find_rank({"PMI_RANK": "3", "PMI_SIZE": "4"})  # Hydra with another PMI setup
    assert found == Rank(rank=3, local_rank=None, world_size=4, launcher="pmi")
    assert found.problems == ()


def test_values_may_have_spaces_and_leading_zeros() -> None:
    found = find_rank({"RANK": " 03 ", "WORLD_SIZE": "04\n", "LOCAL_RANK": "0"})
    assert (found.rank, found.world_size, found.local_rank) == (3, 4, 0)


# --------------------------------------------------------------------------
# Precedence: the launcher that started this very process wins
# --------------------------------------------------------------------------


def test_torchrun_under_srun_is_torchruns_worker_not_slurms_task() -> None:
    # srun starts one torchrun per node (task 1 of 2); torchrun starts the workers.
    node_task = {"SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    found = find_rank({**node_task, "RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8"})
    assert found == Rank(rank=6, local_rank=2, world_size=8, launcher="torchrun")


def test_mpirun_inside_an_sbatch_job_is_mpis_rank() -> None:
    found = find_rank({**SBATCH_SCRIPT, **OPEN_MPI, "OMPI_COMM_WORLD_RANK": "7"})
    assert (found.rank, found.launcher) == (7, "openmpi")


@pytest.mark.parametrize(
    ("inner", "outer"),
    list(itertools.combinations([launcher.name for launcher in LAUNCHERS], 2)),
)
def test_of_two_launchers_the_inner_one_wins(inner: str, outer: str) -> None:
    outer_env = {k: str(int(v) - 1) for k, v in ENVIRONMENTS[outer].items() if v.isdigit()}
    found = find_rank({**outer_env, **ENVIRONMENTS[inner]})
    assert found == Rank(rank=5, local_rank=1, world_size=8, launcher=inner)


def test_the_order_of_launchers_is_torchrun_open_mpi_pmi_slurm() -> None:
    assert [launcher.name for launcher in LAUNCHERS] == ["torchrun", "openmpi", "pmi", "slurm"]


# --------------------------------------------------------------------------
# Malformed values: one line each, naming the variable and what is accepted; never raised
# --------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda launcher: launcher.name)
@pytest.mark.parametrize("value", ["x", "-1", "1.5", "+2", "٣", "4", "9", "1" * 5000])
def test_a_rank_that_is_not_one_of_the_world_is_one_line_and_the_launcher_is_not_used(
    launcher, value
) -> None:
    found = find_rank({launcher.rank: value, launcher.world_size: "4"})
    assert found == LONE
    problem = the_problem(found)
    assert problem.startswith(f"{launcher.rank}={value!r} is not a rank of {launcher.world_size}=4")
    assert "accepted is a whole number from 0 to 3" in problem
    assert f"{launcher.name}'s rank is not used" in problem
    assert len(problem.splitlines()) == 1


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda launcher: launcher.name)
@pytest.mark.parametrize("value", ["0", "x", "-2", "2.0", "1" * 5000])
def test_a_world_size_that_is_not_one_is_one_line_and_the_launcher_is_not_used(
    launcher, value
) -> None:
    found = find_rank({launcher.rank: "0", launcher.world_size: value})
    assert found == LONE
    problem = the_problem(found)
    assert problem.startswith(f"{launcher.world_size}={value!r} is not a world size")
    assert "accepted is a whole number of 1 or more" in problem
    assert len(problem.splitlines()) == 1


def test_a_malformed_launcher_gives_way_to_the_next_one() -> None:
    found = find_rank({"RANK": "eight", "WORLD_SIZE": "8", **SRUN})
    assert found == Rank(rank=5, local_rank=1, world_size=8, launcher="slurm")
    assert the_problem(found).startswith("RANK='eight'")


@pytest.mark.parametrize("value", ["x", "-1", "8", "1" * 5000])
def test_a_bad_local_rank_is_one_line_and_left_unknown_and_the_rank_kept(value: str) -> None:
    found = find_rank({**OPEN_MPI, "OMPI_COMM_WORLD_LOCAL_RANK": value})
    assert found == Rank(rank=5, local_rank=None, world_size=8, launcher="openmpi")
    problem = the_problem(found)
    assert problem.startswith(f"OMPI_COMM_WORLD_LOCAL_RANK={value!r} is not a local rank")
    assert "accepted is a whole number from 0 to 7" in problem


LAUNCHER_VARIABLES = sorted({v for launcher in LAUNCHERS for v in launcher[1:]})
launcher_values = st.one_of(
    st.integers(-3, 12).map(str),
    st.text(max_size=12),
    st.sampled_from(["", " ", "0", "1", "4", "١", "1e3", "0x3", "1" * 5000]),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(LAUNCHER_VARIABLES), launcher_values, max_size=12))
def test_find_rank_never_raises_and_always_gives_a_rank_of_its_world(env) -> None:
    found = find_rank(env)
    assert 0 <= found.rank < found.world_size
    assert found.local_rank is None or 0 <= found.local_rank < found.world_size
    assert found.launcher in (None, *(launcher.name for launcher in LAUNCHERS))
    for problem in found.problems:
        assert len(problem.splitlines()) == 1, problem
        named = problem.split("=", 1)[0]
        assert named in env and env[named].strip(), problem


def test_a_rank_is_frozen_and_its_problems_are_not_part_of_its_value() -> None:
    with pytest.raises(AttributeError):
        LONE.rank = 3  # type: ignore[misc]
    assert Rank(problems=("something",)) == LONE


# --------------------------------------------------------------------------
# selected: KNAME_RANKS
# --------------------------------------------------------------------------


def ranks(text: str):
    return read_config({"KNAME_RANKS": text}).ranks


@pytest.mark.parametrize(
    ("rank", "text", "chosen"),
    [(0, "0,3", True), (3, "0,3", True), (2, "0,3", False), (7, "0-7", True), (8, "0-7", False),
     (4, "0,2-5", True), (1, "0,2-5", False)],
)  # fmt: skip
def test_a_rank_profiles_when_kname_ranks_names_it(rank: int, text: str, chosen: bool) -> None:
    assert selected(Rank(rank=rank, world_size=16, launcher="torchrun"), ranks(text)) is chosen


def test_every_rank_profiles_without_kname_ranks() -> None:
    assert selected(Rank(rank=9, world_size=16, launcher="slurm"), None)


def test_a_process_no_launcher_named_always_profiles() -> None:
    assert selected(LONE, ranks("3-5"))


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 63), min_size=1), st.integers(0, 63))
def test_selected_is_membership_in_the_ranks_written(chosen: set[int], rank: int) -> None:
    text = ",".join(str(r) for r in sorted(chosen))
    spans = ranks(text)
    assert format_ranks(spans) == format_ranks(ranks(format_ranks(spans)))
    assert selected(Rank(rank=rank, world_size=64, launcher="pmi"), spans) is (rank in chosen)


# --------------------------------------------------------------------------
# meta: who wrote a saved document
# --------------------------------------------------------------------------


def test_meta_records_rank_local_rank_world_size_launcher_host_pid_and_a_device_slot() -> None:
    record = meta(find_rank(TORCHRUN))
    assert record == {
        "rank": 5, "local_rank": 1, "world_size": 8, "launcher": "torchrun",
        "host": socket.gethostname(), "pid": os.getpid(), "device": None,
    }  # fmt: skip
    assert json.loads(json.dumps(record)) == record


def test_meta_takes_the_device_from_the_profiler_and_host_and_pid_when_given() -> None:
    record = meta(LONE, device="NVIDIA H200 (0)", host="node7", pid=12)
    assert (record["device"], record["host"], record["pid"]) == ("NVIDIA H200 (0)", "node7", 12)
    assert (record["rank"], record["world_size"], record["launcher"]) == (0, 1, None)


# --------------------------------------------------------------------------
# The launcher's own process, and the device
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "launcher"),
    [
        (["/venv/bin/python3", "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"],
         "torchrun"),
        (["python", "-m", "torch.distributed.run", "--nnodes", "1", "train.py"],
         "torch.distributed.run"),
        (["python", "-X", "kname", "-mtorch.distributed.launch", "train.py"],
         "torch.distributed.launch"),
        (["python", "-u", "-W", "ignore", "/usr/bin/torchrun", "t.py"], "torchrun"),
        (["python", "train.py", "torchrun"], None),  # a worker whose argument is the word
        (["python", "-c", "import torchrun"], None),
        (["python", "-m", "pytest", "torchrun.py"], None),
        (["python"], None),
        (["/venv/bin/python3", "/venv/bin/torchrun.py"], None),
    ],
)  # fmt: skip
def test_a_python_launcher_is_known_by_its_command_line(argv, launcher) -> None:
    assert is_launcher(argv) == launcher


def test_this_test_run_is_no_launcher() -> None:
    assert is_launcher() is None


@pytest.mark.parametrize(
    ("visible", "ordinal", "device"),
    [(None, None, None), (None, 3, "3"), ("2", None, "2"), ("2", 0, "2"), ("4,5", None, None),
     ("4,5", 1, "5"), ("4,5", 7, None), ("GPU-8f0c", None, "GPU-8f0c")],
)  # fmt: skip
def test_the_device_is_named_as_cuda_visible_devices_names_it(visible, ordinal, device) -> None:
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert visible_device(environ, ordinal) == device
