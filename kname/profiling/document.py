"""The census document of schema 2 (a GPU profile), and reading or merging either schema.

    {
      "kname": "0.2.0",
      "schema": 2,
      "sites": [                        ranked: most GPU time first
        {"name": "step app.py:12",      the call site
         "kernel": "axpy",              the kernel with most of the site's GPU time
         "lib": "",                     the library when kname wrapped the launch, else ""
         "launches": 20,                GPU records: kernels run, copies, sets
         "gpu_ns": 81000,               their device time, ns
         "share": 0.66,                 gpu_ns / total_gpu_ns, from 0 to 1, 6 decimals
         "order": 1,                    first-seen rank, from 1
         "kernels": {"axpy": {"launches": 20, "gpu_ns": 81000}}}
      ],
      "total_launches": 30,
      "total_gpu_ns": 122000,           every GPU record, unattributed ones included
      "unattributed": {"launches": 0, "gpu_ns": 0, "kernels": {}},
      "processes": 1                    how many documents were merged into this one
    }

Copies and sets are kernels named `[memcpy HtoD]`, `[memset]`, ... A site's launches and gpu_ns
are the sums over its kernels; the totals are the sums over the sites plus `unattributed`.
Schema 1 (the launch census, kname.census_file) is still read, and merged with its own kind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kname._version import __version__
from kname.census_file import SCHEMA as CENSUS_SCHEMA
from kname.census_file import CensusError, read_json
from kname.census_file import validate as validate_census
from kname.profiling.join import Profile, SiteTotals

SCHEMA = 2
SCHEMAS = (CENSUS_SCHEMA, SCHEMA)
SITE_FIELDS = ("name", "kernel", "lib", "launches", "gpu_ns", "share", "order", "kernels")


def profile_document(profile: Profile, processes: int = 1) -> dict[str, Any]:
    """The schema-2 document of a join's result."""
    ranked_by_first = sorted(profile.sites.items(), key=lambda item: (item[1].first, item[0]))
    order = {name: rank for rank, (name, _) in enumerate(ranked_by_first, 1)}
    sites = [
        _site(name, "", totals.launches, totals.gpu_ns, order[name], _kernels(totals))
        for name, totals in profile.sites.items()
    ]
    return _document(sites, _kernels(profile.unattributed), processes)


