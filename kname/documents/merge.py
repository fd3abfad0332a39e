"""Documents of one kind merged into one, each rank's numbers kept: what `kname report a.json
b.json` does with one file per rank or process.

Sites are summed: a profile's by call site (launches, GPU time, each kernel's, its CUDA graph
work by replay line), a census's by call site, kernel and library (launches). A merged site's
`order` is its earliest first-seen rank in any input, its library the one all inputs agree on
(else ""); share and kernel are derived again, and a profile's `processes` is the sum of its
inputs'.

Each rank's numbers are kept (schema.py: `ranks`, `by_rank`): the merged document's rank table
lists the ranks its inputs came from, by rank, and each site's `by_rank` lists, aligned with
that table, its launches (and a profile's GPU time) on each rank. Inputs of one rank (a rank's
file and the files its helper processes wrote beside it) add up to that rank's numbers; a
document written before ranks were recorded counts as rank 0 of no launcher.

The source the inputs kept (documents/sources.py) is kept too: each file's lines are those of
every input, a line kept by several being the first one's to be folded in (with worker
processes, the first in its worker's share: the same text wherever the ranks ran one program).

Merging is exact (whole numbers, summed) and associative and commutative: documents merged in
any grouping and order give the same document. It streams: `Merge.add` folds a document in and
keeps nothing of it but its sums, so `merge_files` holds one file's document at a time, and a
site's per-rank numbers are machine integers (`array`), 8 bytes a rank.
"""

from __future__ import annotations

import json
import operator
import os
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kname._version import __version__
from kname.documents.build import graph_fields, profile_of_sites, ranked_kernels
from kname.documents.schema import (
    BY_RANK,
    CENSUS_SCHEMA,
    PROFILE_SCHEMA,
    RANKS,
    REPLAYED_AT,
    REPLAYED_UNSEEN,
    UNKNOWN_RANK,
    DocumentError,
)
from kname.documents.sources import SOURCES, add_lines, bounded_sources, keep_lines

_ZERO = bytes(8)  # one machine integer of 0, for array('q').frombytes
TOO_LARGE = "a launch count or GPU time is too large to add up (past 2**63-1, what 64 bits hold)"


class MixedKinds(DocumentError):
    """Documents of both schemas were given to one merge."""

    def __init__(self) -> None:
        super().__init__(
            "cannot merge a launch census (schema 1) with a GPU profile (schema 2); "
            "merge files of one kind"
        )


class _Site:
    """One merged site: library, earliest order, kernels summed, and per-rank numbers (one
    machine integer per rank slot, in the order ranks were first seen)."""

    __slots__ = ("gpu_ns", "kernels", "launches", "lib", "order", "replays", "unseen")

    def __init__(self, lib: str, order: int) -> None:
        self.lib = lib
        self.order = order
        self.kernels: dict[str, list[int]] = {}  # kernel -> [launches, gpu_ns] (profiles)
        self.launches = array("q")
        self.gpu_ns = array("q")
        # Graph work (schema.py): by the line that replayed it, and replayed unseen.
        self.replays: dict[str, list[int]] = {}
        self.unseen = [0, 0]


