"""A collective's GPU time on each rank told apart: its own cost and the waiting for slower ranks
(kname.documents.collectives; merged by merge.py, judged by spread.py, shown by tables.py).

The rule is pure (which kernels are NCCL's; the least rank's collective time is the cost, each
excess waiting): hypothesis properties. The merge keeps each rank's collective time per line in
any grouping, valid when written and read back. Rank files made by kname's own writer
(build.profile_document of a join's result, each with its rank record): a fast rank whose
all_reduce line is mostly waiting is no straggler there, and `kname report` says the waiting
(under the table, and per rank with --by-rank).
"""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO
from support.profile_streams import KERNEL_NAMES, profiles

from kname.cli import main
from kname.documents.build import profile_document
from kname.documents.collectives import is_collective, split_waiting
from kname.documents.files import load
from kname.documents.merge import merge_documents, merge_files
from kname.documents.schema import (
    BY_RANK,
    COLLECTIVE_NS,
    RANKS,
    DocumentError,
    render_json,
    validate,
)
from kname.documents.spread import own_work, spreads, stragglers, waiting_of
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.ranks import Rank, meta

# NCCL's kernels as CUPTI names them: the symbol of a C++ function, or the name itself.
NCCL_STEMS = st.sampled_from(["ncclKernel_", "ncclDevKernel_"])
NCCL_TAILS = st.sampled_from(
    ["AllReduce_Sum_f32_RING_LL", "AllGather_RING_SIMPLE", "SendRecv", "Generic", "Broadcast"]
)
# Kernels that are not NCCL's: the profiles' own names, library kernels that mention nccl
# elsewhere in their name, and a namespaced function of that name.
NOT_NCCL = [
    *KERNEL_NAMES,
    "[memcpy DtoD]",
    "[memset]",
    "my_ncclKernel_copy",
    "_Z6reduceP4nccl",
    "_ZN4nccl13ncclDevKernel_AllReduceEv",
    "ncclkernel_lowercase",
    "",
]


def nccl_name(stem: str, tail: str, mangled: bool) -> str:
    name = stem + tail
    return f"_Z{len(name)}{name}Pv" if mangled else name


nccl_names = st.builds(nccl_name, NCCL_STEMS, NCCL_TAILS, st.booleans())


@given(nccl_names)
def test_a_kernel_is_nccls_whether_cupti_gives_its_symbol_or_its_name(name) -> None:
    assert is_collective(name)


@given(st.sampled_from(NOT_NCCL) | st.text(max_size=30).filter(lambda t: "nccl" not in t))
def test_a_kernel_whose_name_does_not_start_as_nccls_do_is_no_collective(name) -> None:
    assert not is_collective(name)


collective_times = st.lists(st.one_of(st.just(0), st.integers(0, 10**12)), min_size=1, max_size=64)


@given(collective_times)
def test_the_least_rank_that_ran_pays_the_cost_and_every_rank_that_ran_waits_its_excess(times):
    own, waiting = split_waiting(times)
    ran = [time for time in times if time]
    assert own == (min(ran) if ran else 0)
    for time, waited in zip(times, waiting, strict=True):
        assert waited >= 0
        assert waited == (time - own if time else 0)  # a rank that never ran it waits nothing
    assert not ran or min(w for t, w in zip(times, waiting, strict=True) if t) == 0


@given(collective_times, st.randoms(use_true_random=False))
def test_the_split_does_not_depend_on_the_order_of_the_ranks(times, shuffle) -> None:
    order = list(range(len(times)))
    shuffle.shuffle(order)
    own, waiting = split_waiting(times)
    assert split_waiting([times[i] for i in order]) == (own, [waiting[i] for i in order])


# Each step's collective time on each of a job's ranks (every rank ran every step).
steps_by_rank = st.integers(1, 8).flatmap(
    lambda ranks: st.lists(
        st.lists(st.integers(1, 10**9), min_size=ranks, max_size=ranks), min_size=1, max_size=20
    )
)


@given(steps_by_rank)
def test_the_waiting_from_sums_over_the_run_is_at_most_the_waiting_step_by_step(steps) -> None:
    # docs/ranks.md: the rule reads sums; where the slow rank changes, it shows less waiting.
    sums = [sum(column) for column in zip(*steps, strict=True)]
    from_sums = split_waiting(sums)[1]
    each_step = [split_waiting(step)[1] for step in steps]
    step_by_step = [sum(waited) for waited in zip(*each_step, strict=True)]
    assert all(a <= b for a, b in zip(from_sums, step_by_step, strict=True))
    if len(steps) == 1:
        assert from_sums == step_by_step


