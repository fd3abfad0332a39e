"""The two saved documents, what makes one valid, and their JSON text.

Schema 1, the launch census (`kname.report(format="json")`, `KNAME_REPORT=census.json`):

    {
      "kname": "0.1.0",              the kname version that wrote it
      "schema": 1,                   changes only when the layout does
      "sites": [                     in first-seen order
        {"name": "step app.py:12",   the call-site name, as the profiler shows it
         "kernel": "axpy",           the kernel ("" when kname no longer knows it)
         "lib": "numba",             the library that launched it
         "launches": 20,
         "share": 0.666667,          launches / total_launches, from 0 to 1, 6 decimals
         "order": 1}                 first-seen rank, from 1
      ],
      "total_launches": 30
    }

A site that launched nothing is left out.

Schema 2, a GPU profile (`kname profile --json`, `KNAME_MODE=profile`):

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

CUDA graphs. The GPU work of a graph replay goes to the line that made each node (the launch
captured into the graph, or the line that added the node), and the line that replayed the graph
is kept beside it. Two fields of a site say so, each only where there is such work:

        {"name": "forward model.py:21", ...,
         "replayed_at": {                  of its launches, those made at this line as graph
           "step runner.py:26":            nodes, by the line that replayed their graph
             {"launches": 50, "gpu_ns": 183000}},
         "replayed_unseen":                of its launches, graph work replayed at this line
           {"launches": 4, "gpu_ns": 900}} whose nodes kname did not see made (the graph was
                                           captured before profiling started): it stays here

Each is part of the site's launches and gpu_ns (its sums are not above them). Files written
before these fields read as sites with no graph work.

Either schema may end with `sources`: the lines of source around each site's line, kept when
the document was written, for its page (kname.documents.sources). Files without it read as
documents whose source was not kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kname._version import __version__
from kname.documents.sources import SOURCES, validate_sources

CENSUS_SCHEMA = 1
PROFILE_SCHEMA = 2
SCHEMAS = (CENSUS_SCHEMA, PROFILE_SCHEMA)
SITE_FIELDS = {
    CENSUS_SCHEMA: ("name", "kernel", "lib", "launches", "share", "order"),
    PROFILE_SCHEMA: ("name", "kernel", "lib", "launches", "gpu_ns", "share", "order", "kernels"),
}
# A profile site's optional fields, for its CUDA graph work (see above).
REPLAYED_AT = "replayed_at"
REPLAYED_UNSEEN = "replayed_unseen"
# The fields after the sites, in the order they are written.
TOTAL_FIELDS = {
    CENSUS_SCHEMA: ("total_launches",),
    PROFILE_SCHEMA: ("total_launches", "total_gpu_ns", "unattributed", "processes"),
}


class DocumentError(ValueError):
    """A saved document cannot be read: the message is one line, naming the file."""


def validate(document: Any, source: str, schemas: tuple[int, ...] = SCHEMAS) -> dict[str, Any]:
    """`document` if it is a census of one of `schemas`, else DocumentError naming `source`."""
    if not isinstance(document, dict) or "sites" not in document or "schema" not in document:
        raise DocumentError(f"{source}: not a kname census (an object with 'schema' and 'sites')")
    schema = document["schema"]
    if schema not in schemas:
        read = " and ".join(map(str, schemas))
        raise DocumentError(
            f"{source}: census schema {schema!r} is not supported "
            f"(kname {__version__} reads schema{'s' if len(schemas) > 1 else ''} {read})"
        )
    if not isinstance(document["sites"], list):
        raise DocumentError(f"{source}: 'sites' must be a list")
    profile = schema == PROFILE_SCHEMA
    names: set[str] = set()
    for index, site in enumerate(document["sites"]):
        where = f"{source}: sites[{index}]"
        _validate_site(site, where, SITE_FIELDS[PROFILE_SCHEMA if profile else CENSUS_SCHEMA])
        if profile and site["name"] in names:  # a census lists a site once per kernel
            raise DocumentError(f"{where}: call site {site['name']!r} is listed twice")
        names.add(site["name"])
    if profile:
        _validate_profile_totals(document, source)
    else:
        _validate_count(document, "total_launches", source)
    if SOURCES in document:
        try:
            validate_sources(document[SOURCES], source)
        except ValueError as exc:
            raise DocumentError(str(exc)) from None
    return document


def render_json(document: Mapping[str, Any]) -> str:
    """A document of either schema as JSON text with one site per line (diff-friendly), ending in
    a newline."""
    sites = ",\n".join(f"    {json.dumps(site, ensure_ascii=False)}" for site in document["sites"])
    fields = [
        f'  "kname": {json.dumps(document["kname"])}',
        f'  "schema": {json.dumps(document["schema"])}',
        f'  "sites": [\n{sites}\n  ]' if sites else '  "sites": []',
        *(
            f"  {json.dumps(key)}: {json.dumps(document[key], ensure_ascii=False)}"
            for key in TOTAL_FIELDS[document["schema"]]
        ),
    ]
    if SOURCES in document:  # one file per line
        files = ",\n".join(
            f"    {json.dumps(path, ensure_ascii=False)}: {json.dumps(spans, ensure_ascii=False)}"
            for path, spans in document[SOURCES].items()
        )
        fields.append(f'  "{SOURCES}": {{\n{files}\n  }}' if files else f'  "{SOURCES}": {{}}')
    return "{\n" + ",\n".join(fields) + "\n}\n"


def kernel_sums(kernels: Mapping[str, Mapping[str, int]]) -> tuple[int, int]:
    """(launches, gpu_ns) summed over a profile's kernels."""
    return (
        sum(k["launches"] for k in kernels.values()),
        sum(k["gpu_ns"] for k in kernels.values()),
    )


