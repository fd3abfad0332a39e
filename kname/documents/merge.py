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
site's per-rank numbers are machine integers (`array`), 8 bytes a rank it ran on: a site seen on
few of many ranks keeps those ranks alone (and the merged document's `by_rank` lists are
spread.RankValues, which store them alone too), so memory grows with the sites read, not with
ranks times sites.
"""

from __future__ import annotations

import contextlib
import gc
import json
import operator
import os
import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from kname._version import __version__
from kname.documents.backward_lines import backward_fields, summed_backward_fields
from kname.documents.build import (
    graph_fields,
    launch_time_fields,
    profile_of_sites,
    ranked_kernels,
)
from kname.documents.collectives import is_collective
from kname.documents.memory import MemoryMerge
from kname.documents.schema import (
    BY_RANK,
    CENSUS_SCHEMA,
    COLLECTIVE_NS,
    PROFILE_SCHEMA,
    RANKS,
    REPLAYED_AT,
    REPLAYED_UNSEEN,
    SITE_FIELDS,
    UNKNOWN_RANK,
    DocumentError,
)
from kname.documents.sources import SOURCES, add_lines, bounded_sources, keep_lines
from kname.documents.spread import RankValues
from kname.documents.verdict import LAUNCH_TIMES, site_times

# A profile site's fields a merge folds in, as a tuple; a kernel's counts, as a pair.
_PROFILE_FOLDED = operator.itemgetter("name", "lib", "order", "launches", "gpu_ns", "kernels")
_KERNEL_COUNTS = operator.itemgetter("launches", "gpu_ns")
TOO_LARGE = "a launch count or GPU time is too large to add up (past 2**63-1, what 64 bits hold)"


class MixedKinds(DocumentError):
    """Documents of both schemas were given to one merge."""

    def __init__(self) -> None:
        super().__init__(
            "cannot merge a launch census (schema 1) with a GPU profile (schema 2); "
            "merge files of one kind"
        )


class _Site:
    """One merged site: library, earliest order, kernels summed, and its numbers on the rank
    slots it ran on (slots are numbered in the order ranks were first seen), in `columns` of
    machine integers: launches, and a profile's GPU time; and where the site has NCCL kernels
    (`collectives`), a third: their GPU time (collectives.py), added when the first is seen
    (8 bytes a rank for the few lines that call collectives, not for every line).

    Dense while the slots it ran on are at least half of a run of slots from `start` (the
    slots between hold 0); else sparse: `slots` lists them, ascending, with a value in each
    column for each. A site seen on few of many ranks takes room for those alone.
    """

    __slots__ = (
        "backward", "collectives", "columns", "kernels", "launch_times", "lib", "next_slot",
        "order", "replays", "slots", "start", "unseen",
    )  # fmt: skip

    def __init__(self, lib: str, order: int, columns: int, slot: int) -> None:
        self.lib = lib
        self.order = order
        self.kernels: dict[str, list[int]] = {}  # kernel -> [launches, gpu_ns] (profiles)
        self.columns = tuple(array("q") for _ in range(columns))
        self.start = self.next_slot = max(slot, 0)  # dense: the slot after the run; sparse: -2
        self.slots: array | None = None
        # Graph work (schema.py): by the line that replayed it, and replayed unseen.
        self.replays: dict[str, list[int]] = {}
        self.unseen = [0, 0]
        # Backward per forward line (backward_lines.py): its fields summed, None while absent.
        self.backward: dict[str, int] | None = None
        self.launch_times = [0, 0, 0]  # calls, cpu_ns, idle_ns (schema.py's launch_times)
        self.collectives: tuple[str, ...] = ()  # its kernels that are NCCL's (collectives.py)


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
        self._memory = MemoryMerge()  # memory per line (kname profile --memory), where measured

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
                self._memory.add(document)
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
        arrange = _Arranger(by_rank) if len(by_rank) > 1 else None
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
        sites, get = self._sites, self._sites.get
        one = slots[0] if len(slots) == 1 else -1
        own_fields = len(SITE_FIELDS[PROFILE_SCHEMA])
        # One loop, its fields read by itemgetter: 5 million sites in a merge of 1,024 rank files.
        for site in document["sites"]:
            name, lib, order, launches, gpu_ns, site_kernels = _PROFILE_FOLDED(site)
            merged = get(name)
            if merged is None:
                merged = sites[name] = _Site(lib, order, 2, one)
            else:
                if merged.lib != lib:
                    merged.lib = ""
                if order < merged.order:
                    merged.order = order
            kernels = merged.kernels
            for kernel_name, kernel in site_kernels.items():
                total = kernels.get(kernel_name)
                if total is None:
                    kernels[kernel_name] = list(_KERNEL_COUNTS(kernel))
                    if is_collective(kernel_name):
                        _add_collective(merged, kernel_name)
                else:
                    launched, timed = _KERNEL_COUNTS(kernel)
                    total[0] += launched
                    total[1] += timed
            if len(site) != own_fields:  # optional fields: cheap test first
                self._add_optional(merged, site)
            if merged.next_slot == one:  # the common case: this rank is the newest slot
                columns = merged.columns
                columns[0].append(launches)
                columns[1].append(gpu_ns)
                if merged.collectives:
                    columns[2].append(_collective_ns(merged, site_kernels))
                merged.next_slot = one + 1
            elif one >= 0:
                numbers: tuple[int, ...] = (launches, gpu_ns)
                if merged.collectives:
                    numbers += (_collective_ns(merged, site_kernels),)
                _put(merged, one, numbers)
            else:
                per_rank = site[BY_RANK]
                by_rank = (per_rank["launches"], per_rank["gpu_ns"])
                if merged.collectives:  # 0 where a file written before the field has none
                    by_rank += (per_rank.get(COLLECTIVE_NS) or [0] * len(slots),)
                _put_each(merged, slots, by_rank)
        _add_kernels(self._unattributed, document["unattributed"]["kernels"])

    @staticmethod
    def _add_optional(merged: _Site, site: Mapping[str, Any]) -> None:
        """A profile site's optional fields (graph work, backward, launch times) added."""
        if REPLAYED_AT in site or REPLAYED_UNSEEN in site:
            _add_graph_work(merged, site)
        _add_backward(merged, backward_fields(site))
        if LAUNCH_TIMES in site:
            _add_launch_times(merged.launch_times, site_times(site))

    def _add_census(self, document: Mapping[str, Any], slots: list[int]) -> None:
        sites = self._sites
        one = slots[0] if len(slots) == 1 else -1
        for site in document["sites"]:
            key = (site["name"], site["kernel"], site["lib"])
            merged = sites.get(key)
            if merged is None:
                merged = sites[key] = _Site(site["lib"], site["order"], 1, one)
            elif site["order"] < merged.order:
                merged.order = site["order"]
            if merged.next_slot == one:
                merged.columns[0].append(site["launches"])
                merged.next_slot = one + 1
            elif one >= 0:
                _put(merged, one, (site["launches"],))
            else:
                _put_each(merged, slots, (site[BY_RANK]["launches"],))

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
                mine = self._sites[key] = _Site(theirs.lib, theirs.order, len(theirs.columns), 0)
            else:
                if mine.lib != theirs.lib:
                    mine.lib = ""
                mine.order = min(mine.order, theirs.order)
            _add_kernels(mine.kernels, theirs.kernels)
            for name in theirs.collectives:
                if name not in mine.collectives:
                    _add_collective(mine, name)
            if theirs.columns and len(theirs.columns) < len(mine.columns):
                _add_collective_column(theirs)  # zeros: no NCCL kernel in their ranks
            _add_kernels(mine.replays, theirs.replays)
            mine.unseen[0] += theirs.unseen[0]
            mine.unseen[1] += theirs.unseen[1]
            if theirs.backward:
                _add_backward(mine, theirs.backward)
            _add_launch_times(mine.launch_times, theirs.launch_times)
            if appended and theirs.slots is None and _extends(mine, before + theirs.start, theirs):
                continue  # machine integers copied whole, at C's speed
            for slot, numbers in _entries(theirs):
                _put(mine, slots[slot], numbers)
        _add_kernels(self._unattributed, other._unattributed)
        self._memory.absorb(other._memory)
        add_lines(self._sources, other._sources)
        self.ranked = self.ranked or other.ranked
        self.documents += other.documents
        self.processes += other.processes

    # --- the merged document -------------------------------------------------------------------

    def _profile(self, arrange: _Arranger | None) -> dict[str, Any]:
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
            if merged.backward:
                site |= merged.backward
            site |= launch_time_fields(*merged.launch_times)
            if arrange is not None:
                # The collective column only where the site has NCCL kernels.
                launches_by_rank, gpu_ns_by_rank, *collective = arrange(
                    merged, 3 if merged.collectives else 2
                )
                site[BY_RANK] = {"launches": launches_by_rank, "gpu_ns": gpu_ns_by_rank}
                if collective:
                    site[BY_RANK][COLLECTIVE_NS] = collective[0]
            sites.append(site)
        document = profile_of_sites(sites, _as_counts(self._unattributed), self.processes)
        return self._memory.into(document)

    def _census(self, arrange: _Arranger | None) -> dict[str, Any]:
        ranked = sorted(self._sites.items(), key=lambda item: (item[1].order, item[0]))
        total = sum(sum(merged.columns[0]) for _, merged in ranked)
        sites = []
        for (name, kernel, lib), merged in ranked:
            launches = sum(merged.columns[0])
            site = {
                "name": name,
                "kernel": kernel,
                "lib": lib,
                "launches": launches,
                "share": round(launches / total, 6) if total else 0.0,
                "order": merged.order,
            }
            if arrange is not None:
                site[BY_RANK] = {"launches": arrange(merged)[0]}
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
    Files are folded in in the order of their names, numbers by value (rank2 before rank10).
    """
    if workers is None:
        workers = workers_for(len(paths))
    # Ranks first seen in rank order, as rank files are named: then the merged document's
    # per-rank values are the merge's own arrays, copied whole, not each picked (0.3 s of the
    # 1,024 files' merge, the serial part).
    paths = sorted(paths, key=_numbers_by_value)
    with _cyclic_gc_paused():
        if workers <= 1 or not paths:
            return _merged(paths, load).result()
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Fork: the workers need nothing but this module, and start in a few ms each.
        context = multiprocessing.get_context("fork")
        size = -(-len(paths) // workers)  # a run of files each, in order (ceiling division)
        shares = [paths[start : start + size] for start in range(0, len(paths), size)]
        workers = len(shares)
        merge = Merge()
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_keep_freed_memory)
        with pool:
            for partial in pool.map(_merged, shares, [load] * workers):
                try:
                    merge.absorb(partial)
                except OverflowError:  # hostile counts: the shares' sums past what 64 bits hold
                    raise DocumentError(TOO_LARGE) from None
        return merge.result()


def _numbers_by_value(path: str) -> list[Any]:
    """A file name's sort key: its runs of digits compared as numbers (by their length without
    leading zeros, then their digits: no int() of thousands of digits)."""
    parts = _DIGITS.split(path)  # text, digits, text, ...: alike at each index
    for index in range(1, len(parts), 2):
        digits = parts[index].lstrip("0")
        parts[index] = (len(digits), digits)
    return parts


_DIGITS = re.compile(r"(\d+)")
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
    with _cyclic_gc_paused():
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


# glibc's mallopt parameters (malloc.h), and what a merge worker sets them to.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEPT_FREE, _FROM_THE_HEAP = 16 * 2**20, 32 * 2**20  # a few files' texts; the most glibc takes


def _keep_freed_memory() -> None:
    """In a merge worker (a process of its own, that exits when done): glibc's malloc keeps the
    memory a file freed for the next, rather than giving it back to the system and faulting fresh
    pages in again (a rank file's text, 1.7 MB twice: 800 of its 1,600 page faults; a worker's
    time 15% less on the development machine). Nothing where the C library has no mallopt."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):  # no ctypes, or not glibc: left as it is
        return
    mallopt(_M_TRIM_THRESHOLD, _KEPT_FREE)
    mallopt(_M_MMAP_THRESHOLD, _FROM_THE_HEAP)


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off meanwhile (as it was, after). A parsed document is
    a tree, freed by reference counts alone; the collector's passes, run every few hundred
    objects it makes (some 100,000 a rank file), took a third of the time JSON took to parse."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _add_collective(site: _Site, kernel: str) -> None:
    """An NCCL kernel of `site` first seen: named, with the column of its time on each rank."""
    site.collectives += (kernel,)
    _add_collective_column(site)