# --- the merge: each rank's collective time per line ---------------------------------------

WORLD = 4
KERNELS_WITH_NCCL = st.sampled_from((*KERNEL_NAMES, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"))


def with_rank(document: dict, rank: int) -> dict:
    record = meta(Rank(rank, rank, WORLD, "torchrun"), host="node", pid=100 + rank)
    return {**document, RANKS: [record]}


nccl_rank_files = st.builds(
    with_rank, profiles(kernel_names=KERNELS_WITH_NCCL).map(profile_document), st.integers(0, 3)
)


def written(document: dict) -> dict:
    return validate(json.loads(render_json(document)), "merged")


def collective_by_rank(document: dict) -> dict[tuple[str, int], int]:
    """{(site, rank): its NCCL kernels' GPU time}, from a merge's by_rank or a rank's file."""
    ranks = [record["rank"] for record in document[RANKS]]
    found = {}
    for site in document["sites"]:
        if BY_RANK in site:
            values = site[BY_RANK].get(COLLECTIVE_NS, [0] * len(ranks))
        else:
            values = [sum(k["gpu_ns"] for n, k in site["kernels"].items() if is_collective(n))]
        found.update({(site["name"], r): v for r, v in zip(ranks, values, strict=True) if v})
    return found


@settings(max_examples=200, deadline=None)
@given(st.lists(nccl_rank_files, min_size=2, max_size=5))
def test_each_ranks_collective_time_is_the_sum_of_its_inputs_nccl_kernels_and_valid(parts):
    merged = written(merge_documents(parts))
    expected: dict[tuple[str, int], int] = {}
    for part in parts:
        for key, value in collective_by_rank(part).items():
            expected[key] = expected.get(key, 0) + value
    if len({part[RANKS][0]["rank"] for part in parts}) > 1:
        assert collective_by_rank(merged) == expected
    for site in merged["sites"]:  # only where the site has NCCL kernels
        has_nccl = any(map(is_collective, site["kernels"]))
        assert (COLLECTIVE_NS in site.get(BY_RANK, {})) == (has_nccl and BY_RANK in site)


@settings(max_examples=200, deadline=None)
@given(nccl_rank_files, nccl_rank_files, nccl_rank_files)
def test_collective_times_merged_in_any_grouping_give_the_same_document(a, b, c) -> None:
    left = merge_documents([merge_documents([a, b]), c])
    right = merge_documents([a, merge_documents([b, c])])
    assert left == right == merge_documents([a, b, c]) == merge_documents([c, b, a])


# --- a job's rank files, by kname's writer -----------------------------------------------------

NCCL = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LLPv"
COMPUTE, ALL_REDUCE, BROADCAST = "main train.py:40", "main train.py:41", "main train.py:44"


def rank_file(rank: int, world: int, sites: dict[str, dict[str, tuple[int, int]]]) -> dict:
    """Rank `rank`'s profile of {site: {kernel: (launches, gpu_ns)}}, by kname's writer."""
    totals = {}
    for order, (name, kernels) in enumerate(sites.items(), 1):
        made = {kernel: KernelTotals(*numbers) for kernel, numbers in kernels.items()}
        launches, gpu_ns = (sum(numbers[i] for numbers in kernels.values()) for i in (0, 1))
        totals[name] = SiteTotals(launches, gpu_ns, order, made)
    document = profile_document(Profile(totals, SiteTotals()))
    return {**document, RANKS: [meta(Rank(rank, rank, world, "torchrun"), pid=rank)]}


def data_parallel_step(rank: int, slow: int, world: int = 4) -> dict:
    """A step of 20: the compute line (three times the work on rank `slow`), a blocking
    all_reduce whose NCCL kernel waits, on every other rank, for the slow rank's 4 ms more of
    compute (beside a copy of its own), and a broadcast that waits for no one."""
    ms = 1_000_000
    compute = (60, 6 * ms) if rank == slow else (20, 2 * ms)
    waited = 0 if rank == slow else 4 * ms + 10_000 * rank  # the others' waiting, a little apart
    all_reduce = {NCCL: (20, ms + waited), "[memcpy DtoD]": (20, 100_000)}
    broadcast = {"ncclDevKernel_Broadcast_RING_LL": (20, 500_000)}
    sites = {COMPUTE: {"ampere_sgemm_128x64_nn": compute}, ALL_REDUCE: all_reduce}
    return rank_file(rank, world, sites | {BROADCAST: broadcast})


@pytest.fixture
def write_job(tmp_path, monkeypatch):
    """Writes profile.rank0.json, ... of a job of `world` ranks, rank `slow` the slow one, in
    the working folder; their names."""
    monkeypatch.chdir(tmp_path)

    def write(world: int = 4, slow: int = 2) -> list[str]:
        names = []
        for rank in range(world):
            document = data_parallel_step(rank, slow, world)
            (tmp_path / f"profile.rank{rank}.json").write_text(render_json(document))
            names.append(f"profile.rank{rank}.json")
        return names

    return write


@pytest.fixture
def job(write_job) -> list[str]:
    return write_job()


def report(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_fast_ranks_waiting_at_an_all_reduce_is_not_its_own_work() -> None:
    merged = merge_documents([data_parallel_step(rank, 2) for rank in range(4)])
    sites = {site["name"]: site for site in merged["sites"]}
    at = sites[ALL_REDUCE]
    assert list(at[BY_RANK][COLLECTIVE_NS]) == [5_000_000, 5_010_000, 1_000_000, 5_030_000]
    assert waiting_of(at) == [4_000_000, 4_010_000, 0, 4_030_000]  # rank 2 paid the cost alone
    assert own_work(at, "gpu_ns") == [1_100_000] * 4  # the cost and the copy, on each rank
    assert waiting_of(sites[BROADCAST]) == [0, 0, 0, 0]
    assert waiting_of(sites[COMPUTE]) is None  # no NCCL kernel: nothing to tell apart
    # Written and read back: the collective times are kept and checked.
    assert written(merged)["sites"] == json.loads(render_json(merged))["sites"]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_straggler_is_the_slow_rank_at_its_compute_not_a_fast_rank_at_its_all_reduce(world):
    # Of two or three ranks, one slow: before, the median rank waited too, and a fast rank's
    # waiting at the all_reduce line made it a straggler there.
    merged = merge_documents([data_parallel_step(rank, 1, world) for rank in range(world)])
    flagged = [(site["name"], spread.slowest) for site, spread in stragglers(merged, 0.2)]
    assert flagged == [(COMPUTE, 1)]
    index = [site["name"] for site in merged["sites"]].index(ALL_REDUCE)
    assert spreads(merged)[index].low == spreads(merged)[index].high == 1_100_000


def test_kname_report_fails_a_ci_job_for_the_slow_rank_alone(write_job, capsys) -> None:
    code, out, err = report(capsys, *write_job(2, 1), "--fail-on-straggler")
    assert code == 1
    assert err.endswith("(--fail-on-straggler): main train.py:40 (rank 1)\n"), err
    assert f"{ALL_REDUCE}: 4.00 ms of its 6.20 ms is waiting" in out


def test_kname_report_says_how_much_of_a_collective_line_is_waiting_and_flags_no_fast_rank(
    job, capsys
) -> None:
    code, out, err = report(capsys, *job, "--straggler", "20%", "--fail-on-straggler")
    assert code == 1
    assert err.endswith("(--fail-on-straggler): main train.py:40 (rank 2)\n"), err
    lines = out.splitlines()
    (row,) = [line for line in lines if line.startswith(ALL_REDUCE + " ")]
    assert "!" not in row and "all equal" in row
    assert lines[-1] == (
        f"{ALL_REDUCE}: 12.0 ms of its 16.4 ms is waiting in NCCL kernels for slower ranks "
        "(most: rank 3, 4.03 ms); the collective's own cost: 1.00 ms a rank"
    )
    assert not any(line.startswith(BROADCAST + ":") for line in lines)  # no one waited there


def test_kname_report_by_rank_shows_each_ranks_waiting_and_compares_its_own_work(
    job, capsys
) -> None:
    code, out, _ = report(capsys, *job, "--by-rank")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split() == [
        "call", "site", "rank", "GPU", "time", "launches", "mean", "vs", "median", "waiting"
    ]  # fmt: skip
    start = next(i for i, line in enumerate(lines) if line.startswith(ALL_REDUCE + " "))
    rows = [line.split() for line in lines[start : start + 4]]
    assert [row[-3:] for row in rows[1:]] == [
        ["0.0%", "4.01", "ms"], ["0.0%", "0", "ns"], ["0.0%", "4.03", "ms"]
    ]  # fmt: skip
    (compute,) = [line for line in lines if line.startswith(COMPUTE + " ")]
    assert compute.split()[-1] == "0.0%"  # no NCCL kernel: no waiting cell


def test_a_collective_time_past_its_ranks_gpu_time_or_its_nccl_kernels_is_refused() -> None:
    merged = json.loads(render_json(merge_documents([data_parallel_step(r, 2) for r in range(4)])))
    index = [site["name"] for site in merged["sites"]].index(ALL_REDUCE)
    cases = {
        "over a rank's gpu_ns": [5_000_000, 5_010_000, 1_200_000, 5_030_000],
        "one rank short": [5_000_000, 5_010_000, 1_000_000],
        "not a count": [5_000_000, -1, 1_000_000, 5_030_000],
        "over the NCCL kernels": [5_000_000, 5_010_000, 1_100_000, 5_030_000],
    }
    for case, values in cases.items():
        document = json.loads(json.dumps(merged))
        document["sites"][index][BY_RANK][COLLECTIVE_NS] = values
        with pytest.raises(DocumentError, match=f"sites\\[{index}\\].collective_ns") as caught:
            validate(document, "job.json")
        assert "\n" not in str(caught.value), case
    # A merged file written before the field: its ranks' collective time counts 0.
    for site in merged["sites"]:
        site[BY_RANK].pop(COLLECTIVE_NS, None)
    again = merge_documents([validate(merged, "old.json"), data_parallel_step(4, 2, world=5)])
    at = next(site for site in again["sites"] if site["name"] == ALL_REDUCE)
    assert list(at[BY_RANK][COLLECTIVE_NS]) == [0, 0, 0, 0, 5_040_000]


def test_a_thousand_ranks_that_each_waited_differently_give_each_its_own_waiting() -> None:
    chooser = random.Random(7)
    times = [chooser.randint(1, 10**9) for _ in range(1024)]
    parts = [
        rank_file(rank, 1024, {ALL_REDUCE: {NCCL: (3, time)}}) for rank, time in enumerate(times)
    ]
    (site,) = merge_documents(parts)["sites"]
    assert waiting_of(site) == [time - min(times) for time in times]


def test_the_sample_in_docs_ranks_is_what_kname_report_prints(write_job, capsys) -> None:
    page = (REPO / "docs" / "ranks.md").read_text()
    command = "kname report profile.rank*.json --straggler 20%"
    assert f"\n    {command}\n" in page
    code, out, err = report(capsys, *write_job(2, 1), *command.split()[3:])
    marked = re.search(r"<!-- readme-test: ranks-waiting -->\n```\n(.*?)```", page, re.DOTALL)
    assert code == 0 and marked and out + err == marked[1]


@pytest.mark.parametrize("nccl_ranks", [range(0, 3), range(3, 6)])
def test_workers_merge_a_line_with_nccl_kernels_on_some_ranks_as_one_process_does(
    tmp_path, nccl_ranks
) -> None:
    # Two workers of three files each: one worker's share has NCCL kernels at the line, the
    # other's has not (its ranks' collective time is 0), whichever is absorbed first.
    documents = []
    for rank in range(6):
        kernels = {"[memcpy DtoD]": (20, 100_000 + rank)}
        if rank in nccl_ranks:
            kernels[NCCL] = (20, 1_000_000 * (rank + 1))
        documents.append(rank_file(rank, 6, {ALL_REDUCE: kernels}))
    paths = []
    for rank, document in enumerate(documents):
        paths.append(str(tmp_path / f"profile.rank{rank}.json"))
        (tmp_path / f"profile.rank{rank}.json").write_text(render_json(document))
    merged = merge_files(paths, load, workers=2)
    assert merged == merge_documents(documents)
    (site,) = merged["sites"]
    expected = [1_000_000 * (rank + 1) if rank in nccl_ranks else 0 for rank in range(6)]
    assert list(site[BY_RANK][COLLECTIVE_NS]) == expected


def test_the_ranks_of_the_h100_gloo_job_merge_with_rank_1_named_and_no_waiting_told() -> None:
    # tests/gpu/test_gpu_ranks.py's one-GPU job on the H100 (torchrun, gloo, rank 1 slow): gloo
    # moves the all_reduce through the host, so no NCCL kernel, no waiting; each rank replayed
    # its CUDA graph under the replay line.
    paths = [str(REPO / "tests" / "data" / f"ranks_gloo_h100.rank{rank}.json") for rank in (0, 1)]
    compute, graph = "main ranks_demo.py:48", "graph_body ranks_demo.py:84"
    for path in paths:
        sites = {site["name"]: site for site in load(path)["sites"]}
        assert list(sites[graph]["replayed_at"]) == ["replay_graph ranks_demo.py:79"]
        assert sites[graph]["replayed_at"]["replay_graph ranks_demo.py:79"]["launches"] == 20
    merged = merge_files(paths, load)
    assert all(waiting_of(site) is None for site in merged["sites"])
    flagged = {site["name"]: spread.slowest for site, spread in stragglers(merged, 0.2)}
    assert flagged[compute] == 1
