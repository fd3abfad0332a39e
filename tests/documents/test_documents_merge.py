"""Merging documents, each rank's numbers kept (kname.documents.merge): what `kname report
a.json b.json` does with one file per rank or process.

Its laws (exact, associative, commutative, each rank's numbers the sum of that rank's inputs)
are hypothesis properties over generated documents, profiles and censuses, of ranks drawn from
a few so that inputs of one rank meet. Files are merged one at a time, and in worker processes
for many: both give the document merging them in memory gives.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, run
from support.html_pages import sourced_profiles
from support.profile_streams import (
    census_of,
    documents,
    plain_documents,
    profile_of,
    site_counts,
)

from kname.documents.build import profile_document
from kname.documents.files import load
from kname.documents.merge import (
    Merge,
    MixedKinds,
    _numbers_by_value,
    merge_documents,
    merge_files,
)
from kname.documents.schema import (
    BY_RANK,
    RANKS,
    DocumentError,
    render_json,
    validate,
)
from kname.documents.sources import SOURCES, lines_of, merge_sources
from kname.ranks import Rank, meta

WORLD = 4  # ranks drawn from 0..3: a merge of a few documents often has two of one rank


def with_rank(document: dict, rank: int, pid: int = 100) -> dict:
    """`document` as rank `rank` of a job of WORLD wrote it."""
    record = meta(Rank(rank, rank, WORLD, "torchrun"), host=f"node{rank // 2}", pid=pid + rank)
    return {**document, RANKS: [record]}


ranks = st.integers(0, WORLD - 1)
ranked_profiles = st.builds(with_rank, documents, ranks, st.integers(1, 3))
ranked_censuses = st.builds(with_rank, site_counts.map(census_of), ranks, st.integers(1, 3))
# Some documents from before ranks were recorded: they merge as rank 0.
any_profiles = st.one_of(ranked_profiles, documents)
any_censuses = st.one_of(ranked_censuses, site_counts.map(census_of))


def written(document: dict) -> dict:
    """`document` as written to a file and read back, validated (a merge's `by_rank` values are
    sequences that store only the ranks a site ran on: its JSON has the lists)."""
    return validate(json.loads(render_json(document)), "merged")


def ranks_of(document: dict) -> list[int]:
    return [record["rank"] for record in document.get(RANKS, [{"rank": 0}])]


def site_key(document: dict, site: dict) -> tuple:
    return site["name"] if document["schema"] == 2 else (site["name"], site["kernel"], site["lib"])


def per_rank(document: dict, metric: str) -> dict[tuple, int]:
    """{(site, rank): value} of a document, from by_rank or, with one rank, the site itself."""
    values = {}
    ranks = ranks_of(document)
    for site in document["sites"]:
        numbers = site[BY_RANK][metric] if BY_RANK in site else [site[metric]]
        for rank, value in zip(ranks, numbers, strict=True):
            if value:
                values[site_key(document, site), rank] = value
    return values


# --- the laws ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(any_profiles, any_profiles, any_profiles)
def test_profiles_merged_in_any_grouping_give_the_same_document(a, b, c) -> None:
    left = merge_documents([merge_documents([a, b]), c])
    right = merge_documents([a, merge_documents([b, c])])
    assert left == right == merge_documents([a, b, c])
    assert merge_documents([c, a, b]) == left


@settings(max_examples=200, deadline=None)
@given(any_censuses, any_censuses, any_censuses)
def test_censuses_merged_in_any_grouping_give_the_same_document(a, b, c) -> None:
    left = merge_documents([merge_documents([a, b]), c])
    right = merge_documents([a, merge_documents([b, c])])
    assert left == right == merge_documents([b, c, a])


@settings(max_examples=200, deadline=None)
@given(st.lists(any_profiles, min_size=1, max_size=5))
def test_each_ranks_numbers_are_the_sums_of_that_ranks_inputs_and_the_merge_is_valid(parts):
    merged = written(merge_documents(parts))
    for metric in ("launches", "gpu_ns"):
        expected: dict[tuple, int] = {}
        for part in parts:
            for key, value in per_rank(part, metric).items():
                expected[key] = expected.get(key, 0) + value
        assert per_rank(merged, metric) == expected
    assert merged["total_gpu_ns"] == sum(part["total_gpu_ns"] for part in parts)
    assert merged["total_launches"] == sum(part["total_launches"] for part in parts)
    assert merged["processes"] == len(parts)
    if any(RANKS in part for part in parts):
        assert ranks_of(merged) == sorted({r for part in parts for r in ranks_of(part)})
    else:
        assert RANKS not in merged  # documents from before ranks give one from before ranks


@settings(max_examples=200, deadline=None)
@given(st.lists(any_censuses, min_size=1, max_size=5))
def test_a_census_merge_keeps_each_ranks_launches(parts) -> None:
    merged = written(merge_documents(parts))
    expected: dict[tuple, int] = {}
    for part in parts:
        for key, value in per_rank(part, "launches").items():
            expected[key] = expected.get(key, 0) + value
    assert per_rank(merged, "launches") == expected
    assert merged["total_launches"] == sum(part["total_launches"] for part in parts)


@settings(max_examples=200, deadline=None)
@given(st.lists(any_profiles, min_size=1, max_size=4))
def test_merging_sums_each_sites_graph_work_by_replay_line(parts) -> None:
    merged = {s["name"]: s for s in merge_documents(parts)["sites"]}
    for name, site in merged.items():
        mine = [s for d in parts for s in d["sites"] if s["name"] == name]
        replays = {r for s in mine for r in s.get("replayed_at", {})}
        assert set(site.get("replayed_at", {})) == replays
        for replay in replays:
            counts = [s["replayed_at"][replay] for s in mine if replay in s.get("replayed_at", {})]
            assert site["replayed_at"][replay] == {
                "launches": sum(c["launches"] for c in counts),
                "gpu_ns": sum(c["gpu_ns"] for c in counts),
            }
        unseen = sum(s.get("replayed_unseen", {}).get("launches", 0) for s in mine)
        assert site.get("replayed_unseen", {}).get("launches", 0) == unseen


@given(any_profiles)
def test_merging_one_document_gives_it_back(document) -> None:
    assert merge_documents([document]) == document


@settings(max_examples=100, deadline=None)
@given(st.lists(any_profiles, min_size=2, max_size=4))
def test_a_merged_document_is_written_and_read_back_unchanged(tmp_path_factory, parts) -> None:
    merged = merge_documents(parts)
    path = tmp_path_factory.mktemp("merged") / "merged.json"
    path.write_text(render_json(merged))
    assert load(str(path)) == merged
    assert all(line.count('"name"') <= 1 for line in render_json(merged).splitlines())


def test_two_files_of_one_rank_add_up_to_that_ranks_numbers() -> None:
    # A rank's own file and the file its DataLoader worker wrote beside it.
    rank1 = with_rank(profile_document(profile_of({"step app.py:1": ("k", 2, 100)})), 1)
    worker = with_rank(profile_document(profile_of({"step app.py:1": ("k", 1, 30)})), 1, pid=900)
    rank0 = with_rank(profile_document(profile_of({"step app.py:1": ("k", 2, 90)})), 0)
    merged = merge_documents([rank1, rank0, worker])
    assert ranks_of(merged) == [0, 1]
    (site,) = merged["sites"]
    assert site[BY_RANK] == {"launches": [2, 3], "gpu_ns": [90, 130]}
    assert merged["processes"] == 3
    # Of two records of one rank, the same one stands for it whatever the order.
    assert merge_documents([worker, rank1, rank0])[RANKS] == merged[RANKS]


def test_a_merge_of_on_demand_windows_keeps_each_ranks_window() -> None:
    windows = {}
    inputs = []
    for rank in (1, 0):
        document = with_rank(profile_document(profile_of({"step app.py:1": ("k", 2, 90)})), rank)
        windows[rank] = {"start_ns": 10**18 + rank, "end_ns": 10**18 + 3 * 10**9, "by": "trigger"}
        document[RANKS][0]["window"] = windows[rank]
        inputs.append(document)
    merged = written(merge_documents(inputs))
    assert [record["window"] for record in merged[RANKS]] == [windows[0], windows[1]]


def test_a_site_that_never_ran_on_a_rank_counts_zero_there() -> None:
    rank0 = with_rank(profile_document(profile_of({"save app.py:9": ("[memcpy DtoH]", 1, 40)})), 0)
    rank2 = with_rank(profile_document(profile_of({"step app.py:1": ("k", 5, 500)})), 2)
    merged = merge_documents([rank2, rank0])
    by_name = {site["name"]: site[BY_RANK]["gpu_ns"] for site in merged["sites"]}
    assert by_name == {"save app.py:9": [40, 0], "step app.py:1": [0, 500]}


def test_a_site_launched_through_two_libraries_keeps_no_library() -> None:
    a = profile_document(profile_of({"step app.py:1": ("k", 1, 10)}))
    b = copy.deepcopy(a)
    a["sites"][0]["lib"], b["sites"][0]["lib"] = "numba", "cupy"
    assert merge_documents([a, a])["sites"][0]["lib"] == "numba"
    assert merge_documents([a, b])["sites"][0]["lib"] == ""


def test_a_merged_site_is_first_seen_at_its_earliest_rank_in_any_input() -> None:
    census = census_of({("main app.py:22", "axpy"): 3, ("main app.py:23", "scale"): 1})
    merged = merge_documents([census, census])
    assert merged["schema"] == 1 and merged["total_launches"] == 8
    assert [(s["name"], s["launches"], s["share"], s["order"]) for s in merged["sites"]] == [
        ("main app.py:22", 6, 0.75, 1),
        ("main app.py:23", 2, 0.25, 2),
    ]


# Sites on few of many ranks: stored for those ranks alone, read back as a value for each rank.
MANY = 48
few_of_many = st.lists(
    st.tuples(
        st.integers(0, MANY - 1),
        st.dictionaries(st.sampled_from([f"f a.py:{n}" for n in range(1, 6)]), st.integers(1, 9)),
    ),
    min_size=1,
    max_size=40,
)


def rank_file(rank: int, sites: dict[str, int]) -> dict:
    document = profile_document(profile_of({name: ("k", n, 10 * n) for name, n in sites.items()}))
    return {**document, RANKS: [meta(Rank(rank, 0, MANY, "torchrun"), host="n", pid=rank)]}


@settings(max_examples=150, deadline=None)
@given(few_of_many, st.data())
def test_sites_on_few_of_many_ranks_keep_each_ranks_numbers_in_any_grouping(files, data):
    parts = [rank_file(rank, sites) for rank, sites in files]
    whole, half = Merge(), Merge()
    for part in parts:  # in two groups, absorbed (as worker processes merge), or all in one
        (half if data.draw(st.booleans()) else whole).add(part)
    whole.absorb(half)
    merged = whole.result()
    assert merged == merge_documents(parts) == merge_documents(parts[::-1])
    assert written(merged) == merged  # the lists its JSON has are the values it holds
    expected: dict[tuple, int] = {}
    for part in parts:
        for key, value in per_rank(part, "launches").items():
            expected[key] = expected.get(key, 0) + value
    assert per_rank(merged, "launches") == expected
    assert merge_documents([merged, parts[0]]) == merge_documents([*parts, parts[0]])


def test_a_workers_merge_of_later_ranks_is_absorbed_beside_sites_that_ran_on_few_ranks() -> None:
    # Ranks 0-9 in one Merge, where x ran on ranks 0 and 9 and y on rank 0 alone; ranks 10-11
    # in a worker's, where both ran on each: the values of each rank stay in their places.
    early = [rank_file(rank, {"x a.py:1": 1} if rank in (0, 9) else {}) for rank in range(10)]
    early[0] = rank_file(0, {"x a.py:1": 1, "y a.py:2": 5})
    late = [rank_file(rank, {"x a.py:1": 2, "y a.py:2": 3}) for rank in (10, 11)]
    whole, worker = Merge(), Merge()
    for part in early:
        whole.add(part)
    for part in late:
        worker.add(part)
    whole.absorb(worker)
    merged = whole.result()
    assert merged == merge_documents(early + late)
    by_name = {site["name"]: list(site[BY_RANK]["launches"]) for site in merged["sites"]}
    assert by_name == {
        "x a.py:1": [1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 2],
        "y a.py:2": [5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3],
    }


# --- what cannot be merged -------------------------------------------------------------------


def test_documents_of_two_kinds_are_not_merged() -> None:
    census = census_of({("main app.py:22", "axpy"): 3})
    with pytest.raises(MixedKinds, match="cannot merge a launch census"):
        merge_documents([census, profile_document(profile_of({}))])
    with pytest.raises(DocumentError, match="nothing to merge"):
        merge_documents([])


def test_a_count_past_64_bits_is_one_line_not_an_overflow() -> None:
    huge = profile_document(profile_of({"step app.py:1": ("k", 1, 2**63)}))
    with pytest.raises(DocumentError, match="too large to add up"):
        merge_documents([with_rank(huge, 0), with_rank(huge, 0)])


# --- files, one at a time and in workers -------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 3])
def test_files_merged_one_at_a_time_or_in_workers_give_the_in_memory_merge(
    tmp_path, workers
) -> None:
    parts = []
    for rank in range(WORLD):
        sites = {f"step app.py:{n}": ("axpy", 1 + n, 1000 * (n + rank)) for n in range(1, 6)}
        parts.append(with_rank(profile_document(profile_of(sites)), rank))
    parts.append(with_rank(profile_document(profile_of({"w app.py:1": ("k", 1, 7)})), 2, pid=9))
    paths = []
    for index, part in enumerate(parts):
        path = tmp_path / f"p{index}.json"
        path.write_text(render_json(part))
        paths.append(str(path))
    assert merge_files(paths[::-1], load, workers=workers) == merge_documents(parts)


@pytest.mark.parametrize("workers", [1, 3])
def test_a_merge_of_rank_files_keeps_the_source_each_kept_also_in_workers(
    tmp_path, workers
) -> None:
    parts, paths = [], []
    for rank in range(2 * WORLD):  # ranks 0..3, each twice: a rank's file and its helper's
        line = 10 * (rank % WORLD + 1)
        profile = profile_document(profile_of({f"step app.py:{line}": ("axpy", 1, 1000)}))
        kept = {"app.py": [{"first": line, "lines": [f"step({line})", "pass"]}]}
        if rank == 2:
            kept["ops.py"] = [{"first": 3, "lines": ["def op():"]}]
        parts.append(with_rank(profile, rank % WORLD, pid=rank) | {SOURCES: kept})
        paths.append(tmp_path / f"p{rank}.json")
        paths[-1].write_text(render_json(parts[-1]))
    merged = written(merge_files([str(p) for p in paths], load, workers=workers))
    assert merged[SOURCES] == merge_sources(parts)
    assert lines_of(merged[SOURCES]["app.py"]) == {
        n + offset: text
        for n in (10, 20, 30, 40)
        for offset, text in enumerate([f"step({n})", "pass"])
    }
    assert merged[SOURCES]["ops.py"] == [{"first": 3, "lines": ["def op():"]}]
    assert merged == merge_documents(parts)


@settings(deadline=None)
@given(st.lists(sourced_profiles().map(lambda made: made[0]), min_size=1, max_size=4), st.data())
def test_a_merge_keeps_every_kept_line_each_with_the_text_an_input_kept_there(parts, data):
    merge, half = Merge(), Merge()
    for part in parts:  # in two groups, absorbed: as worker processes merge
        (half if data.draw(st.booleans()) else merge).add(part)
    merge.absorb(half)
    merged = written(merge.result())
    kept = {
        (path, number): text
        for part in parts
        for path, spans in part[SOURCES].items()
        for number, text in lines_of(spans).items()
    }
    shown = {
        (path, number): text
        for path, spans in merged.get(SOURCES, {}).items()
        for number, text in lines_of(spans).items()
    }
    assert shown.keys() == kept.keys()
    assert all(
        any(lines_of(part[SOURCES].get(path, [])).get(number) == text for part in parts)
        for (path, number), text in shown.items()
    )


def test_a_bad_file_is_named_in_its_one_line(tmp_path) -> None:
    good = tmp_path / "good.json"
    good.write_text(render_json(with_rank(profile_document(profile_of({})), 0)))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": 2, "sites": "no"}))
    with pytest.raises(DocumentError, match=f"^{bad}: 'sites' must be a list$"):
        merge_files([str(good), str(bad)], load, workers=1)
    with pytest.raises(DocumentError, match=f"^{bad}: "):
        merge_files([str(good), str(bad)] * 2, load, workers=2)


def test_absorbing_a_merge_is_adding_its_documents() -> None:
    parts = [
        with_rank(profile_document(profile_of({"a.py:1": ("k", 1, 10 * r)})), r) for r in range(3)
    ]
    whole, half = Merge(), Merge()
    whole.add(parts[0])
    half.add(parts[1])
    half.add(parts[0])  # a rank both hold: its numbers are added, not appended
    whole.absorb(half)
    whole.add(parts[2])
    assert whole.result() == merge_documents([parts[0], parts[1], parts[0], parts[2]])


# --- memory: sites that differ per rank ----------------------------------------------------------

# Writes `ranks` rank files of SITES_PER_RANK sites each, every site named after its rank (no
# name on two ranks, as when each rank's lines differ), then prints the peak of what merging
# them one at a time and tabulating the merge allocate.
MERGE_PEAK = """
import sys, tracemalloc
from pathlib import Path
from kname.documents.build import profile_document
from kname.documents.files import load
from kname.documents.merge import merge_files
from kname.documents.schema import RANKS, render_json
from kname.documents.tables import render_table
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.ranks import Rank, meta