def _add_collective_column(site: _Site) -> None:
    """A profile site's third column, of zeros (the ranks before held no NCCL kernel here)."""
    if len(site.columns) == 2:
        site.columns += (_zeros(len(site.columns[0])),)


def _collective_ns(merged: _Site, kernels: Mapping[str, Mapping[str, int]]) -> int:
    """The GPU time of a document's site (its `kernels`) in the merged site's NCCL kernels."""
    names = merged.collectives
    if len(names) == 1:  # most lines call one collective: no generator a rank
        kernel = kernels.get(names[0])
        return 0 if kernel is None else kernel["gpu_ns"]
    return sum(kernels[name]["gpu_ns"] for name in names if name in kernels)


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


def _add_backward(merged: _Site, fields: Mapping[str, int]) -> None:
    """A profile site's backward per forward line fields added to `merged`'s."""
    if not fields:
        return
    if merged.backward is None:
        merged.backward = {}
    merged.backward.update(summed_backward_fields([merged.backward, fields]))


def _add_launch_times(merged: list[int], times: Sequence[int]) -> None:
    """A site's launch times (calls, cpu_ns, idle_ns) added to `merged`'s."""
    for index, value in enumerate(times):
        merged[index] += value


def _zeros(count: int) -> array:
    return array("q", bytes(8 * count))