class Merge:
    """Documents of one schema, folded in one at a time; `result()` is the merged document."""

    def __init__(self) -> None:
        self.schema: int | None = None
        self.documents = 0
        self.processes = 0
        self.ranked = False  # an input recorded its rank (else the result has no rank table)
        self._records: list[dict[str, Any]] = []  # each slot's rank record
        self._slot_of: dict[int, int] = {}  # rank -> slot
        self._sites: dict[Any, _Site] = {}  # a profile's by name; a census's by (name, kernel, lib)
        self._unattributed: dict[str, list[int]] = {}
        self._sources: dict[str, dict[int, str]] = {}  # {path: {line number: text}} kept

    def add(self, document: Mapping[str, Any]) -> None:
        """Fold a valid document (schema.validate) in; DocumentError for one of another kind."""
        schema = document["schema"]
        if self.schema is None:
            self.schema = schema
        elif schema != self.schema:
            raise MixedKinds
        records = document.get(RANKS)
        self.ranked = self.ranked or records is not None
        slots = [self._slot(record) for record in records or (UNKNOWN_RANK,)]
        try:
            if schema == PROFILE_SCHEMA:
                self._add_profile(document, slots)
            else:
                self._add_census(document, slots)
        except OverflowError:  # a hostile count: past what 64 bits hold
            raise DocumentError(TOO_LARGE) from None
        keep_lines(self._sources, document.get(SOURCES, {}))
        self.documents += 1
        self.processes += document.get("processes", 1)

    def result(self) -> dict[str, Any]:
        """The merged document (schema.py), valid; DocumentError if nothing was added."""
        if self.schema is None:
            raise DocumentError("nothing to merge")
        by_rank = sorted(range(len(self._records)), key=lambda slot: self._records[slot]["rank"])
        arrange = _arranger(by_rank) if len(by_rank) > 1 else None
        if self.schema == PROFILE_SCHEMA:
            document = self._profile(arrange)
        else:
            document = self._census(arrange)
        if self.ranked:
            document[RANKS] = [dict(self._records[slot]) for slot in by_rank]
        sources = bounded_sources(self._sources)
        if sources:
            document[SOURCES] = sources
        return document

    # --- folding in --------------------------------------------------------------------------

    def _slot(self, record: Mapping[str, Any]) -> int:
        """The slot of `record`'s rank; of two records of one rank, the one first in a fixed
        order of records stands for it (so any grouping of inputs keeps the same one)."""
        slot = self._slot_of.get(record["rank"])
        if slot is None:
            slot = self._slot_of[record["rank"]] = len(self._records)
            self._records.append(dict(record))
        elif _record_key(record) < _record_key(self._records[slot]):
            self._records[slot] = dict(record)
        return slot

    def _add_profile(self, document: Mapping[str, Any], slots: list[int]) -> None:
        sites = self._sites
        one = slots[0] if len(slots) == 1 else -1
        for site in document["sites"]:
            name = site["name"]
            merged = sites.get(name)
            if merged is None:
                merged = sites[name] = _Site(site["lib"], site["order"])
            else:
                if merged.lib != site["lib"]:
                    merged.lib = ""
                if site["order"] < merged.order:
                    merged.order = site["order"]
            kernels = merged.kernels
            for kernel_name, kernel in site["kernels"].items():
                total = kernels.get(kernel_name)
                if total is None:
                    kernels[kernel_name] = [kernel["launches"], kernel["gpu_ns"]]
                else:
                    total[0] += kernel["launches"]
                    total[1] += kernel["gpu_ns"]
            if REPLAYED_AT in site or REPLAYED_UNSEEN in site:
                _add_graph_work(merged, site)
            launches, gpu_ns = merged.launches, merged.gpu_ns
            if len(launches) == one:  # the common case: this rank is the newest slot
                launches.append(site["launches"])
                gpu_ns.append(site["gpu_ns"])
            elif one >= 0:
                _add_at(launches, one, site["launches"])
                _add_at(gpu_ns, one, site["gpu_ns"])
            else:
                per_rank = site[BY_RANK]
                _add_each(launches, slots, per_rank["launches"])
                _add_each(gpu_ns, slots, per_rank["gpu_ns"])
        _add_kernels(self._unattributed, document["unattributed"]["kernels"])

    def _add_census(self, document: Mapping[str, Any], slots: list[int]) -> None:
        sites = self._sites
        one = slots[0] if len(slots) == 1 else -1
        for site in document["sites"]:
            key = (site["name"], site["kernel"], site["lib"])
            merged = sites.get(key)
            if merged is None:
                merged = sites[key] = _Site(site["lib"], site["order"])
            elif site["order"] < merged.order:
                merged.order = site["order"]
            if one >= 0:
                _add_at(merged.launches, one, site["launches"])
            else:
                _add_each(merged.launches, slots, site[BY_RANK]["launches"])

    def absorb(self, other: Merge) -> None:
        """Fold in what another Merge holds (one of a worker's share of the files), as if its
        documents had been added here."""
        if other.schema is None:
            return
        if self.schema is not None and other.schema != self.schema:
            raise MixedKinds
        self.schema = other.schema
        before = len(self._records)
        slots = [self._slot(record) for record in other._records]
        appended = slots == list(range(before, before + len(slots)))  # no rank in both
        for key, theirs in other._sites.items():
            mine = self._sites.get(key)
            if mine is None:
                mine = self._sites[key] = _Site(theirs.lib, theirs.order)
            else:
                if mine.lib != theirs.lib:
                    mine.lib = ""
                mine.order = min(mine.order, theirs.order)
            _add_kernels(mine.kernels, theirs.kernels)
            _add_kernels(mine.replays, theirs.replays)
            mine.unseen[0] += theirs.unseen[0]
            mine.unseen[1] += theirs.unseen[1]
            for values, added in ((mine.launches, theirs.launches), (mine.gpu_ns, theirs.gpu_ns)):
                if appended:  # machine integers copied whole, at C's speed
                    _pad(values, before)
                    values.extend(added)
                else:
                    _add_each(values, slots[: len(added)], added)
        _add_kernels(self._unattributed, other._unattributed)
        add_lines(self._sources, other._sources)
        self.ranked = self.ranked or other.ranked
        self.documents += other.documents
        self.processes += other.processes

    # --- the merged document -------------------------------------------------------------------

    def _profile(self, arrange: Callable[[array], list[int]] | None) -> dict[str, Any]:
        sites = []
        for name, merged in self._sites.items():
            launches, gpu_ns = _sums(merged.kernels)
            site = {
                "name": name,
                "kernel": "",
                "lib": merged.lib,
                "launches": launches,
                "gpu_ns": gpu_ns,
                "share": 0.0,
                "order": merged.order,
                "kernels": ranked_kernels(_as_counts(merged.kernels)),
            }
            site["kernel"] = next(iter(site["kernels"]), "")
            unseen = {"launches": merged.unseen[0], "gpu_ns": merged.unseen[1]}
            site |= graph_fields(_as_counts(merged.replays), unseen)
            if arrange is not None:
                site[BY_RANK] = {
                    "launches": arrange(merged.launches),
                    "gpu_ns": arrange(merged.gpu_ns),
                }
            sites.append(site)
        return profile_of_sites(sites, _as_counts(self._unattributed), self.processes)

    def _census(self, arrange: Callable[[array], list[int]] | None) -> dict[str, Any]:
        ranked = sorted(self._sites.items(), key=lambda item: (item[1].order, item[0]))
        total = sum(sum(merged.launches) for _, merged in ranked)
        sites = []
        for (name, kernel, lib), merged in ranked:
            launches = sum(merged.launches)
            site = {
                "name": name,
                "kernel": kernel,
                "lib": lib,
                "launches": launches,
                "share": round(launches / total, 6) if total else 0.0,
                "order": merged.order,
            }
            if arrange is not None:
                site[BY_RANK] = {"launches": arrange(merged.launches)}
            sites.append(site)
        document = {"kname": __version__, "schema": CENSUS_SCHEMA, "sites": sites}
        document["total_launches"] = total
        return document