directory, ranks, per_rank = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
paths = []
for rank in range(ranks):
    kernels = {"k": KernelTotals(1, 1000 + rank)}
    sites = {
        f"step r{rank}.py:{line}": SiteTotals(1, 1000 + rank, line, kernels)
        for line in range(1, per_rank + 1)
    }
    document = profile_document(Profile(sites, SiteTotals()))
    document[RANKS] = [meta(Rank(rank, 0, ranks, "torchrun"), host="n", pid=rank)]
    paths.append(directory / f"profile.rank{rank}.json")
    paths[-1].write_text(render_json(document))
tracemalloc.start()
merged = merge_files([str(path) for path in paths], load, workers=1)
table = render_table(merged, source="profile.rank*.json")
print(tracemalloc.get_traced_memory()[1], len(table))
"""
SITES_PER_RANK = 5


def merge_peak(directory, ranks: int) -> int:
    """The bytes allocated at the peak of merging `ranks` rank files of distinct sites, in a
    fresh interpreter (kname from this checkout)."""
    directory.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", MERGE_PEAK, str(directory), str(ranks), str(SITES_PER_RANK)]
    return int(run(args, env=env).stdout.split()[0])


def test_merging_ranks_whose_sites_differ_takes_memory_in_proportion_to_the_sites_read(tmp_path):
    # 4 times the files: 4 times the sites read. A merge that kept a value for every rank of
    # every site (ranks x sites) would take 16 times the memory; one that keeps the ranks each
    # site ran on, 4 times (and less: what does not grow with the files).
    small, large = merge_peak(tmp_path / "small", 150), merge_peak(tmp_path / "large", 600)
    assert large < 6 * small, (small, large)


# --- rank files merged as a plain reading of them sums them (issue 43) ----------------------


def plainly_summed(parts: list[dict]) -> dict[str, dict]:
    """Each site of one-rank profiles `parts`, read plainly: launches, gpu_ns and each kernel's
    summed, the earliest order, the library all agree on (else ""), each rank's launches and
    gpu_ns (0 where it did not run)."""
    ranks = sorted({rank for part in parts for rank in ranks_of(part)})
    sites: dict[str, dict] = {}
    for part in parts:
        (rank,) = ranks_of(part)
        for site in part["sites"]:
            summed = sites.setdefault(site["name"], {
                "launches": 0, "gpu_ns": 0, "kernels": {}, "order": site["order"],
                "lib": site["lib"], "by_rank": {"launches": [0] * len(ranks),
                                                "gpu_ns": [0] * len(ranks)},
            })  # fmt: skip
            for field in ("launches", "gpu_ns"):
                summed[field] += site[field]
                summed["by_rank"][field][ranks.index(rank)] += site[field]
            for name, counts in site["kernels"].items():
                kernel = summed["kernels"].setdefault(name, {"launches": 0, "gpu_ns": 0})
                kernel["launches"] += counts["launches"]
                kernel["gpu_ns"] += counts["gpu_ns"]
            summed["order"] = min(summed["order"], site["order"])
            summed["lib"] = summed["lib"] if summed["lib"] == site["lib"] else ""
    return sites


def as_read(document: dict) -> dict[str, dict]:
    """plainly_summed's fields of each site of a merged document."""
    fields = ("launches", "gpu_ns", "kernels", "order", "lib")
    return {site["name"]: {f: site[f] for f in fields} | {
        BY_RANK: site.get(BY_RANK, {"launches": [site["launches"]], "gpu_ns": [site["gpu_ns"]]})
    } for site in document["sites"]}  # fmt: skip


