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

Backward per forward line (torch, documents/backward_lines.py). Optional counts of a site, each
only where it is not 0: on a forward line, `backward_ns` and `backward_launches` (the backward
kernels of its ops, which are also in the `backward()` line's own numbers); on that line,
`backward_lines_ns` (the part of its gpu_ns charged to forward lines) and `backward_unknown_ns`
(nodes whose forward line is not known). The forward lines' backward_ns add up to the passes'
backward_lines_ns. Files written before these fields read as profiles with none.

Memory (`kname profile --memory`: docs/memory.md), each only in a profile that measured it. A
site's `memory` has one entry per view that saw its line allocate (`device` and `pinned`: the
driver's, from CUPTI; `torch`, `cupy`: the pools' own, from their hooks):

        {"name": "step app.py:12", ...,
         "memory": {"torch": {"allocated": 16777216, "allocations": 1,    bytes and count
                              "freed": 16777216, "frees": 1,             of those freed
                              "peak": 16777216,                           the most it held
                              "at_peak": 16777216}}}                      held at the view's peak

and the document's `memory`, after the totals, each view's process-wide numbers: its `peak`
(bytes), `peak_ns` (when), `live` (bytes held at the end), `unmatched_frees`, `untracked`, and
`timeline`, at most MAX_TIMELINE [ns, live bytes] points. Views are never added together (the
driver sees the pools' segments too). Files without it read as profiles that did not measure it.

Launch times (the launch-bound verdict, docs/verdict.md), only where a launch call of the site
was timed:

        {"name": "main app.py:9", ...,
         "launch_times": {"calls": 200,    its launch calls timed (at most its launches)
                          "cpu_ns": 610000, their CPU time, enter to exit, ns
                          "idle_ns": 480000}} the GPU idle time they left on their streams, ns

Files written before it read as sites whose launches were not timed (no verdict).

Ranks, in either schema. A document says who wrote it in `ranks`, after the totals: one record
for a file one process wrote, one per rank in a merge of several (merge.py), in rank order:

      "ranks": [
        {"rank": 3,                     the process's rank in its job (0 for a lone process)
         "local_rank": 1,               its rank on its node, or null where the launcher said none
         "world_size": 8,               ranks in the job (1 for a lone process)
         "launcher": "torchrun",        torchrun, openmpi, pmi or slurm; null for a lone process
         "host": "node2",               the machine's name
         "pid": 4242,
         "device": "0"}                 its GPU where known (CUDA_VISIBLE_DEVICES, the profiler's
      ]                                 context), else null

With more than one rank, each site keeps its numbers on each rank, in lists aligned with `ranks`
(a rank where the site never ran has 0), and summing to the site's own:

        {"name": "step app.py:12", ..., "launches": 40, "gpu_ns": 162000, ...,
         "by_rank": {"launches": [20, 20], "gpu_ns": [81000, 81000]}}     a census: launches only

A profile's site whose kernels include NCCL's (collectives.py) also keeps, in `by_rank`, each
rank's GPU time in them, each at most that rank's gpu_ns and together at most those kernels'
(a merge that read a merged file written before this field counts its ranks' as 0):

         "by_rank": {..., "collective_ns": [9000, 61000]}   the least is the collective's own
                                                            cost, each excess waiting

A record of one rank may hold other fields. One is read: a profile of an on-demand window
(`kname attach`, KNAME_PROFILE_TRIGGER: profiling/ondemand.py) says when it was, in its rank's
record, and a merge keeps each rank's:

         "window": {"start_ns": 1765000000000000000,   the wall clock (ns since 1970) when
                    "end_ns": 1765000003000000000,     collecting started and stopped
                    "by": "attach"}                    attach or trigger

Files written before ranks were recorded have no `ranks`: they read as documents of an unknown
rank (merged, rank 0).

Either schema may end with `sources`: the lines of source around each site's line, kept when
the document was written, for its page (kname.documents.sources). Files without it read as
documents whose source was not kept.

A file is someone else's data: `validate` checks every field before anything reads it, and a
fault is one line. Every count and time is a whole number from 0 to MAX_COUNT (what a 64-bit
signed integer holds: 292 years in ns), every name, kernel, library, host and version a string
of at most MAX_TEXT characters; totals are the sums of what they total. Fields not listed here
are ignored (a newer kname may add some) and never shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from kname._version import __version__
from kname.documents import backward_lines
from kname.documents.collectives import collective_names
from kname.documents.run_facts import MAX_PROGRAM, PROGRAM, WRITTEN, run_facts_problem
from kname.documents.sources import SOURCES, validate_sources
from kname.documents.verdict import LAUNCH_TIMES

CENSUS_SCHEMA = 1
PROFILE_SCHEMA = 2
SCHEMAS = (CENSUS_SCHEMA, PROFILE_SCHEMA)
SCHEMA_KINDS = {CENSUS_SCHEMA: "census", PROFILE_SCHEMA: "profile"}  # what messages call each
# The third kind of saved file: the pytest plugin's report of each test's census (its "report"
# field; pytest_report.py), which documents.files.load reads where asked.
PYTEST_REPORT = "pytest"
SITE_FIELDS = {
    CENSUS_SCHEMA: ("name", "kernel", "lib", "launches", "share", "order"),
    PROFILE_SCHEMA: ("name", "kernel", "lib", "launches", "gpu_ns", "share", "order", "kernels"),
}
# A profile site's optional fields, for its CUDA graph work (see above).
REPLAYED_AT = "replayed_at"
REPLAYED_UNSEEN = "replayed_unseen"
# A profile site's optional launch times (see above; kname.documents.verdict reads them).
LAUNCH_TIME_KEYS = ("calls", "cpu_ns", "idle_ns")
# The fields after the sites, in the order they are written.
TOTAL_FIELDS = {
    CENSUS_SCHEMA: ("total_launches",),
    PROFILE_SCHEMA: ("total_launches", "total_gpu_ns", "unattributed", "processes"),
}
# Memory per line (see above): a site's field and the document's, each optional.
MEMORY = "memory"
MEMORY_SITE_FIELDS = ("allocated", "allocations", "freed", "frees", "peak", "at_peak")
MEMORY_VIEW_FIELDS = ("peak", "peak_ns", "live", "unmatched_frees", "untracked")
MAX_VIEWS = 16  # views in one memory field, each named in at most MAX_VIEW_NAME characters
MAX_VIEW_NAME = 32
MAX_TIMELINE = 4096  # points of a view's timeline
# Who wrote a document (kname.ranks.meta records), and a site's numbers on each of those ranks.
RANKS = "ranks"
BY_RANK = "by_rank"
RANK_FIELDS = ("rank", "local_rank", "world_size", "launcher", "host", "pid", "device")
# A rank record's optional on-demand window (see above), and who may have opened one.
WINDOW = "window"
WINDOW_BY = ("attach", "trigger")
BY_RANK_FIELDS = {CENSUS_SCHEMA: ("launches",), PROFILE_SCHEMA: ("launches", "gpu_ns")}
COLLECTIVE_NS = "collective_ns"  # a profile site's optional by_rank list (see above)
# The rank a document that has no `ranks` counts as when merged with others.
UNKNOWN_RANK = dict.fromkeys(RANK_FIELDS) | {"rank": 0, "world_size": 1}
# The bounds of a valid document (see above): a number past them is a hostile file, whose sums
# would overflow the merge's 64-bit arrays and whose times a float cannot divide.
MAX_COUNT = 2**63 - 1
MAX_TEXT = 65_536
COUNT_RULE = f"a whole number from 0 to 2**63-1 ({MAX_COUNT})"
TEXT_RULE = f"a string of at most {MAX_TEXT:,} characters"


class DocumentError(ValueError):
    """A saved document cannot be read: the message is one line, naming the file."""


def validate(document: Any, source: str, schemas: tuple[int, ...] = SCHEMAS) -> dict[str, Any]:
    """`document` if it is a census of one of `schemas`, else DocumentError naming `source`."""
    if not isinstance(document, dict) or "sites" not in document or "schema" not in document:
        kinds = " or ".join(SCHEMA_KINDS[schema] for schema in schemas)
        raise DocumentError(f"{source}: not a kname {kinds} (an object with 'schema' and 'sites')")
    schema = document["schema"]
    if schema not in schemas:
        read = " and ".join(map(str, schemas))
        raise DocumentError(
            f"{source}: census schema {_shown(schema)} is not supported "
            f"(kname {__version__} reads schema{'s' if len(schemas) > 1 else ''} {read})"
        )
    if not isinstance(document["sites"], list):
        raise DocumentError(f"{source}: 'sites' must be a list")
    if "kname" in document and not is_text(document["kname"]):
        raise DocumentError(f"{source}: 'kname' (the version that wrote it) must be {TEXT_RULE}")
    profile = schema == PROFILE_SCHEMA
    sites = document["sites"]
    # Sites of the schema's own fields alone (the common form) are checked in one loop, and then
    # need no look for optional fields; others, or where that loop finds a fault, site by site.
    plain = _of_own_fields(sites, schema) and _PLAIN_SITES[schema](sites)
    if not plain:
        _validate_sites(sites, source, schema)
    if profile and len(set(map(_NAME, sites))) != len(sites):
        _name_listed_twice(sites, source)  # a census lists a site once per kernel
    if profile:
        if not plain:
            _validate_backward_fields(sites, source)
        _validate_profile_totals(document, source)
        if not plain:
            _validate_site_memory(sites, source)
        _validate_memory(document, source)
    else:
        _validate_census_total(document, source)
    if RANKS in document:
        _validate_ranks(document, source, by_rank_possible=not plain)
    elif not plain and any(BY_RANK in site for site in sites):
        raise DocumentError(f"{source}: sites have {BY_RANK!r} but the document has no {RANKS!r}")
    if SOURCES in document:
        try:
            validate_sources(document[SOURCES], source)
        except ValueError as exc:
            raise DocumentError(str(exc)) from None
        if not all(map(is_text, document[SOURCES])):
            raise DocumentError(f"{source}: {SOURCES}: a file's path must be {TEXT_RULE}")
    return document


def render_json(document: Mapping[str, Any]) -> str:
    """A document of either schema as JSON text with one site (and one rank) per line
    (diff-friendly), ending in a newline."""
    fields = [
        f'  "kname": {json.dumps(document["kname"])}',
        f'  "schema": {json.dumps(document["schema"])}',
        _json_list("sites", document["sites"]),
        *(
            f"  {json.dumps(key)}: {json.dumps(document[key], ensure_ascii=False)}"
            for key in TOTAL_FIELDS[document["schema"]]
        ),
    ]
    if MEMORY in document:
        fields.append(f"  {json.dumps(MEMORY)}: {json.dumps(document[MEMORY])}")
    if RANKS in document:
        fields.append(_json_list(RANKS, document[RANKS]))
    if SOURCES in document:  # one file per line
        files = ",\n".join(
            f"    {json.dumps(path, ensure_ascii=False)}: {json.dumps(spans, ensure_ascii=False)}"
            for path, spans in document[SOURCES].items()
        )
        fields.append(f'  "{SOURCES}": {{\n{files}\n  }}' if files else f'  "{SOURCES}": {{}}')
    return "{\n" + ",\n".join(fields) + "\n}\n"


def _list(values: Any) -> list[Any]:
    """A merged document's by_rank values (spread.RankValues, a sequence) as a JSON list."""
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        return list(values)
    raise TypeError(f"{type(values).__name__} is not JSON serializable")


def _json_list(key: str, items: list[Any]) -> str:
    lines = ",\n".join(
        f"    {json.dumps(item, ensure_ascii=False, default=_list)}" for item in items
    )
    return f'  "{key}": [\n{lines}\n  ]' if lines else f'  "{key}": []'


def kernel_sums(kernels: Mapping[str, Mapping[str, int]]) -> tuple[int, int]:
    """(launches, gpu_ns) summed over a profile's kernels."""
    return (
        sum(k["launches"] for k in kernels.values()),
        sum(k["gpu_ns"] for k in kernels.values()),
    )


def is_count(value: Any) -> bool:
    """A whole number from 0 to MAX_COUNT (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def is_text(value: Any) -> bool:
    """A string of at most MAX_TEXT characters."""
    return isinstance(value, str) and len(value) <= MAX_TEXT


def check_totals(document: Mapping[str, Any], source: str) -> None:
    """DocumentError unless a document's totals (those of documents merged: sums that may
    overflow) are within MAX_COUNT; every site's numbers are within its totals."""
    for key in ("total_launches", "total_gpu_ns"):
        if key in document and not is_count(document[key]):
            raise DocumentError(
                f"{source}: {key} adds up to {document[key]}, past the 2**63-1 ({MAX_COUNT}) "
                "a saved document can hold"
            )


_NAME, _LAUNCHES, _GPU_NS = itemgetter("name"), itemgetter("launches"), itemgetter("gpu_ns")
_KERNEL_COUNTS = itemgetter("launches", "gpu_ns")


def _of_own_fields(sites: list[Any], schema: int) -> bool:
    """Whether every site is an object of as many fields as its schema's own (which fields, the
    loop that reads them finds), at C's speed."""
    return set(map(type, sites)) <= {dict} and set(map(len, sites)) <= {len(SITE_FIELDS[schema])}


def _plain_profile_sites(sites: list[dict[str, Any]]) -> bool:
    """Whether every site, each of the schema's fields alone, is certainly valid, by quick
    checks of JSON's own types in one loop; False sends them through the checks of each."""
    # Read by itemgetter, checked inline, no call per site: a merge of 1,024 rank files of
    # 5,000 sites checks 5 million, as fast as Python can (issue 43).
    try:
        for name, kernel, lib, launches, gpu_ns, share, order, kernels in map(
            _SITE_ROWS[PROFILE_SCHEMA], sites
        ):
            if not (
                type(name) is str
                and type(kernel) is str
                and type(lib) is str
                and len(name) <= MAX_TEXT
                and len(kernel) <= MAX_TEXT
                and len(lib) <= MAX_TEXT
                and type(launches) is int  # >= 0: the sum of its kernels' (below)
                and type(gpu_ns) is int
                and launches <= MAX_COUNT
                and gpu_ns <= MAX_COUNT
                and type(order) is int
                and 0 <= order <= MAX_COUNT
                and (type(share) is float or type(share) is int)
                and 0 <= share <= 1  # a NaN fails it
                and type(kernels) is dict
            ):
                return False
            for kernel_name, counts in kernels.items():
                launched, timed = _KERNEL_COUNTS(counts)
                if (
                    type(launched) is not int
                    or type(timed) is not int
                    or launched < 0
                    or timed < 0
                    or len(kernel_name) > MAX_TEXT
                ):
                    return False  # (each at most MAX_COUNT: they add up to the site's)
                launches -= launched
                gpu_ns -= timed
            if launches or gpu_ns:  # not the sums of its kernels
                return False
    except (KeyError, TypeError, IndexError):
        return False
    return True


def _plain_census_sites(sites: list[dict[str, Any]]) -> bool:
    """_plain_profile_sites' twin for a census."""
    try:
        for name, kernel, lib, launches, share, order in map(_SITE_ROWS[CENSUS_SCHEMA], sites):
            if not (
                type(name) is str
                and type(kernel) is str
                and type(lib) is str
                and len(name) <= MAX_TEXT
                and len(kernel) <= MAX_TEXT
                and len(lib) <= MAX_TEXT
                and type(launches) is int
                and 0 <= launches <= MAX_COUNT
                and type(order) is int
                and 0 <= order <= MAX_COUNT
                and (type(share) is float or type(share) is int)
                and 0 <= share <= 1
            ):
                return False
    except (KeyError, TypeError, IndexError):
        return False
    return True


_SITE_ROWS = {schema: itemgetter(*fields) for schema, fields in SITE_FIELDS.items()}
_PLAIN_SITES = {PROFILE_SCHEMA: _plain_profile_sites, CENSUS_SCHEMA: _plain_census_sites}


def _validate_sites(sites: list[Any], source: str, schema: int) -> None:
    """Each site's fields, site by site: quick checks of the common form, else the full checks,
    which say what is wrong."""
    plain = _plain_profile_site if schema == PROFILE_SCHEMA else _plain_census_site
    for index, site in enumerate(sites):
        if not plain(site):
            _validate_site(site, f"{source}: sites[{index}]", SITE_FIELDS[schema])


def _plain_profile_site(site: Any) -> bool:
    """Whether a profile site is certainly valid, by quick checks of the common form (JSON's
    own types); False sends it through _validate_site, which says what is wrong, if anything."""
    # Subscripts in one try, not .get(): a merge of 1,024 rank files checks 5 million sites.
    try:
        launches, gpu_ns, share, order = (
            site["launches"],
            site["gpu_ns"],
            site["share"],
            site["order"],
        )
        plain = (
            type(site) is dict
            and REPLAYED_AT not in site  # graph work: the full checks, which know its fields
            and REPLAYED_UNSEEN not in site
            and launch_times_fault(site) is None
            and _plain_texts(site)
            and type(launches) is int
            and type(gpu_ns) is int
            and launches <= MAX_COUNT
            and gpu_ns <= MAX_COUNT
            and type(order) is int
            and 0 <= order <= MAX_COUNT
            and (type(share) is float or type(share) is int)
            and 0 <= share <= 1
        )
        kernels = site["kernels"]
    except (KeyError, TypeError, IndexError):
        return False
    if not plain or type(kernels) is not dict:
        return False
    kernel_launches = kernel_gpu_ns = 0
    try:
        for name, kernel in kernels.items():
            launched, timed = kernel["launches"], kernel["gpu_ns"]
            if type(launched) is not int or type(timed) is not int or launched < 0 or timed < 0:
                return False
            if len(name) > MAX_TEXT:
                return False
            kernel_launches += launched
            kernel_gpu_ns += timed
    except (KeyError, TypeError, IndexError):
        return False
    return kernel_launches == launches and kernel_gpu_ns == gpu_ns


def _plain_census_site(site: Any) -> bool:
    """_plain_profile_site's twin for a census site."""
    try:
        launches, order, share = site["launches"], site["order"], site["share"]
        return (
            type(site) is dict
            and _plain_texts(site)
            and type(launches) is int
            and 0 <= launches <= MAX_COUNT
            and type(order) is int
            and 0 <= order <= MAX_COUNT
            and (type(share) is float or type(share) is int)
            and 0 <= share <= 1
        )
    except (KeyError, TypeError, IndexError):
        return False


def _plain_texts(site: dict[str, Any]) -> bool:
    """Whether a site's name, kernel and lib are strings within MAX_TEXT (KeyError if one is
    missing)."""
    name, kernel, lib = site["name"], site["kernel"], site["lib"]
    return (
        type(name) is str
        and type(kernel) is str
        and type(lib) is str
        and len(name) <= MAX_TEXT
        and len(kernel) <= MAX_TEXT
        and len(lib) <= MAX_TEXT
    )


def _name_listed_twice(sites: list[dict[str, Any]], source: str) -> None:
    names: set[str] = set()
    for index, site in enumerate(sites):
        if site["name"] in names:
            raise DocumentError(
                f"{source}: sites[{index}]: call site {_shown(site['name'])} is listed twice"
            )
        names.add(site["name"])


def _validate_ranks(document: dict[str, Any], source: str, by_rank_possible: bool) -> None:
    """`ranks`, the records of who wrote the document, and each site's `by_rank` aligned with it
    (`by_rank_possible` False: every site has its schema's fields alone, so none has one)."""
    records = document[RANKS]
    if not isinstance(records, list) or not records:
        raise DocumentError(f"{source}: {RANKS!r} must be a list of one or more rank records")
    previous = -1
    for index, record in enumerate(records):
        where = f"{source}: {RANKS}[{index}]"
        _validate_rank_record(record, where)
        if record["rank"] <= previous:
            raise DocumentError(f"{where}: ranks must be listed once each, in order")
        previous = record["rank"]
    if len(records) == 1 and not by_rank_possible:
        return
    fields = BY_RANK_FIELDS[document["schema"]]
    for index, site in enumerate(document["sites"]):
        where = f"{source}: sites[{index}]"
        if len(records) == 1:
            if BY_RANK in site:
                raise DocumentError(f"{where} has {BY_RANK!r} but the document has one rank")
            continue
        per_rank = site.get(BY_RANK)
        if not isinstance(per_rank, dict):
            raise DocumentError(
                f"{where} needs {BY_RANK!r}, an object of {', '.join(fields)} lists (the "
                f"document has {len(records)} ranks)"
            )
        for field in fields:
            _validate_per_rank(per_rank.get(field), site[field], len(records), f"{where}.{field}")
        if COLLECTIVE_NS in per_rank and document["schema"] == PROFILE_SCHEMA:
            _validate_collective(site, len(records), f"{where}.{COLLECTIVE_NS}")


def _validate_collective(site: dict[str, Any], ranks: int, where: str) -> None:
    """A site's collective GPU time on each rank: `ranks` counts, each at most that rank's GPU
    time, together at most its NCCL kernels' GPU time."""
    values, gpu_ns = site[BY_RANK][COLLECTIVE_NS], site[BY_RANK]["gpu_ns"]
    most = sum(site["kernels"][name]["gpu_ns"] for name in collective_names(site["kernels"]))
    if (
        not isinstance(values, list)
        or len(values) != ranks
        or not all(map(is_count, values))
        or any(value > rank_ns for value, rank_ns in zip(values, gpu_ns, strict=True))
        or sum(values) > most
    ):
        raise DocumentError(
            f"{where}: {BY_RANK} must list {ranks} whole numbers >= 0, one per rank, each at "
            "most that rank's gpu_ns, together at most the site's NCCL kernels' gpu_ns"
        )


def _validate_rank_record(record: Any, where: str) -> None:
    if not isinstance(record, dict) or not all(field in record for field in RANK_FIELDS):
        raise DocumentError(f"{where} must be an object with {', '.join(RANK_FIELDS)}")
    checks = {
        "rank": is_count(record["rank"]),
        "local_rank": record["local_rank"] is None or is_count(record["local_rank"]),
        "world_size": is_count(record["world_size"]) and record["world_size"] >= 1,
        "launcher": record["launcher"] is None or is_text(record["launcher"]),
        "host": record["host"] is None or is_text(record["host"]),
        "pid": record["pid"] is None or is_count(record["pid"]),
        "device": record["device"] is None
        or is_text(record["device"])
        or is_count(record["device"]),
    }
    wrong = next((field for field, ok in checks.items() if not ok), None)
    if wrong is not None:
        raise DocumentError(
            f"{where}.{wrong} cannot be {_shown(record[wrong])} (counts are {COUNT_RULE}, "
            f"text {TEXT_RULE})"
        )
    fact = run_facts_problem(record)
    if fact is not None:
        raise DocumentError(
            f"{where}.{fact} cannot be {_shown(record[fact])} ({PROGRAM}: a file name of at most "
            f"{MAX_PROGRAM} characters; {WRITTEN}: a UTC time such as 2026-12-06T08:30:12Z)"
        )
    if WINDOW in record:
        _validate_window(record[WINDOW], f"{where}.{WINDOW}")


def _validate_window(window: Any, where: str) -> None:
    """An on-demand window: start_ns and end_ns counts, the end not before the start, and who
    opened it."""
    if (
        not isinstance(window, dict)
        or not is_count(window.get("start_ns"))
        or not is_count(window.get("end_ns"))
        or window["end_ns"] < window["start_ns"]
        or window.get("by") not in WINDOW_BY
    ):
        raise DocumentError(
            f"{where} must be an object of start_ns and end_ns (counts, {COUNT_RULE}, the end "
            f"not before the start) and by ({' or '.join(WINDOW_BY)}), not {_shown(window)}"
        )


def _validate_per_rank(values: Any, total: int, ranks: int, where: str) -> None:
    """A site's values on each rank: `ranks` whole numbers >= 0 summing to `total`."""
    # set(map(type)) and min(): a merge of 1,024 ranks has millions of these to check.
    if (
        not isinstance(values, list)
        or len(values) != ranks
        or not set(map(type, values)) <= {int}
        or min(values) < 0
        or max(values) > MAX_COUNT
    ):
        raise DocumentError(
            f"{where}: {BY_RANK} must list {ranks} whole numbers >= 0, one per rank, each up "
            "to 2**63-1"
        )
    if sum(values) != total:
        raise DocumentError(f"{where}: {BY_RANK} does not add up to the site's {total}")


def _validate_site(site: Any, where: str, fields: tuple[str, ...]) -> None:
    if not isinstance(site, dict):
        raise DocumentError(f"{where} must be an object with {', '.join(fields)}")
    for field in fields:
        if field not in site:
            raise DocumentError(f"{where} has no {field!r}")
    for field in ("name", "kernel", "lib"):
        if not is_text(site[field]):
            raise DocumentError(f"{where}.{field} must be {TEXT_RULE}, not {_shown(site[field])}")
    for field in (f for f in ("launches", "gpu_ns", "order") if f in fields):
        if not is_count(site[field]):
            raise DocumentError(f"{where}.{field} must be {COUNT_RULE}, not {_shown(site[field])}")
    share = site["share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise DocumentError(f"{where}.share must be a number from 0 to 1, not {_shown(share)}")
    if "kernels" in fields:
        _validate_kernels(site["kernels"], where)
        if kernel_sums(site["kernels"]) != (site["launches"], site["gpu_ns"]):
            raise DocumentError(f"{where}: launches and gpu_ns are not the sums of its kernels")
        _validate_graph_fields(site, where)
        fault = launch_times_fault(site)
        if fault is not None:
            raise DocumentError(f"{where}.{LAUNCH_TIMES}: {fault}")


def launch_times_fault(site: Mapping[str, Any]) -> str | None:
    """What is wrong with a profile site's launch_times, None where it is absent or valid."""
    times = site.get(LAUNCH_TIMES)
    if times is None:
        return None
    if not isinstance(times, dict) or not all(is_count(times.get(k)) for k in LAUNCH_TIME_KEYS):
        return f"must be {{'calls': n, 'cpu_ns': t, 'idle_ns': t}}, each {COUNT_RULE}"
    launches = site.get("launches")
    if is_count(launches) and times["calls"] > launches:
        return "more timed launch calls than the site's launches"
    return None


def _validate_backward_fields(sites: list[dict[str, Any]], source: str) -> None:
    """Backward per forward line's optional fields (backward_lines.py), where a site has any."""
    plain = len(SITE_FIELDS[PROFILE_SCHEMA])
    extended = [(index, site) for index, site in enumerate(sites) if len(site) > plain]
    for index, site in extended:
        fault = backward_lines.field_fault(site, is_count)
        if fault:
            raise DocumentError(f"{source}: sites[{index}]: {fault} ({COUNT_RULE})")
    fault = backward_lines.totals_fault(site for _, site in extended)
    if fault:
        raise DocumentError(f"{source}: {fault}")


def _validate_kernels(kernels: Any, where: str) -> None:
    if not isinstance(kernels, dict):
        raise DocumentError(f"{where}.kernels must be an object {{kernel: {{launches, gpu_ns}}}}")
    for name, kernel in kernels.items():
        if not is_text(name):
            raise DocumentError(f"{where}.kernels: a kernel's name must be {TEXT_RULE}")
        if not _is_counts(kernel):
            raise DocumentError(
                f"{where}.kernels[{_shown(name)}] must be {{'launches': n, 'gpu_ns': t}}, "
                f"each {COUNT_RULE}"
            )


def _validate_graph_fields(site: dict[str, Any], where: str) -> None:
    """replayed_at and replayed_unseen, where present: counts, together within the site's."""
    replays = site.get(REPLAYED_AT, {})
    if not isinstance(replays, dict) or not all(
        is_text(name) and _is_counts(counts) for name, counts in replays.items()
    ):
        raise DocumentError(
            f"{where}.{REPLAYED_AT} must be {{replay site: {{'launches': n, 'gpu_ns': t}}}}, "
            f"each site {TEXT_RULE} and each number {COUNT_RULE}"
        )
    unseen = site.get(REPLAYED_UNSEEN, {"launches": 0, "gpu_ns": 0})
    if not _is_counts(unseen):
        raise DocumentError(
            f"{where}.{REPLAYED_UNSEEN} must be {{'launches': n, 'gpu_ns': t}}, each {COUNT_RULE}"
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
    if not isinstance(unattributed, dict) or not all(
        key in unattributed for key in ("launches", "gpu_ns", "kernels")
    ):
        raise DocumentError(
            f"{source}: 'unattributed' must be an object with 'launches', 'gpu_ns' and 'kernels'"
        )
    where = f"{source}: unattributed"
    _validate_kernels(unattributed["kernels"], where)
    for key in ("launches", "gpu_ns"):
        _validate_count(unattributed, key, where)
    launches, gpu_ns = kernel_sums(unattributed["kernels"])
    if (launches, gpu_ns) != (unattributed["launches"], unattributed["gpu_ns"]):
        raise DocumentError(f"{where}: launches and gpu_ns are not the sums of its kernels")
    for key in ("total_launches", "total_gpu_ns", "processes"):
        _validate_count(document, key, source)
    launches += sum(map(_LAUNCHES, document["sites"]))
    gpu_ns += sum(map(_GPU_NS, document["sites"]))
    if (launches, gpu_ns) != (document["total_launches"], document["total_gpu_ns"]):
        raise DocumentError(
            f"{source}: totals ({document['total_launches']} launches, "
            f"{document['total_gpu_ns']} ns) are not the sums of the sites "
            f"({launches} launches, {gpu_ns} ns)"
        )


def _validate_site_memory(sites: list[dict[str, Any]], source: str) -> None:
    """Each site's `memory`, where present (see above)."""
    for index, site in enumerate(sites):
        if MEMORY in site:
            _validate_memory_views(
                site[MEMORY], MEMORY_SITE_FIELDS, f"{source}: sites[{index}].{MEMORY}"
            )


def _validate_memory(document: dict[str, Any], source: str) -> None:
    """The document's `memory`, where present (see above)."""
    if MEMORY in document:
        views = document[MEMORY]
        _validate_memory_views(views, MEMORY_VIEW_FIELDS, f"{source}: {MEMORY}")
        for view, numbers in views.items():
            _validate_timeline(numbers.get("timeline"), f"{source}: {MEMORY}.{_shown(view)}")


def _validate_memory_views(views: Any, fields: tuple[str, ...], where: str) -> None:
    """{view: {field: count}}: at most MAX_VIEWS views, each name short text, each field a count;
    a site's bytes held within what it allocated."""
    if (
        not isinstance(views, dict)
        or len(views) > MAX_VIEWS
        or not all(isinstance(v, str) and 0 < len(v) <= MAX_VIEW_NAME for v in views)
    ):
        raise DocumentError(
            f"{where} must be an object of at most {MAX_VIEWS} views, each named in 1 to "
            f"{MAX_VIEW_NAME} characters"
        )
    for view, numbers in views.items():
        if not isinstance(numbers, dict) or not all(is_count(numbers.get(f)) for f in fields):
            raise DocumentError(
                f"{where}.{_shown(view)} must be an object of {', '.join(fields)}, each "
                f"{COUNT_RULE}"
            )
        if "allocated" in fields and not (
            numbers["freed"] <= numbers["allocated"]
            and numbers["at_peak"] <= numbers["peak"] <= numbers["allocated"]
        ):
            raise DocumentError(
                f"{where}.{_shown(view)}: freed, peak and at_peak must be within allocated "
                "(and at_peak within peak)"
            )


def _validate_timeline(points: Any, where: str) -> None:
    """A view's timeline: at most MAX_TIMELINE [ns, bytes] pairs of counts."""
    if (
        not isinstance(points, list)
        or len(points) > MAX_TIMELINE
        or not all(
            isinstance(p, list) and len(p) == 2 and is_count(p[0]) and is_count(p[1])
            for p in points
        )
    ):
        raise DocumentError(
            f"{where}.timeline must list at most {MAX_TIMELINE} [ns, bytes] pairs, each "
            f"{COUNT_RULE}"
        )


def _validate_census_total(document: dict[str, Any], source: str) -> None:
    _validate_count(document, "total_launches", source)
    launches = sum(map(_LAUNCHES, document["sites"]))
    if launches != document["total_launches"]:
        raise DocumentError(
            f"{source}: total_launches ({document['total_launches']}) is not the sum of the "
            f"sites' launches ({launches})"
        )


def _validate_count(document: Mapping[str, Any], key: str, source: str) -> None:
    value = document.get(key, 1 if key == "processes" else None)  # one process unless merged
    if not is_count(value):
        raise DocumentError(f"{source}: {key!r} must be {COUNT_RULE}, not {_shown(value)}")


def _shown(value: Any) -> str:
    """A value from a file, for a one-line message: its repr, cut to 60 characters (a hostile
    number may have thousands of digits)."""
    try:
        shown = repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits
        return "a number of thousands of digits"
    return shown if len(shown) <= 60 else f"{shown[:57]}..."
