"""A profiling session in this process: start, stop, and the outputs.

    session = ProfileSession()
    session.start()           # False, after one line on stderr, when CUPTI cannot be used
    ...                       # the program's GPU work
    session.stop()            # flushes CUPTI's buffers: every finished kernel is in
    print(session.table())
    session.save("profile.json"); session.save_trace("trace.json"); session.save_html("p.html")

It is also a context manager (what `with kname.profile() as p:` returns). The outputs are
written atomically. write_at_exit() arranges for stop() and the outputs at interpreter exit,
also when the program ends through an exception or sys.exit, or is ended by a SIGTERM it leaves
at its default action (it still dies of it). flush_every(seconds) also rewrites the JSON and
the page while the program runs, from the totals so far: a job killed outright (a scheduler's
SIGKILL after its grace period) leaves the profile of its last flush.

A document says who made it (kname.ranks.meta): the process's rank in its job, host, and GPU.

CUPTI takes one subscriber per process, so one session collects at a time. A child forked from
the process inherits the session but not CUPTI's collection: there it stops and writes nothing
(the parent reports what it collected).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

from kname import callsite, naming
from kname._locks import new_lock, reset_in_child
from kname._sigterm import at_exit
from kname._warnings import warn_once
from kname.config import KNAME_PROFILE_HTML, KNAME_PROFILE_TRACE, KNAME_REPORT
from kname.documents.build import profile_document
from kname.documents.files import write_atomically
from kname.documents.memory import with_memory
from kname.documents.owner import Output, OutputName, claim_each, write_outputs
from kname.documents.pages.profile import render_profile_page
from kname.documents.run_facts import run_facts
from kname.documents.schema import render_json
from kname.documents.sources import with_sources
from kname.documents.tables import render_profile_table
from kname.documents.text import os_text
from kname.profiling import backward, wrappers
from kname.profiling.capture import LaunchCapture, site_of_frame
from kname.profiling.join import Join
from kname.profiling.memory import Ledger
from kname.profiling.memory_hooks import PoolHooks
from kname.profiling.memory_join import MemoryCalls
from kname.profiling.native_join import NativeJoin
from kname.profiling.native_trace import NativeTrace, merged
from kname.profiling.records import MAX_LOGGED, StreamLog, Streams, streams_to_json
from kname.profiling.trace import trace_json
from kname.ranks import find_rank, meta, visible_device

# Each output at exit: the variable and the `kname profile` option that name it, what it is.
_EXIT_OUTPUTS = {
    "json": OutputName(KNAME_REPORT, "--json", "profile"),
    "trace": OutputName(KNAME_PROFILE_TRACE, "--trace", "trace"),
    "html": OutputName(KNAME_PROFILE_HTML, "--html", "page"),
}

Collector = Any  # start() -> bool, stop(), started: bool (CuptiCollector or a stand-in)

_collecting: ProfileSession | None = None  # the session CUPTI feeds in this process
_collecting_lock = new_lock()

# Whether a launch made now is in the profile, for a program that counts its own work against a
# window (tests/gpu/attach_demo.py): CERTAIN from the end of start() to the beginning of stop();
# POSSIBLE from just before CUPTI is asked to start until stop() has ended (the callbacks, the
# records and the flush each stop at their own moment); IDLE else. With the count of changes:
# read before and after some work, an equal pair says the phase held throughout.
IDLE, POSSIBLE, CERTAIN = 0, 1, 2
_phase = (IDLE, 0)


def collecting_phase() -> tuple[int, int]:
    """(IDLE, POSSIBLE or CERTAIN, the number of changes so far): one read, never torn."""
    return _phase


def _set_phase(phase: int) -> None:
    global _phase
    _phase = (phase, _phase[1] + 1)  # one assignment: a reader sees the old pair or the new


def _nothing_collects_in_a_child() -> None:
    """A forked child's launches are plain again: CUPTI does not follow the fork."""
    global _collecting
    if _phase[0] != IDLE:
        _set_phase(IDLE)
    if _collecting is not None:
        if _collecting.wrappers_out:  # the child's launches named by its wrappers again
            _collecting.wrappers_out = False
            wrappers.put_back()
        _collecting = None
        callsite.use_site_calls(None)