def _pad(values: array, size: int) -> None:
    """Zeros added to `values` up to `size` (the slots of ranks where the site did not run)."""
    missing = size - len(values)
    if missing > 0:
        values.frombytes(bytes(8 * missing))


def _put(site: _Site, slot: int, numbers: tuple[int, ...]) -> None:
    """`numbers` (one per column) added to `site`'s at `slot`."""
    columns = site.columns
    if site.slots is None:
        count = len(columns[0])
        if not count:
            site.start = slot
        index = slot - site.start
        if not 0 <= index < count:
            low, high = min(site.start, slot), max(site.start + count, slot + 1)
            if high - low > 2 * (count + 1):  # under half the run would be held: sparse
                site.slots = array("q", range(site.start, site.start + count))
                site.next_slot = -2
                return _put(site, slot, numbers)
            if index < 0:
                for column in columns:
                    column[0:0] = _zeros(-index)
                site.start, index = slot, 0
            for column in columns:
                _pad(column, index + 1)
            site.next_slot = site.start + len(columns[0])
        for column, number in zip(columns, numbers, strict=True):
            column[index] += number
        return None
    slots = site.slots
    found = len(slots) if not slots or slot > slots[-1] else bisect_left(slots, slot)
    if found == len(slots) or slots[found] != slot:
        slots.insert(found, slot)
        for column in columns:
            column.insert(found, 0)
    for column, number in zip(columns, numbers, strict=True):
        column[found] += number
    return None