def is_count(value: Any) -> bool:
    """A whole number of 0 or more (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _validate_site(site: Any, where: str, fields: tuple[str, ...]) -> None:
    if not isinstance(site, dict):
        raise DocumentError(f"{where} must be an object with {', '.join(fields)}")
    for field in fields:
        if field not in site:
            raise DocumentError(f"{where} has no {field!r}")
    for field in ("name", "kernel", "lib"):
        if not isinstance(site[field], str):
            raise DocumentError(f"{where}.{field} must be a string, not {site[field]!r}")
    for field in (f for f in ("launches", "gpu_ns", "order") if f in fields):
        if not is_count(site[field]):
            raise DocumentError(f"{where}.{field} must be a whole number >= 0, not {site[field]!r}")
    share = site["share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise DocumentError(f"{where}.share must be a number from 0 to 1, not {share!r}")
    if "kernels" in fields:
        _validate_kernels(site["kernels"], where)
        if kernel_sums(site["kernels"]) != (site["launches"], site["gpu_ns"]):
            raise DocumentError(f"{where}: launches and gpu_ns are not the sums of its kernels")
        _validate_graph_fields(site, where)


def _validate_kernels(kernels: Any, where: str) -> None:
    if not isinstance(kernels, dict):
        raise DocumentError(f"{where}.kernels must be an object {{kernel: {{launches, gpu_ns}}}}")
    for name, kernel in kernels.items():
        if not _is_counts(kernel):
            raise DocumentError(
                f"{where}.kernels[{name!r}] must be {{'launches': n, 'gpu_ns': t}} "
                "with whole numbers >= 0"
            )


def _validate_graph_fields(site: dict[str, Any], where: str) -> None:
    """replayed_at and replayed_unseen, where present: counts, together within the site's."""
    replays = site.get(REPLAYED_AT, {})
    if not isinstance(replays, dict) or not all(_is_counts(v) for v in replays.values()):
        raise DocumentError(
            f"{where}.{REPLAYED_AT} must be {{replay site: {{'launches': n, 'gpu_ns': t}}}} "
            "with whole numbers >= 0"
        )
    unseen = site.get(REPLAYED_UNSEEN, {"launches": 0, "gpu_ns": 0})
    if not _is_counts(unseen):
        raise DocumentError(
            f"{where}.{REPLAYED_UNSEEN} must be {{'launches': n, 'gpu_ns': t}} "
            "with whole numbers >= 0"
        )
    launches, gpu_ns = kernel_sums(replays)
    if (
        launches + unseen["launches"] > site["launches"]
        or gpu_ns + unseen["gpu_ns"] > site["gpu_ns"]
    ):
        raise DocumentError(
            f"{where}: {REPLAYED_AT} and {REPLAYED_UNSEEN} add up to more than the site's "
            "launches or gpu_ns"
        )


def _is_counts(value: Any) -> bool:
    return isinstance(value, dict) and all(is_count(value.get(k)) for k in ("launches", "gpu_ns"))


def _validate_profile_totals(document: dict[str, Any], source: str) -> None:
    unattributed = document.get("unattributed")
    if not isinstance(unattributed, dict) or "kernels" not in unattributed:
        raise DocumentError(f"{source}: 'unattributed' must be an object with 'kernels'")
    _validate_kernels(unattributed["kernels"], f"{source}: unattributed")
    for key in ("total_launches", "total_gpu_ns", "processes"):
        _validate_count(document, key, source)
    launches, gpu_ns = kernel_sums(unattributed["kernels"])
    launches += sum(site["launches"] for site in document["sites"])
    gpu_ns += sum(site["gpu_ns"] for site in document["sites"])
    if (launches, gpu_ns) != (document["total_launches"], document["total_gpu_ns"]):
        raise DocumentError(
            f"{source}: totals ({document['total_launches']} launches, "
            f"{document['total_gpu_ns']} ns) are not the sums of the sites "
            f"({launches} launches, {gpu_ns} ns)"
        )


def _validate_count(document: Mapping[str, Any], key: str, source: str) -> None:
    value = document.get(key, 1 if key == "processes" else None)  # one process unless merged
    if not is_count(value):
        raise DocumentError(f"{source}: {key!r} must be a whole number >= 0, not {value!r}")
