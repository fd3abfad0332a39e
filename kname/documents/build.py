"""Making documents (kname.documents.schema): from the live census, from a join's GPU totals, and
from other documents of one kind (a merge: one file per rank or process, summed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kname._version import __version__
from kname.documents.schema import (
    CENSUS_SCHEMA,
    PROFILE_SCHEMA,
    REPLAYED_AT,
    REPLAYED_UNSEEN,
    DocumentError,
    kernel_sums,
)
from kname.documents.sources import SOURCES, merge_sources

_NONE = {"launches": 0, "gpu_ns": 0}


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


class Profile(Protocol):
    """What a join gives (kname.profiling.join.Profile)."""

    sites: Mapping[str, SiteTotals]
    unattributed: SiteTotals


def census_document(rows: Mapping[tuple[str, str, str], int]) -> dict[str, Any]:
    """The census (schema 1) of launches per (name, kernel, library), in the rows' order."""
    total = sum(rows.values())
    sites = [
        {"name": name, "kernel": kernel, "lib": lib, "launches": launches,
         "share": round(launches / total, 6) if total else 0.0, "order": order}
        for order, ((name, kernel, lib), launches) in enumerate(rows.items(), 1)
    ]  # fmt: skip
    return {"kname": __version__, "schema": CENSUS_SCHEMA, "sites": sites, "total_launches": total}


def profile_document(profile: Profile, processes: int = 1) -> dict[str, Any]:
    """The profile (schema 2) of a join's result."""
    ranked_by_first = sorted(profile.sites.items(), key=lambda item: (item[1].first, item[0]))
    order = {name: rank for rank, (name, _) in enumerate(ranked_by_first, 1)}
    sites = [
        _site(name, "", totals.launches, totals.gpu_ns, order[name], _kernels(totals))
        | _graph_fields(_counts(totals.replays), _count(totals.unseen))
        for name, totals in profile.sites.items()
    ]
    return _profile(sites, _kernels(profile.unattributed), processes)


def merge_documents(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One document from several of one schema (one per rank or process): sites summed.

    Launches, GPU time and per-kernel totals are added; share, order and `kernel` are derived
    again (order by each site's earliest rank in any input, then by name). The source the
    documents kept is kept too (documents/sources.py).
    """
    if not documents:
        raise DocumentError("nothing to merge")
    schemas = {document["schema"] for document in documents}
    if len(schemas) > 1:
        raise DocumentError(
            "cannot merge a launch census (schema 1) with a GPU profile (schema 2); "
            "merge files of one kind"
        )
    if schemas == {CENSUS_SCHEMA}:
        return _with_merged_sources(_merge_censuses(documents), documents)
    sites: dict[str, dict[str, Any]] = {}
    unattributed: dict[str, dict[str, int]] = {}
    for document in documents:
        for site in document["sites"]:
            merged = sites.get(site["name"])
            if merged is None:
                merged = sites[site["name"]] = {"lib": site["lib"], "order": site["order"]}
                merged.update(kernels={}, replayed_at={}, replayed_unseen=dict(_NONE))
            elif merged["lib"] != site["lib"]:
                merged["lib"] = ""
            merged["order"] = min(merged["order"], site["order"])
            _add_kernels(merged["kernels"], site["kernels"])
            _add_kernels(merged["replayed_at"], site.get(REPLAYED_AT, {}))
            _add_count(merged["replayed_unseen"], site.get(REPLAYED_UNSEEN, _NONE))
        _add_kernels(unattributed, document["unattributed"]["kernels"])
    ranked = sorted(sites.items(), key=lambda item: (item[1]["order"], item[0]))
    rows = [
        _site(name, site["lib"], *kernel_sums(site["kernels"]), rank, site["kernels"])
        | _graph_fields(site["replayed_at"], site["replayed_unseen"])
        for rank, (name, site) in enumerate(ranked, 1)
    ]
    merged = _profile(rows, unattributed, sum(d.get("processes", 1) for d in documents))
    return _with_merged_sources(merged, documents)


def _with_merged_sources(
    merged: dict[str, Any], documents: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    sources = merge_sources(documents)
    return merged | {SOURCES: sources} if sources else merged


def _merge_censuses(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Schema 1: launches summed per (name, kernel, lib); order by earliest rank, then key."""
    rows: dict[tuple[str, str, str], list[int]] = {}
    for document in documents:
        for site in document["sites"]:
            key = (site["name"], site["kernel"], site["lib"])
            row = rows.setdefault(key, [0, site["order"]])
            row[0] += site["launches"]
            row[1] = min(row[1], site["order"])
    ranked = sorted(rows.items(), key=lambda item: (item[1][1], item[0]))
    return census_document({key: launches for key, (launches, _) in ranked})


def _profile(
    sites: list[dict[str, Any]], unattributed: dict[str, dict[str, int]], processes: int
) -> dict[str, Any]:
    total_launches, total_gpu_ns = kernel_sums(unattributed)
    total_launches += sum(site["launches"] for site in sites)
    total_gpu_ns += sum(site["gpu_ns"] for site in sites)
    for site in sites:
        site["share"] = round(site["gpu_ns"] / total_gpu_ns, 6) if total_gpu_ns else 0.0
    sites.sort(key=lambda site: (-site["gpu_ns"], site["order"]))
    launches, gpu_ns = kernel_sums(unattributed)
    return {
        "kname": __version__,
        "schema": PROFILE_SCHEMA,
        "sites": sites,
        "total_launches": total_launches,
        "total_gpu_ns": total_gpu_ns,
        "unattributed": {
            "launches": launches,
            "gpu_ns": gpu_ns,
            "kernels": _ranked_kernels(unattributed),
        },
        "processes": processes,
    }


def _site(
    name: str, lib: str, launches: int, gpu_ns: int, order: int, kernels: dict[str, dict]
) -> dict[str, Any]:
    ranked = _ranked_kernels(kernels)
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


def _graph_fields(
    replays: Mapping[str, Mapping[str, int]], unseen: Mapping[str, int]
) -> dict[str, Any]:
    """A site's graph fields, present only where it has graph work (schema.py)."""
    fields: dict[str, Any] = {}
    if replays:
        fields[REPLAYED_AT] = _ranked_kernels(replays)
    if unseen["launches"]:
        fields[REPLAYED_UNSEEN] = {"launches": unseen["launches"], "gpu_ns": unseen["gpu_ns"]}
    return fields


def _kernels(totals: SiteTotals) -> dict[str, dict[str, int]]:
    return _counts(totals.kernels)


def _counts(totals: Mapping[str, KernelTotals]) -> dict[str, dict[str, int]]:
    return {k: _count(v) for k, v in totals.items()}


def _count(totals: KernelTotals) -> dict[str, int]:
    return {"launches": totals.launches, "gpu_ns": totals.gpu_ns}


def _ranked_kernels(kernels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Most GPU time first, then most launches, then by name: the same order on every run."""
    ranked = sorted(kernels.items(), key=lambda kv: (-kv[1]["gpu_ns"], -kv[1]["launches"], kv[0]))
    return {name: {"launches": k["launches"], "gpu_ns": k["gpu_ns"]} for name, k in ranked}


def _add_kernels(into: dict[str, dict[str, int]], kernels: Mapping[str, Mapping[str, int]]) -> None:
    for name, kernel in kernels.items():
        _add_count(into.setdefault(name, {"launches": 0, "gpu_ns": 0}), kernel)


def _add_count(into: dict[str, int], count: Mapping[str, int]) -> None:
    into["launches"] += count["launches"]
    into["gpu_ns"] += count["gpu_ns"]