def _put_each(site: _Site, slots: list[int], per_rank: tuple[Sequence[int], ...]) -> None:
    """A merged input's per-rank values (a sequence per column), each added at its rank's slot."""
    stored = [c.stored() if isinstance(c, RankValues) else (None, c) for c in per_rank]
    positions = stored[0][0]
    if positions is not None and all(at is positions for at, _ in stored):  # sparse alike
        values = [column for _, column in stored]
        pairs: Iterator[tuple[int, tuple[int, ...]]] = zip(
            positions, zip(*values, strict=True), strict=True
        )
    else:
        pairs = enumerate(zip(*per_rank, strict=True))
    for position, numbers in pairs:
        if any(numbers):
            _put(site, slots[position], numbers)


def _entries(site: _Site) -> Iterator[tuple[int, tuple[int, ...]]]:
    """(slot, numbers) for each slot `site` holds."""
    slots = site.slots
    if slots is None:
        slots = range(site.start, site.start + len(site.columns[0]))
    return zip(slots, zip(*site.columns, strict=True), strict=True)


def _extends(site: _Site, slot: int, run: _Site) -> bool:
    """Add `run`'s dense values at the slots from `slot` on when `site` is dense and they come
    after its own, at C's speed; False (nothing done) otherwise."""
    count, added = len(site.columns[0]), len(run.columns[0])
    if site.slots is not None or (count and slot < site.start + count):
        return False
    if not count:
        site.start = slot
    elif slot + added - site.start > 2 * (count + added):  # mostly zeros between: sparse
        return False
    for column, values in zip(site.columns, run.columns, strict=True):
        _pad(column, slot - site.start)
        column.extend(values)
    site.next_slot = site.start + len(site.columns[0])
    return True


class _Arranger:
    """A site's per-rank values as RankValues in rank order (slots as `order` lists them),
    with 0 for the ranks where the site never appeared."""

    def __init__(self, order: list[int]) -> None:
        self.size = len(order)
        self.pick = None if order == sorted(order) else operator.itemgetter(*order)
        self.position_of = [0] * self.size
        for position, slot in enumerate(order):
            self.position_of[slot] = position

    def __call__(self, site: _Site, count: int = 1) -> tuple[RankValues, ...]:
        """Its first `count` columns."""
        size, columns = self.size, site.columns[:count]
        if site.slots is None and 2 * len(columns[0]) >= size:  # most ranks: a value for each
            _widen(site, size)
            pick = self.pick
            return tuple(
                RankValues(array("q", column if pick is None else pick(column)), size)
                for column in columns
            )
        # The slots it ran on, in rank order: mapped and sorted with C methods, no Python loop.
        slots = site.slots
        if slots is None:
            slots = range(site.start, site.start + len(columns[0]))
        positions = list(map(self.position_of.__getitem__, slots))
        order = sorted(range(len(positions)), key=positions.__getitem__)
        at, *values = (array("q", map(v.__getitem__, order)) for v in (positions, *columns))
        if 2 * len(at) < size:
            return tuple(RankValues(column, size, at) for column in values)
        dense = [_zeros(size) for _ in columns]
        for column, stored in zip(dense, values, strict=True):
            for position, value in zip(at, stored, strict=True):
                column[position] = value
        return tuple(RankValues(column, size) for column in dense)


def _widen(site: _Site, size: int) -> None:
    """A dense site's columns made to hold every one of `size` slots (zeros where it never ran)."""
    for column in site.columns:
        column[0:0] = _zeros(site.start)
        _pad(column, size)
    site.start, site.next_slot = 0, size


def _record_key(record: Mapping[str, Any]) -> str:
    """A total order of rank records, by their whole content."""
    return json.dumps(record, sort_keys=True, default=str)
