"""Who this process is in a job: its rank, local rank and world size, as its launcher said.

Found, not configured: torchrun, Open MPI's mpirun, MPICH's Hydra (and other PMI launchers) and
Slurm's srun tell each process they start who it is, in environment variables. A value that is
not a rank is one line (in `Rank.problems`, for the caller to say) and never an exception.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import NamedTuple

# KNAME_RANKS as sorted, disjoint, non-adjacent (first, last) spans, both ends included (parsed
# by kname.config, which checks output paths with kname.rank_paths, which imports this module).
RankSpans = tuple[tuple[int, int], ...]


class Launcher(NamedTuple):
    """A launcher's name and the variables in which it gives a process its place in the job."""

    name: str
    rank: str
    world_size: str
    local_rank: str


# Innermost launcher first: the one that started this very process says who it is, while the
# variables of the launchers around it are inherited and name the task that started it. torchrun
# under srun or mpirun: RANK is the worker's own, SLURM_PROCID its agent's task. mpirun inside
# an sbatch job: OMPI_COMM_WORLD_RANK is the process's own, the SLURM_* ones the batch script's.
LAUNCHERS = (
    # torch.distributed.elastic's agent (torchrun; torch.distributed.launch; launchers that follow
    # its env:// contract), local_elastic_agent.py `_start_workers`; documented at
    # https://pytorch.org/docs/stable/elastic/run.html#environment-variables
    Launcher("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    # https://docs.open-mpi.org/en/v5.0.x/tuning-apps/environment-var.html
    Launcher(
        "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"
    ),
    # MPICH's Hydra mpiexec (Intel MPI's too) sets these for each process it starts: mpich
    # src/pm/hydra/proxy/pmip_cb.c.
    Launcher("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    # https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES. The step's task
    # count, not SLURM_NTASKS: an sbatch script is one process, yet has SLURM_PROCID=0 and the
    # job's SLURM_NTASKS; only srun's steps get SLURM_STEP_NUM_TASKS (slurm src/common/env.c,
    # env_array_for_step, against env_array_for_batch_job).
    Launcher("slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),
)
MAX_WHOLE_DIGITS = 9  # no job has a billion processes

# Launchers that are Python programs themselves: started under `kname profile`, their own process
# (torchrun's agent, which has no RANK while the workers it starts do) is not a rank, so it
# profiles nothing and writes no file. Console scripts by file name, and modules run with -m.
LAUNCHER_SCRIPTS = ("torchrun",)
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# Python's options that take a value as the next argument (`python -X kname -m torch...`).
_OPTIONS_WITH_VALUE = ("-X", "-W", "--check-hash-based-pycs")


def problems_not_compared(cls: type) -> type:
    """A NamedTuple class whose last field, its problems, is left out of == and hash: a value
    equals the one it stands for, whatever was wrong on the way."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, cls) and self[:-1] == other[:-1]

    cls.__eq__ = __eq__  # type: ignore[method-assign]
    cls.__ne__ = lambda self, other: not __eq__(self, other)  # type: ignore[method-assign]
    cls.__hash__ = lambda self: hash(self[:-1])  # type: ignore[method-assign]
    return cls


@problems_not_compared
class Rank(NamedTuple):
    """This process's place in its job; launcher None: no launcher said (a lone process)."""

    rank: int = 0
    local_rank: int | None = 0  # None: the launcher did not say (or said it badly)
    world_size: int = 1
    launcher: str | None = None
    problems: tuple[str, ...] = ()  # last: left out of == and hash


LONE = Rank()


def find_rank(environ: Mapping[str, str] | None = None) -> Rank:
    """This process's Rank, from the first launcher in LAUNCHERS whose variables are set and
    well formed; each malformed one is a problem, and the next launcher is asked."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    for launcher in LAUNCHERS:
        found = _rank_from(launcher, env, problems)
        if found is not None:
            return Rank(*found, launcher=launcher.name, problems=tuple(problems))
    return Rank(problems=tuple(problems))


def selected(rank: Rank, ranks: RankSpans | None) -> bool:
    """Whether this process profiles under KNAME_RANKS (`ranks`, None: every rank); a process
    no launcher named always does."""
    if ranks is None or rank.launcher is None:
        return True
    return any(first <= rank.rank <= last for first, last in ranks)


def is_launcher(argv: Sequence[str] | None = None) -> str | None:
    """The launcher this process is (torchrun's agent: `torchrun`, `python -m
    torch.distributed.run`), from its command line (default: sys.orig_argv); None for any other
    program."""
    args = list(getattr(sys, "orig_argv", sys.argv) if argv is None else argv)[1:]
    while args:
        arg = args.pop(0)
        if arg.startswith("-m"):  # -m torch.distributed.run, or -mtorch.distributed.run
            module = arg[2:] or (args[0] if args else "")
            return module if module in LAUNCHER_MODULES else None
        if arg.startswith("-c"):
            return None  # a command: no program file
        if arg in _OPTIONS_WITH_VALUE:
            args = args[1:]
        elif not arg.startswith("-") or arg == "-":
            name = os.path.basename(arg)
            return name if name in LAUNCHER_SCRIPTS else None
    return None


def visible_device(
    environ: Mapping[str, str] | None = None, ordinal: int | None = None
) -> str | None:
    """This process's GPU as CUDA_VISIBLE_DEVICES names it ('3', 'GPU-8f0c...'): the one it
    leaves, or the entry at `ordinal` (the device a CUDA context is on, where known), or the
    ordinal itself where the variable is not set; None where none of these says."""
    env = os.environ if environ is None else environ
    text = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    entries = [part.strip() for part in text.split(",")] if text else []
    if len(entries) == 1:
        return entries[0]
    if ordinal is None or ordinal < 0:
        return None
    if not entries:
        return str(ordinal)
    return entries[ordinal] if ordinal < len(entries) else None


def meta(
    rank: Rank, *, device: str | int | None = None, host: str | None = None, pid: int | None = None
) -> dict[str, object]:
    """The record of who wrote a saved document, for its meta. `device` is the profiler's to
    give; host and pid default to this machine's and this process's, read now (after a fork too)."""
    return {
        "rank": rank.rank,
        "local_rank": rank.local_rank,
        "world_size": rank.world_size,
        "launcher": rank.launcher,
        "host": host_name() if host is None else host,
        "pid": os.getpid() if pid is None else pid,
        "device": device,
    }


def host_name() -> str:
    """This machine's name, or '' where it cannot be read."""
    import socket  # here: kname's start-up imports this module, and rarely needs a host name

    try:
        return socket.gethostname()
    except OSError:
        return ""


def _rank_from(
    launcher: Launcher, env: Mapping[str, str], problems: list[str]
) -> tuple[int, int | None, int] | None:
    """(rank, local rank, world size) as `launcher` gives them, or None where it gives none
    (its rank or world size is not set) or gives them badly (a problem says which)."""
    if not (_is_set(env, launcher.rank) and _is_set(env, launcher.world_size)):
        return None
    unused = f"{launcher.name}'s rank is not used"
    world_size = _whole_in(env, launcher.world_size, 1, None, "a world size", unused, problems)
    if world_size is None:
        return None
    of_world = f"a rank of {launcher.world_size}={world_size}"
    rank = _whole_in(env, launcher.rank, 0, world_size - 1, of_world, unused, problems)
    if rank is None:
        return None
    local_rank = None
    if _is_set(env, launcher.local_rank):
        unknown = "the local rank is left unknown"
        local_rank = _whole_in(
            env, launcher.local_rank, 0, world_size - 1, "a local rank", unknown, problems
        )
    return rank, local_rank, world_size


def _is_set(env: Mapping[str, str], variable: str) -> bool:
    return bool((env.get(variable) or "").strip())


def _whole_in(
    env: Mapping[str, str],
    variable: str,
    low: int,
    high: int | None,
    what: str,
    otherwise: str,
    problems: list[str],
) -> int | None:
    """The whole number `variable` holds, from `low` to `high` (None: no bound); else None, and
    a problem saying what it is not, what is accepted and what happens `otherwise`."""
    text = env[variable].strip()
    # ASCII digits only, no sign; at most 9 of them (int() refuses over 4300 digits).
    if text.isascii() and text.isdigit() and len(text) <= MAX_WHOLE_DIGITS:
        value = int(text)
        if low <= value and (high is None or value <= high):
            return value
    accepted = f"of {low} or more" if high is None else f"from {low} to {high}"
    problems.append(
        f"{variable}={env[variable]!r} is not {what}: accepted is a whole number {accepted}; "
        f"{otherwise}"
    )
    return None
