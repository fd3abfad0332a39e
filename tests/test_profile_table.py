"""The ranked table of a profile, the durations in it, and readable kernel names.

Kernel names are demangled by the C++ runtime's real `__cxa_demangle` (libstdc++ is on every
machine these tests run on).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from profile_streams import documents, hostile_documents, hostile_names, terminal_safe

from kname.census_file import count_of, printable
from kname.census_file import render_table as render_census_table
from kname.profiling.document import profile_document
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.profiling.kernel_names import demangle, display_name
from kname.profiling.table import (
    KERNELS_SHOWN,
    format_duration,
    kernels_cell,
    render_document,
    render_profile_table,
)

NUMBA_AXPY = "_ZN6cudapy8__main__4axpyB2v1E5ArrayIfLi1E1C7mutable7alignedEf"
TORCH_ADD = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEE"
    "viT0_T1_"
)


def document_of(sites: dict[str, dict[str, tuple[int, int]]], lost: int = 0) -> dict:
    built = {}
    for rank, (name, kernels) in enumerate(sites.items(), 1):
        totals = SiteTotals(first=rank)
        for kernel, (launches, gpu_ns) in kernels.items():
            totals.kernels[kernel] = KernelTotals(launches, gpu_ns)
            totals.launches += launches
            totals.gpu_ns += gpu_ns
        built[name] = totals
    unattributed = SiteTotals(lost, lost * 1000, 0, {"lost": KernelTotals(lost, lost * 1000)})
    return profile_document(Profile(built, unattributed if lost else SiteTotals()))


@pytest.mark.parametrize(
    ("ns", "text"),
    [(0, "0 ns"), (812, "812 ns"), (1_000, "1.00 us"), (12_345, "12.3 us"), (405_000, "405 us"),
     (4_560_000, "4.56 ms"), (1_234_000_000, "1.23 s"), (999.6, "1.00 us"), (999_600, "1.00 ms"),
     (999.4, "999 ns"), (2_500.5, "2.50 us")],
)  # fmt: skip
def test_durations_have_three_significant_digits(ns, text):
    assert format_duration(ns) == text


@given(st.floats(0, 999e9))  # past 999 s, seconds have no larger unit to go to
def test_a_duration_never_shows_four_digits_before_its_unit(ns):
    number = format_duration(ns).split()[0]
    assert len(number.replace(".", "").lstrip("0")) <= 3, number


def test_nouns_count():
    assert [count_of(n, "launch") for n in (0, 1, 2)] == ["0 launches", "1 launch", "2 launches"]
    assert count_of(3, "call site") == "3 call sites"
    assert count_of(2, "process") == "2 processes"


def test_the_table_ranks_sites_by_gpu_time_with_share_mean_and_kernels():
    document = document_of(
        {
            "main app.py:30": {"ampere_sgemm": (20, 1_500_000), "[memset]": (20, 500_000)},
            "step app.py:12": {"axpy": (20, 8_100_000)},
        }
    )
    lines = render_profile_table(document).splitlines()
    assert lines[0] == "kname profile: 10.1 ms of GPU time in 60 launches from 2 call sites"
    assert lines[1].split() == [
        "call",
        "site",
        "GPU",
        "time",
        "share",
        "launches",
        "mean",
        "kernels",
    ]
    assert re.split(r"\s{2,}", lines[2]) == [
        "step app.py:12", "8.10 ms", "80.2%", "20", "405 us", "axpy 8.10 ms (20)",
    ]  # fmt: skip
    assert re.split(r"\s{2,}", lines[3]) == [
        "main app.py:30", "2.00 ms", "19.8%", "40", "50.0 us",
        "ampere_sgemm 1.50 ms (20), [memset] 500 us (20)",
    ]  # fmt: skip
    assert len(lines) == 4


def test_top_shows_the_first_sites_and_sums_the_rest():
    document = document_of({f"f{i} app.py:{i}": {"k": (1, 1000 * (10 - i))} for i in range(5)})
    lines = render_profile_table(document, top=2).splitlines()
    assert [line.split()[0] for line in lines[2:4]] == ["f0", "f1"]
    assert lines[4] == "... and 3 more call sites: 21.0 us (52.5%)"


def test_unattributed_work_is_a_row_and_a_line_asking_for_a_report():
    lines = render_profile_table(document_of({"step app.py:1": {"k": (1, 5000)}}, lost=2))
    lines = lines.splitlines()
    assert lines[3].split()[:2] == ["<unattributed>", "2.00"]
    assert lines[-1] == (
        "kname profile: 2 GPU records (2.00 us) could not be attributed to a call site; "
        "please report this"
    )


def test_a_saved_profile_names_its_file_and_merged_processes():
    document = document_of({"step app.py:1": {"k": (1, 5000)}}) | {"processes": 4}
    heading = render_profile_table(document, source="all.json").splitlines()[0]
    assert heading.startswith("kname profile (all.json, written by kname ")
    assert ", 4 processes): 5.00 us of GPU time" in heading


def test_kernels_beyond_three_are_counted():
    cell = kernels_cell({f"k{i}": {"launches": 1, "gpu_ns": 10 - i} for i in range(5)})
    assert cell == "k0 10 ns (1), k1 9 ns (1), k2 8 ns (1), +2 more"


@given(documents)
def test_every_site_has_one_row_in_rank_order(document):
    lines = render_profile_table(document).splitlines()
    names = [site["name"] for site in document["sites"]]
    if not names and not document["unattributed"]["launches"]:
        assert len(lines) == 1  # the heading alone
        return
    assert lines[1].startswith("call site")
    rows, rest = lines[2 : 2 + len(names)], lines[2 + len(names) :]
    for row, name in zip(rows, names, strict=True):
        assert row.startswith(name + " ")
    unattributed = document["unattributed"]["launches"]
    assert len(rest) == (2 if unattributed else 0)


@given(hostile_documents, hostile_names)
def test_hostile_names_and_file_labels_reach_the_terminal_escaped(document, source):
    text = render_profile_table(document, source=source)
    assert terminal_safe(text)
    unattributed = bool(document["unattributed"]["launches"])
    sites = document["sites"]
    rows = len(sites) + unattributed
    # No name broke a line: the heading, the header and rows, the line about unattributed work.
    assert len(text.splitlines()) == 1 + (1 + rows if rows else 0) + unattributed
    for site in sites:
        assert printable(site["name"]) in text
        for kernel in list(site["kernels"])[:KERNELS_SHOWN]:
            assert printable(display_name(kernel)) in text


def test_either_schema_renders():
    census = {
        "kname": "0.1.0",
        "schema": 1,
        "sites": [{"name": "main app.py:22", "kernel": "axpy", "lib": "numba", "launches": 3,
                   "share": 1.0, "order": 1}],
        "total_launches": 3,
    }  # fmt: skip
    assert render_document(census, source="c.json") == render_census_table(census, source="c.json")
    profile = document_of({"step app.py:1": {"k": (1, 5000)}})
    assert render_document(profile) == render_profile_table(profile)


def test_mangled_names_are_demangled_and_shortened():
    assert demangle("_Z9scale_rawPfi") == "scale_raw(float*, int)"
    assert display_name("_Z9scale_rawPfi") == "scale_raw"
    assert demangle(NUMBA_AXPY).startswith("cudapy::__main__::axpy[abi:v1](Array<float, 1")
    assert display_name(NUMBA_AXPY) == "cudapy::__main__::axpy"
    assert display_name(TORCH_ADD) == "at::native::vectorized_elementwise_kernel<...>"


@pytest.mark.parametrize(
    "name", ["scale_raw", "triton_poi_fused_add_0", "_Zbad", "[memcpy HtoD]", ""]
)
def test_names_that_are_not_mangled_stay_as_they_are(name):
    assert display_name(name) == name
    assert demangle(name) == name
