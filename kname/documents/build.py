"""Making documents (kname.documents.schema): from the live census and from a join's GPU totals,
with the record of who made them (kname.ranks.meta). Merges of saved ones are merge.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from kname._version import __version__
from kname.documents.backward_lines import fold_backward_sites
from kname.documents.schema import (
    CENSUS_SCHEMA,
    PROFILE_SCHEMA,
    RANKS,
    REPLAYED_AT,
    REPLAYED_UNSEEN,
    kernel_sums,
)
from kname.documents.text import os_text
from kname.documents.verdict import LAUNCH_TIMES


class KernelTotals(Protocol):
    """One kernel's GPU records at one site (kname.profiling.join.KernelTotals)."""

    launches: int
    gpu_ns: int


class SiteTotals(Protocol):
    """One call site's GPU records (kname.profiling.join.SiteTotals)."""

    launches: int
    gpu_ns: int
    first: int  # the site's first-seen rank
    kernels: Mapping[str, KernelTotals]
    replays: Mapping[str, KernelTotals]  # its graph work, by the line that replayed it
    unseen: KernelTotals  # graph work replayed here whose node's making was not seen
    launch_calls: int  # the launch-bound verdict's numbers (kname.profiling.launch_times)
    launch_cpu_ns: int
    idle_ns: int


class Profile(Protocol):
    """What a join gives (kname.profiling.join.Profile)."""

    sites: Mapping[str, SiteTotals]
    unattributed: SiteTotals


def census_document(
    rows: Mapping[tuple[str, str, str], int], ranks: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The census (schema 1) of launches per (name, kernel, library), in the rows' order;
    `ranks`: the record of the process it is from (kname.ranks.meta), if any."""
    total = sum(rows.values())
    sites = [
        {"name": name, "kernel": kernel, "lib": lib, "launches": launches,
         "share": round(launches / total, 6) if total else 0.0, "order": order}
        for order, ((name, kernel, lib), launches) in enumerate(rows.items(), 1)
    ]  # fmt: skip
    document = {"kname": __version__, "schema": CENSUS_SCHEMA, "sites": sites}
    document["total_launches"] = total
    return _with_rank(document, ranks)


def profile_document(
    profile: Profile, processes: int = 1, ranks: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The profile (schema 2) of a join's result; `ranks`: the record of the process it is
    from (kname.ranks.meta), if any."""
    ranked_by_first = sorted(profile.sites.items(), key=lambda item: (item[1].first, item[0]))
    order = {name: rank for rank, (name, _) in enumerate(ranked_by_first, 1)}
    sites = [
        _site(name, "", totals.launches, totals.gpu_ns, order[name], _kernels(totals))
        | graph_fields(_counts(totals.replays), _count(totals.unseen))
        | launch_time_fields(totals.launch_calls, totals.launch_cpu_ns, totals.idle_ns)
        for name, totals in profile.sites.items()
    ]
    sites = fold_backward_sites(
        sites, lambda name, order: _site(name, "", 0, 0, order, {}), (REPLAYED_AT, REPLAYED_UNSEEN)
    )
    return _with_rank(profile_of_sites(sites, _kernels(profile.unattributed), processes), ranks)


def _with_rank(document: dict[str, Any], record: Mapping[str, Any] | None) -> dict[str, Any]:
    if record is not None:  # its host name is the system's: any bytes (os_text)
        document[RANKS] = [{k: os_text(v) if isinstance(v, str) else v for k, v in record.items()}]
    return document


def profile_of_sites(
    sites: list[dict[str, Any]], unattributed: Mapping[str, Mapping[str, int]], processes: int
) -> dict[str, Any]:
    """A profile (schema 2) of finished sites: shares set, ranked by GPU time (then by order
    and name), totals summed."""
    launches, gpu_ns = kernel_sums(unattributed)
    total_launches = launches + sum(site["launches"] for site in sites)
    total_gpu_ns = gpu_ns + sum(site["gpu_ns"] for site in sites)
    for site in sites:
        site["share"] = round(site["gpu_ns"] / total_gpu_ns, 6) if total_gpu_ns else 0.0
    sites.sort(key=lambda site: (-site["gpu_ns"], site["order"], site["name"]))
    return {
        "kname": __version__,
        "schema": PROFILE_SCHEMA,
        "sites": sites,
        "total_launches": total_launches,
        "total_gpu_ns": total_gpu_ns,
        "unattributed": {
            "launches": launches,
            "gpu_ns": gpu_ns,
            "kernels": ranked_kernels(unattributed),
        },
        "processes": processes,
    }


def _site(
    name: str, lib: str, launches: int, gpu_ns: int, order: int, kernels: dict[str, dict]
) -> dict[str, Any]:
    ranked = ranked_kernels(kernels)
    return {
        "name": name,
        "kernel": next(iter(ranked), ""),
        "lib": lib,
        "launches": launches,
        "gpu_ns": gpu_ns,
        "share": 0.0,  # set once the total is known
        "order": order,
        "kernels": ranked,
    }


def graph_fields(
    replays: Mapping[str, Mapping[str, int]], unseen: Mapping[str, int]
) -> dict[str, Any]:
    """A site's graph fields, present only where it has graph work (schema.py)."""
    fields: dict[str, Any] = {}
    if replays:
        fields[REPLAYED_AT] = ranked_kernels(replays)
    if unseen["launches"]:
        fields[REPLAYED_UNSEEN] = {"launches": unseen["launches"], "gpu_ns": unseen["gpu_ns"]}
    return fields


def launch_time_fields(calls: int, cpu_ns: int, idle_ns: int) -> dict[str, Any]:
    """A site's launch times (schema.py), present only where a launch call of it was timed."""
    if not calls:
        return {}
    return {LAUNCH_TIMES: {"calls": calls, "cpu_ns": cpu_ns, "idle_ns": idle_ns}}


def _kernels(totals: SiteTotals) -> dict[str, dict[str, int]]:
    return _counts(totals.kernels)


def _counts(totals: Mapping[str, KernelTotals]) -> dict[str, dict[str, int]]:
    return {k: _count(v) for k, v in totals.items()}


def _count(totals: KernelTotals) -> dict[str, int]:
    return {"launches": totals.launches, "gpu_ns": totals.gpu_ns}


def ranked_kernels(kernels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Most GPU time first, then most launches, then by name: the same order on every run."""
    ranked = sorted(kernels.items(), key=lambda kv: (-kv[1]["gpu_ns"], -kv[1]["launches"], kv[0]))
    return {name: {"launches": k["launches"], "gpu_ns": k["gpu_ns"]} for name, k in ranked}