def merge_documents(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One document from several of one schema (one per rank or process): sites summed by name.

    Launches, GPU time and per-kernel totals are added; share, order and `kernel` are derived
    again (order by each site's earliest rank in any input, then by name).
    """
    if not documents:
        raise CensusError("nothing to merge")
    schemas = {document["schema"] for document in documents}
    if len(schemas) > 1:
        raise CensusError(
            "cannot merge a launch census (schema 1) with a GPU profile (schema 2); "
            "merge files of one kind"
        )
    if schemas == {CENSUS_SCHEMA}:
        return _merge_censuses(documents)
    sites: dict[str, dict[str, Any]] = {}
    unattributed: dict[str, dict[str, int]] = {}
    for document in documents:
        for site in document["sites"]:
            merged = sites.get(site["name"])
            if merged is None:
                merged = sites[site["name"]] = {"lib": site["lib"], "order": site["order"]}
                merged["kernels"] = {}
            elif merged["lib"] != site["lib"]:
                merged["lib"] = ""
            merged["order"] = min(merged["order"], site["order"])
            _add_kernels(merged["kernels"], site["kernels"])
        _add_kernels(unattributed, document["unattributed"]["kernels"])
    ranked = sorted(sites.items(), key=lambda item: (item[1]["order"], item[0]))
    rows = [
        _site(name, site["lib"], *_sums(site["kernels"]), rank, site["kernels"])
        for rank, (name, site) in enumerate(ranked, 1)
    ]
    return _document(rows, unattributed, sum(d.get("processes", 1) for d in documents))


def launch_counts(document: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """{(call site, kernel): launches} of a document of either schema (for launch-count diffs)."""
    counts: dict[tuple[str, str], int] = {}
    for site in document["sites"]:
        if document["schema"] == SCHEMA:
            pairs = [(k, v["launches"]) for k, v in site["kernels"].items()]
        else:
            pairs = [(site["kernel"], site["launches"])]
        for kernel, launches in pairs:
            key = (site["name"], kernel)
            counts[key] = counts.get(key, 0) + launches
    return counts


def render_json(document: Mapping[str, Any]) -> str:
    """A schema-2 document as JSON text with one site per line, ending in a newline."""
    sites = ",\n".join(f"    {json.dumps(site, ensure_ascii=False)}" for site in document["sites"])
    fields = [
        f'  "kname": {json.dumps(document["kname"])}',
        f'  "schema": {SCHEMA}',
        f'  "sites": [\n{sites}\n  ]' if sites else '  "sites": []',
        *(
            f"  {json.dumps(key)}: {json.dumps(document[key], ensure_ascii=False)}"
            for key in ("total_launches", "total_gpu_ns", "unattributed", "processes")
        ),
    ]
    return "{\n" + ",\n".join(fields) + "\n}\n"


def validate(document: Any, source: str) -> dict[str, Any]:
    """`document` if it is a census of schema 1 or 2, else CensusError naming `source`."""
    if not isinstance(document, dict) or "sites" not in document or "schema" not in document:
        raise CensusError(f"{source}: not a kname census (an object with 'schema' and 'sites')")
    if document["schema"] == CENSUS_SCHEMA:
        return validate_census(document, source)
    if document["schema"] != SCHEMA:
        raise CensusError(
            f"{source}: census schema {document['schema']!r} is not supported "
            f"(kname {__version__} reads schemas {' and '.join(map(str, SCHEMAS))})"
        )
    if not isinstance(document["sites"], list):
        raise CensusError(f"{source}: 'sites' must be a list")
    names: set[str] = set()
    for index, site in enumerate(document["sites"]):
        where = f"{source}: sites[{index}]"
        _validate_site(site, where)
        if site["name"] in names:
            raise CensusError(f"{where}: call site {site['name']!r} is listed twice")
        names.add(site["name"])
    unattributed = document.get("unattributed")
    if not isinstance(unattributed, dict) or "kernels" not in unattributed:
        raise CensusError(f"{source}: 'unattributed' must be an object with 'kernels'")
    _validate_kernels(unattributed["kernels"], f"{source}: unattributed")
    for key in ("total_launches", "total_gpu_ns", "processes"):
        if not _is_count(document.get(key, 1 if key == "processes" else None)):
            raise CensusError(f"{source}: {key!r} must be a whole number >= 0")
    launches, gpu_ns = _sums(unattributed["kernels"])
    launches += sum(site["launches"] for site in document["sites"])
    gpu_ns += sum(site["gpu_ns"] for site in document["sites"])
    if (launches, gpu_ns) != (document["total_launches"], document["total_gpu_ns"]):
        raise CensusError(
            f"{source}: totals ({document['total_launches']} launches, "
            f"{document['total_gpu_ns']} ns) are not the sums of the sites "
            f"({launches} launches, {gpu_ns} ns)"
        )
    return document


def load(path: str) -> dict[str, Any]:
    """Read and validate a saved census of schema 1 or 2; every failure is a one-line error."""
    return validate(read_json(path), path)


def _document(
    sites: list[dict[str, Any]], unattributed: dict[str, dict[str, int]], processes: int
) -> dict[str, Any]:
    total_launches, total_gpu_ns = _sums(unattributed)
    total_launches += sum(site["launches"] for site in sites)
    total_gpu_ns += sum(site["gpu_ns"] for site in sites)
    for site in sites:
        site["share"] = round(site["gpu_ns"] / total_gpu_ns, 6) if total_gpu_ns else 0.0
    sites.sort(key=lambda site: (-site["gpu_ns"], site["order"]))
    return {
        "kname": __version__,
        "schema": SCHEMA,
        "sites": sites,
        "total_launches": total_launches,
        "total_gpu_ns": total_gpu_ns,
        "unattributed": {
            "launches": _sums(unattributed)[0],
            "gpu_ns": _sums(unattributed)[1],
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


def _kernels(totals: SiteTotals) -> dict[str, dict[str, int]]:
    return {k: {"launches": v.launches, "gpu_ns": v.gpu_ns} for k, v in totals.kernels.items()}


def _ranked_kernels(kernels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Most GPU time first, then most launches, then by name: the same order on every run."""
    ranked = sorted(kernels.items(), key=lambda kv: (-kv[1]["gpu_ns"], -kv[1]["launches"], kv[0]))
    return {name: {"launches": k["launches"], "gpu_ns": k["gpu_ns"]} for name, k in ranked}


def _add_kernels(into: dict[str, dict[str, int]], kernels: Mapping[str, Mapping[str, int]]):
    for name, kernel in kernels.items():
        total = into.setdefault(name, {"launches": 0, "gpu_ns": 0})
        total["launches"] += kernel["launches"]
        total["gpu_ns"] += kernel["gpu_ns"]


def _sums(kernels: Mapping[str, Mapping[str, int]]) -> tuple[int, int]:
    return (
        sum(k["launches"] for k in kernels.values()),
        sum(k["gpu_ns"] for k in kernels.values()),
    )


def _merge_censuses(documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Schema 1: launches summed per (name, kernel, lib); order by earliest rank, then key."""
    rows: dict[tuple[str, str, str], list[int]] = {}
    for document in documents:
        for site in document["sites"]:
            key = (site["name"], site["kernel"], site["lib"])
            row = rows.setdefault(key, [0, site["order"]])
            row[0] += site["launches"]
            row[1] = min(row[1], site["order"])
    total = sum(launches for launches, _ in rows.values())
    ranked = sorted(rows.items(), key=lambda item: (item[1][1], item[0]))
    sites = [
        {"name": name, "kernel": kernel, "lib": lib, "launches": launches,
         "share": round(launches / total, 6) if total else 0.0, "order": rank}
        for rank, ((name, kernel, lib), (launches, _)) in enumerate(ranked, 1)
    ]  # fmt: skip
    return {
        "kname": __version__,
        "schema": CENSUS_SCHEMA,
        "sites": sites,
        "total_launches": total,
    }


def _validate_site(site: Any, where: str) -> None:
    if not isinstance(site, dict):
        raise CensusError(f"{where} must be an object with {', '.join(SITE_FIELDS)}")
    for name in SITE_FIELDS:
        if name not in site:
            raise CensusError(f"{where} has no {name!r}")
    for name in ("name", "kernel", "lib"):
        if not isinstance(site[name], str):
            raise CensusError(f"{where}.{name} must be a string, not {site[name]!r}")
    for name in ("launches", "gpu_ns", "order"):
        if not _is_count(site[name]):
            raise CensusError(f"{where}.{name} must be a whole number >= 0, not {site[name]!r}")
    share = site["share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise CensusError(f"{where}.share must be a number from 0 to 1, not {share!r}")
    _validate_kernels(site["kernels"], where)
    if _sums(site["kernels"]) != (site["launches"], site["gpu_ns"]):
        raise CensusError(f"{where}: launches and gpu_ns are not the sums of its kernels")


def _validate_kernels(kernels: Any, where: str) -> None:
    if not isinstance(kernels, dict):
        raise CensusError(f"{where}.kernels must be an object {{kernel: {{launches, gpu_ns}}}}")
    for name, kernel in kernels.items():
        if not isinstance(kernel, dict) or not all(
            _is_count(kernel.get(key)) for key in ("launches", "gpu_ns")
        ):
            raise CensusError(
                f"{where}.kernels[{name!r}] must be {{'launches': n, 'gpu_ns': t}} "
                "with whole numbers >= 0"
            )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