def with_library(document: dict, library: str) -> dict:
    """`document` with each site launched through `library`."""
    return document | {"sites": [site | {"lib": library} for site in document["sites"]]}


rank_files = st.tuples(
    st.builds(with_library, st.one_of(documents, plain_documents), st.sampled_from(["", "numba"])),
    st.integers(0, 11),
)


@pytest.mark.parametrize("workers", [1, 2])
@settings(max_examples=40, deadline=None)
@given(st.lists(rank_files, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_rank_files_merged_are_the_sums_a_plain_reading_of_them_gives(
    tmp_path_factory, workers, files, randomly
) -> None:
    directory = tmp_path_factory.mktemp("ranks")
    parts, paths = [], []
    for index, (document, rank) in enumerate(files):
        parts.append(with_rank(document, rank, pid=index))
        paths.append(str(directory / f"profile.rank{rank}.{index}.json"))
        Path(paths[-1]).write_text(render_json(parts[-1]))
    randomly.shuffle(paths)
    merged = written(merge_files(paths, load, workers=workers))
    assert as_read(merged) == plainly_summed(parts)
    assert ranks_of(merged) == sorted({rank for _, rank in files})
    assert merged["total_gpu_ns"] == sum(part["total_gpu_ns"] for part in parts)


# Text with no digit in it (what \d finds: every Unicode decimal digit), around a rank's number.
no_digits = st.text(st.characters(blacklist_categories=("Nd", "Cs")), max_size=8)


@given(no_digits, st.lists(st.integers(0, 10**30), min_size=1, unique=True), no_digits,
       st.integers(0, 3), st.randoms(use_true_random=False))  # fmt: skip
def test_files_named_alike_but_for_a_number_are_taken_in_the_order_of_the_numbers(
    before, numbers, after, zeros, randomly
) -> None:
    names = [f"{before}{'0' * zeros}{number}{after}" for number in numbers]
    randomly.shuffle(names)
    expected = [f"{before}{'0' * zeros}{number}{after}" for number in sorted(numbers)]
    assert sorted(names, key=_numbers_by_value) == expected


def test_a_name_of_thousands_of_digits_is_ordered_without_making_it_an_int() -> None:
    huge = "profile.rank" + "9" * 5000 + ".json"  # int() refuses over 4,300 digits
    names = [huge, "profile.rank10.json", "profile.rank2.json"]
    assert sorted(names, key=_numbers_by_value) == names[::-1]