reset_in_child(_nothing_collects_in_a_child)


class ProfileSession:
    """Launch capture, the join, an optional stream log, and a collector that feeds them.

    While it collects, kname's library launch wrappers are out of the call path where nothing
    reads what they add (wrappers.py), unless `keep_wrappers`."""

    def __init__(
        self,
        keep_streams: bool = False,
        collector: Callable[[LaunchCapture, Join, StreamLog | None], Collector] | None = None,
        max_records: int = MAX_LOGGED,
        memory: bool = False,
        verdict: bool = False,
        keep_wrappers: bool = False,
    ) -> None:
        self.join: Join | NativeJoin = Join()
        self.join.launch_times.on = verdict  # the verdict's launch times, only where asked for
        self.log = StreamLog(max_records) if keep_streams else None
        # --memory: the memory calls kept apart from the launches (memory_join), and the pools'
        # hooks (memory_hooks); None without it.
        self.memory = MemoryCalls(self.join) if memory else None
        self.pools = PoolHooks() if memory else None
        self.capture = LaunchCapture(self.memory or self.join, self.log)
        if collector is None:
            from kname.profiling.cupti_collector import CuptiCollector as collector
        more: dict[str, Any] = {"memory": self.memory} if memory else {}
        if verdict:  # the native callback times outermost launch calls (launch_times.py)
            more["time_outer_calls"] = True
        self.collector = collector(self.capture, self.join, self.log, **more)
        # A kname lock: freed in a forked child, and re-entrant for a SIGTERM handler that
        # stops the session on the thread that was inside start() or stop().
        self._lock = new_lock()
        self._pid = os.getpid()  # a forked child inherits the session, not CUPTI's collection
        self._exit_outputs: dict[str, Output] = {}
        self._device: str | None = None  # the GPU, once known
        self._flushing = threading.Event()  # set: the flush thread stops
        self._flusher: threading.Thread | None = None
        self._started_once = False
        # Why CUPTI never collected for this session (None: it did, or it was not started):
        # the table and the exit then say that instead of a profile of no launch.
        self.not_collected: str | None = None
        # An on-demand window's bounds (ondemand.py): kept in this rank's record of the document.
        self.window: dict[str, Any] | None = None
        # kname's library launch wrappers left in the call path while collecting, where they
        # could go (wrappers.py); and whether this session took them out.
        self.keep_wrappers = keep_wrappers
        self.wrappers_out = False

    def start(self) -> bool:
        """Start collecting; False when CUPTI cannot be used (the program runs on)."""
        global _collecting
        with self._lock, _collecting_lock:
            if self.collector.started:
                return True
            if _collecting is not None and _collecting.collecting:
                warn_once(
                    "profile:second-session",
                    "profile: another kname profile session is collecting in this process "
                    "(KNAME_MODE=profile or kname.profile()); CUPTI takes one, so this one "
                    "collects nothing",
                )
                self._not_collecting("another kname profile session is collecting in this process")
                return False
            _set_phase(POSSIBLE)  # before CUPTI is asked: its callbacks may come at once
            if not self.collector.start():
                _set_phase(IDLE)
                why = getattr(self.collector, "not_started", None)
                self._not_collecting(why or "CUPTI could not start")
                return False
            self._started_once, self.not_collected = True, None
            # The collector may keep the totals elsewhere (the native recorder's join, in C).
            self.join = getattr(self.collector, "totals", self.join)
            _collecting = self
            external_calls = getattr(self.collector, "external_calls", None)
            calls = external_calls() if external_calls is not None else None
            if calls is not None:
                self.capture.tag_with(*calls)
            # From now on the launches kname wraps hand their site to the capture, and backward
            # passes are named for the launches autograd makes on its own threads.
            callsite.use_site_calls(self.capture.site_calls)
            backward.collect(site_of_frame)
            if not self.keep_wrappers and calls is None:  # the wrappers push the tags
                native = getattr(self.collector, "activity_reader", "") == "native"
                self.wrappers_out = wrappers.take_out(native)
            if self.pools is not None:
                self.pools.start()
            _set_phase(CERTAIN)
            return True

    def _not_collecting(self, reason: str) -> None:
        if not self._started_once:
            self.not_collected = reason

    def stop(self) -> None:
        """Stop collecting; what finished on the GPU so far is in the totals."""
        global _collecting
        if os.getpid() != self._pid:
            return  # a forked child: CUPTI does not collect here, nothing to flush
        with self._lock, _collecting_lock:
            ours = _collecting is self
            if ours:
                _set_phase(POSSIBLE)  # before anything stops: some launches now are recorded
                callsite.use_site_calls(None)  # before the flush: no launch is tagged after it
                backward.collect(None)
                _collecting = None
            if self.wrappers_out:
                self.wrappers_out = False
                wrappers.put_back()
            if self.pools is not None:
                self.pools.stop()
            self.collector.stop()
            if ours:
                _set_phase(IDLE)  # CUPTI stopped and flushed: no launch from now is recorded

    def detach(self) -> bool:
        """After stop(): CUPTI detached from the process at the next CUDA API call, so launches
        cost what they did before start() (an on-demand window's end); False where it cannot."""
        with self._lock:
            finalize = getattr(self.collector, "finalize_later", None)
            if os.getpid() != self._pid or finalize is None or self.collector.started:
                return False
            return bool(finalize())

    def __enter__(self) -> ProfileSession:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def collecting(self) -> bool:
        """Whether CUPTI is feeding this session now."""
        return bool(self.collector.started)

    def document(self) -> dict[str, Any]:
        """The census document of schema 2 (see kname.documents.schema), with who made it and
        the source of its sites' lines."""
        return with_sources(self._totals(), naming.shown_files())

    def _totals(self) -> dict[str, Any]:
        record = meta(find_rank(), device=self.device()) | run_facts()
        if self.window is not None:
            record["window"] = dict(self.window)
        return with_memory(profile_document(self.join.profile(), ranks=record), self.ledgers())

    def ledgers(self) -> dict[str, Ledger]:
        """With memory=True: {view: its Ledger}, the driver's views and the pools' (each view
        that saw an allocation); else empty."""
        views = dict(self.memory.ledgers) if self.memory is not None else {}
        if self.pools is None:
            return views
        self.pools.settle()  # torch's events wait for their sizes
        return views | self.pools.ledgers

    def device(self) -> str | None:
        """This process's GPU as CUDA_VISIBLE_DEVICES names it (or its ordinal where that is
        not set): the one that variable leaves, else the device of the calling thread's CUDA
        context, if the collector can tell; None where neither says."""
        if self._device is None:
            ordinal = getattr(self.collector, "current_device", lambda: None)()
            self._device = visible_device(ordinal=ordinal)
        return self._device

    @property
    def sites(self) -> list[dict[str, Any]]:
        """Every call site, most GPU time first, as in the document."""
        return self._totals()["sites"]

    def table(self, top: int | None = None, title: str = "kname profile") -> str:
        """The ranked table, `top` sites at most, under `title`; one line instead where CUPTI
        never collected."""
        if self.not_collected is not None:
            return f"kname profile: no GPU time was collected ({self.not_collected})\n"
        return render_profile_table(self._totals(), top=top, title=title)

    def process_table(self, top: int | None = None) -> str:
        """The table printed at exit and for `kname attach`, saying whose it is: `kname profile
        of process 4242 (rank 1 of 2): ...`, as the census's table at exit does."""
        # A program and its children share one stderr: each table names its process.
        return self.table(top, title=f"kname profile of process {os.getpid()}")

    def streams(self, **meta: Any) -> Streams:
        """The recorded streams (needs keep_streams=True), with facts about the run."""
        if self.log is None:
            raise ValueError("this session keeps no streams: ProfileSession(keep_streams=True)")
        meta = _run_facts(meta)
        streams = self.log.streams(self.capture.external_sites, **meta)
        native = self._native_trace()
        return streams if native is None else merged(streams, native.streams())

    def save(self, path: str | os.PathLike) -> None:
        """The document as JSON."""
        write_atomically(os.fspath(path), self._json_text())

    def save_trace(self, path: str | os.PathLike) -> None:
        """The Chrome trace-event file (needs keep_streams=True)."""
        write_atomically(os.fspath(path), self._trace_text())

    def save_html(self, path: str | os.PathLike) -> None:
        """The self-contained HTML page."""
        write_atomically(os.fspath(path), self._page_text())

    def _json_text(self) -> str:
        return render_json(self.document())

    def _trace_text(self) -> str:
        native = self._native_trace()
        if native is not None and self.log is not None and not self.log.kept:
            text, dropped = native.trace_json(_run_facts({})), native.counts()["dropped"]
        else:
            streams = self.streams()  # the Python path, or earlier runs' records in the log
            text, dropped = trace_json(streams), streams.meta["dropped_records"]
        if dropped:
            warn_once(
                "profile:trace-cap",
                f"profile: the trace keeps at most {self._trace_cap()} records (launch calls, "
                f"GPU records, graph node events; KNAME_PROFILE_TRACE_MAX); {dropped} later ones "
                "are not in it",
            )
        return text

    def _native_trace(self) -> NativeTrace | None:
        """The trace the native recorder keeps in C, where it keeps one."""
        return getattr(self.collector, "trace", None)

    def _trace_cap(self) -> int:
        return self.log.max_records if self.log is not None else MAX_LOGGED

    def _page_text(self) -> str:
        return render_profile_page(self.document())

    def save_streams(self, path: str | os.PathLike, **meta: Any) -> None:
        """The raw streams as JSON, to replay without a GPU (needs keep_streams=True)."""
        write_atomically(os.fspath(path), streams_to_json(self.streams(**meta)))

    def write_at_exit(
        self,
        table: IO[str] | None = None,
        json: str | None = None,
        trace: str | None = None,
        html: str | None = None,
        top: int | None = None,
        print_table: bool = True,
        only_if_launched: bool = False,
    ) -> None:
        """At interpreter exit (or a SIGTERM left at its default action): stop, print the table
        on `table` (default stderr), write files; with `only_if_launched`, none of that when the
        profile has no launch (a helper process beneath the one that owns the outputs).

        The files are claimed now (documents/owner.py): paths are made absolute (the program
        may change directory before it exits), a process beneath the one that owns the outputs
        writes its own beside them, and a file another process writes meanwhile is not replaced.
        """
        first = not self._exit_outputs
        paths = {"json": json, "trace": trace, "html": html}
        self._exit_paths = [path for path in paths.values() if path]  # as the user named them
        self._exit_outputs = claim_each(paths, _EXIT_OUTPUTS)
        self._exit_table = table if print_table else None
        self._exit_print = print_table
        self._exit_top = top
        self._exit_if_launched = only_if_launched
        if first:
            # atexit runs after an uncaught exception's traceback and after sys.exit(); a
            # SIGTERM left at its default action skips atexit, so the writers run there too.
            at_exit(self._at_exit)

    def _launched(self) -> bool:
        try:
            return bool(self._totals()["total_launches"])
        except Exception:  # at exit: write what can be written, as before
            return True

    def cancel_exit_outputs(self) -> None:
        """Nothing at exit after all: no table, no file (write_at_exit undone)."""
        self._exit_outputs = {}
        self._exit_print = False
        self._flushing.set()

    def flush_every(self, seconds: float) -> None:
        """Every `seconds`, while the program runs, rewrite the JSON and the page that
        write_at_exit() set up, from the totals so far (each file replaced whole); at exit
        they are written once more, with everything. The trace is written at exit only."""
        if self._flusher is not None:
            return
        self._flusher = threading.Thread(
            target=self._flush_loop, args=(seconds,), name="kname-profile-flush", daemon=True
        )
        self._flusher.start()

    def flush(self) -> None:
        """Write the JSON and the page now, from what the GPU finished so far."""
        # The session's lock: a flush and stop() (at exit, on SIGTERM) take turns, so the
        # exit's write is the last and CUPTI is never flushed from two threads at once.
        with self._lock:
            if self._flushing.is_set() or os.getpid() != self._pid or self.not_collected:
                return
            flush = getattr(self.collector, "flush", None)
            if flush is not None and self.collecting:
                flush()  # CUPTI's buffers so far to the join
            if not self._exit_if_launched or self._launched():
                self._write_outputs(("json", "html"))

    def _flush_loop(self, seconds: float) -> None:
        while not self._flushing.wait(seconds):
            try:
                self.flush()
            except Exception as exc:  # the program runs on; the exit writes again
                warn_once("profile:flush", f"profile: a flush failed ({type(exc).__name__}: {exc})")

    def _at_exit(self) -> None:
        if os.getpid() != self._pid:
            return  # a forked child: its parent reports what was collected
        with self._lock:  # after a flush under way, and no flush after this
            self._flushing.set()
            self.wrappers_out = False  # the program has ended: nothing to patch back for
        self.stop()
        if self.not_collected is not None:
            self._say_not_collected()
            return
        if self._exit_if_launched and not self._launched():
            return
        if self._exit_print:
            stream = self._exit_table or sys.stderr
            try:
                stream.write(self.process_table(top=self._exit_top))
                stream.flush()
            except Exception as exc:  # a closed stderr must not give a traceback at exit
                warn_once("profile:table", f"profile: the table could not be printed ({exc})")
        self._write_outputs(tuple(self._exit_outputs))

    def _say_not_collected(self) -> None:
        """At exit, one line for a session CUPTI never fed: why, and the files not written
        (none from a helper process beneath the owner, which says it)."""
        if self._exit_if_launched or not (self._exit_print or self._exit_outputs):
            return
        paths = self._exit_paths if self._exit_outputs else []
        unwritten = f"; {', '.join(paths)} not written" if paths else ""
        warn_once(
            "profile:not-collected",
            f"profile: no GPU time was collected ({self.not_collected}){unwritten}",
        )

    def _write_outputs(self, kinds: tuple[str, ...]) -> None:
        """The outputs of `kinds` that write_at_exit() set up, each replaced whole; a failure
        is one line per output."""
        texts = {"json": self._json_text, "trace": self._trace_text, "html": self._page_text}
        kind_of = {id(output): kind for kind, output in self._exit_outputs.items()}

        def failed(output: Output, exc: Exception) -> None:
            kind = kind_of[id(output)]
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            warn_once(
                f"profile:{kind}",
                f"profile: the {kind} output {output.path!r} could not be written "
                f"({type(exc).__name__}: {reason})",
            )

        writes = [
            (output, texts[kind], _EXIT_OUTPUTS[kind].said)
            for kind, output in self._exit_outputs.items()
            if kind in kinds
        ]
        # Together: a profile, its trace and its page go to one place (documents/owner.py).
        # If nothing was launched, no file beside another process's.
        write_outputs(writes, launched=self._launched(), failed=failed)


def _run_facts(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with this process's pid and command line where it does not say them."""
    meta = dict(meta)
    meta.setdefault("pid", os.getpid())
    meta.setdefault("program", os_text(" ".join(sys.argv) or sys.executable))  # any bytes
    return meta