def merge_documents(documents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One document from several of one schema (one per rank or process), each rank's numbers
    kept; DocumentError for none, or for documents of two kinds."""
    merge = Merge()
    for document in documents:
        merge.add(document)
    return merge.result()


def merge_files(
    paths: Sequence[str], load: Callable[[str], Mapping[str, Any]], workers: int | None = None
) -> dict[str, Any]:
    """The merged document of the files at `paths`, each read with `load` (which validates and
    raises DocumentError) and folded in before the next is read.

    With many files, `workers` processes (default: one per CPU, for PARALLEL_FILES files or
    more) each merge a share of them and this one merges their results: merging is
    associative, so the document is the same. `load` must then be a module-level function.
    """
    if workers is None:
        workers = workers_for(len(paths))
    if workers <= 1:
        return _merged(paths, load).result()
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Fork: the workers need nothing but this module, and start in a few ms each.
    context = multiprocessing.get_context("fork")
    shares = [paths[start::workers] for start in range(workers)]
    merge = Merge()
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        for partial in pool.map(_merged, shares, [load] * workers):
            try:
                merge.absorb(partial)
            except OverflowError:  # hostile counts: the shares' sums past what 64 bits hold
                raise DocumentError(TOO_LARGE) from None
    return merge.result()


PARALLEL_FILES = 32  # below this, one process merges faster than starting workers


def workers_for(files: int) -> int:
    """How many processes merge_files shares `files` files among by default."""
    import multiprocessing

    if files < PARALLEL_FILES or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, files // (PARALLEL_FILES // 2)))


def _merged(paths: Sequence[str], load: Callable[[str], Mapping[str, Any]]) -> Merge:
    """A Merge of the files at `paths`, read one at a time."""
    merge = Merge()
    for path in paths:
        document = load(path)
        try:
            merge.add(document)
        except MixedKinds:
            raise
        except DocumentError as exc:
            raise DocumentError(f"{path}: {exc}") from None
        del document  # only its sums are kept: the next file is read into its room
    return merge


def _sums(kernels: Mapping[str, list[int]]) -> tuple[int, int]:
    """(launches, gpu_ns) summed over [launches, gpu_ns] pairs."""
    return sum(k[0] for k in kernels.values()), sum(k[1] for k in kernels.values())


def _as_counts(kernels: Mapping[str, list[int]]) -> dict[str, dict[str, int]]:
    return {name: {"launches": k[0], "gpu_ns": k[1]} for name, k in kernels.items()}


def _add_kernels(into: dict[str, list[int]], kernels: Mapping[str, Any]) -> None:
    """Kernels ({name: {launches, gpu_ns}}, or [launches, gpu_ns] pairs) added into pairs."""
    for name, kernel in kernels.items():
        launches, gpu_ns = (
            kernel if isinstance(kernel, list) else (kernel["launches"], kernel["gpu_ns"])
        )
        total = into.get(name)
        if total is None:
            into[name] = [launches, gpu_ns]
        else:
            total[0] += launches
            total[1] += gpu_ns


def _add_graph_work(merged: _Site, site: Mapping[str, Any]) -> None:
    """A profile site's graph work (replayed_at, replayed_unseen) added to `merged`'s."""
    _add_kernels(merged.replays, site.get(REPLAYED_AT, {}))
    unseen = site.get(REPLAYED_UNSEEN)
    if unseen:
        merged.unseen[0] += unseen["launches"]
        merged.unseen[1] += unseen["gpu_ns"]


def _pad(values: array, size: int) -> None:
    """Zeros added to `values` up to `size` (the slots of ranks where the site did not run)."""
    missing = size - len(values)
    if missing > 0:
        values.frombytes(_ZERO * missing)


def _add_at(values: array, slot: int, value: int) -> None:
    """values[slot] += value, with zeros added first for the slots before it not yet there."""
    _pad(values, slot + 1)
    values[slot] += value


def _add_each(values: array, slots: list[int], per_rank: Sequence[int]) -> None:
    """A merged input's per-rank values, each added at the slot of its rank."""
    for slot, value in zip(slots, per_rank, strict=True):
        _add_at(values, slot, value)


def _arranger(order: list[int]) -> Callable[[array], list[int]]:
    """A function giving a site's per-rank values as a list in rank order (slots as `order`
    lists them), with 0 for the ranks where the site never appeared."""
    pick = operator.itemgetter(*order)
    size = len(order)

    def arrange(values: array) -> list[int]:
        _pad(values, size)
        return list(pick(values))

    return arrange


def _record_key(record: Mapping[str, Any]) -> str:
    """A total order of rank records, by their whole content."""
    return json.dumps(record, sort_keys=True, default=str)
