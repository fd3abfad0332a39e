"""A profile window on demand, in a process started with KNAME=1 (any mode): `kname attach PID`,
or KNAME_PROFILE_TRIGGER for every rank of a job.

arm(), called by install(), costs the launch path nothing: it sets a SIGUSR2 handler (only where
the program leaves SIGUSR2 at its default action, which would end the process) and, where
KNAME_PROFILE_TRIGGER is set, starts a daemon thread that stats the trigger every POLL_SECONDS.
Nothing else runs until asked. Then, on a thread of its own:

1. The request is read (requests.py: the user's own files only, `key=value` lines checked): from
   the runtime folder for `kname attach`, from the trigger file for a trigger.
2. A ProfileSession starts (CUPTI subscribed; under Nsight or another CUPTI tool, it cannot: the
   reply says so in one line, and the process runs on), collects for the window, and stops
   (CUPTI unsubscribed, then its records flushed).
3. The files asked for are written whole (each rank its own: rank_paths' placeholders and
   `.rank<N>`), and, for `kname attach`, the reply: the table and one line per note.
4. CUPTI is detached (session.detach: cuptiFinalize from the next CUDA API call's exit
   callback): launches cost what they did before the window. The next window subscribes again.
   Not where a window traced CUDA graph work (a traced graph fails once CUPTI is finalized):
   CUPTI then stays attached, said in one line.

A process that ends during a window (exit, an exception, SIGTERM left at its default action)
ends the window there and writes its files whole first (_sigterm.at_exit, registered by the
first window's signal on the main thread). Windows do not overlap: one at a time, and none while
another kname profile session collects (KNAME_MODE=profile, kname.profile()).

Graphs: a CUDA graph captured before the window was not seen made, so its replays' kernels stay
with the line that replayed it; the reply and the process say so plainly (graph_note).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any

from kname._locks import new_lock, reset_in_child
from kname._sigterm import at_exit
from kname._warnings import warn_once
from kname.config import KNAME_PROFILE_TRIGGER
from kname.profiling.requests import (
    REPLY,
    REQUEST,
    RequestRefused,
    exchange_path,
    parse_request,
    read_owned,
    runtime_folder,
    runtime_path,
)

SIGNAL = signal.SIGUSR2
POLL_SECONDS = 2.0  # how often a trigger file is looked at
DETACH = True  # CUPTI finalized after each window (False: left attached, to measure its cost)
GRAPHS_KEEP_CUPTI = (
    "CUPTI stays attached to this process after the window, so launches may cost a little more "
    "until it ends: CUDA graphs ran while CUPTI traced them, and a graph CUPTI traced fails at its "
    "next replay once CUPTI is detached (docs/attach.md)"
)
ATTACH = "kname attach"
TRIGGER = KNAME_PROFILE_TRIGGER
TRIGGER_JSON = "kname-profile.json"  # a trigger's default output, beside the trigger file

_lock = new_lock()
_armed = False
_window: Window | None = None  # the window open now
_pending: list[tuple[Any, float]] = []  # triggers seen by the poller: (request, start at)
_exit_writer = False  # _sigterm.at_exit registered (on the main thread, by the first signal)
_started = time.time()  # a trigger touched before the process started is an old one
_graphs_traced = False  # a window traced CUDA graph work: CUPTI is never detached again


def arm(trigger: str | None) -> None:
    """Answer `kname attach` (SIGUSR2) and, with `trigger`, watch that file: idempotent."""
    global _armed
    with _lock:
        if _armed:
            return
        _armed = True
    try:
        # SIGUSR2's default action ends the process: a program that relies on it is none.
        if signal.getsignal(SIGNAL) is signal.SIG_DFL:
            signal.signal(SIGNAL, _on_signal)
    except (ValueError, OSError):  # not the main thread: Python sets handlers there only
        pass
    if trigger:
        watcher = threading.Thread(
            target=_watch_trigger, args=(trigger,), name="kname-profile-trigger", daemon=True
        )
        watcher.start()


def _disarmed_in_child() -> None:
    """A forked child has no watcher thread and no window: it may arm again (install())."""
    global _armed, _window
    _armed, _window = False, None
    _pending.clear()


reset_in_child(_disarmed_in_child)


def _on_signal(signum: int, frame: object) -> None:
    # The main thread, between two bytecodes of the program: only what must be here (the
    # SIGTERM writer can be set on this thread alone), then a thread of its own reads files and
    # starts CUPTI. Nothing may be raised into the program from here.
    try:
        _register_exit_writer()
        with _lock:
            pending = list(_pending)
            _pending.clear()
        for request, start_at in pending:
            _in_thread(_serve_trigger, request, start_at)
        # kname attach's signal (its request may have come with a trigger's own signal).
        if not pending or os.path.exists(exchange_path(runtime_path(), os.getpid(), REQUEST)):
            _in_thread(_serve_attach)
    except Exception as exc:
        warn_once("attach:signal", f"attach: a profile window could not start ({_reason(exc)})")


def _in_thread(work: Any, *args: Any) -> None:
    threading.Thread(
        target=_guarded, args=(work, *args), name="kname-profile-window", daemon=True
    ).start()


def _guarded(work: Any, *args: Any) -> None:
    """`work(*args)`; a fault of kname's is one line, never a thread's traceback."""
    try:
        work(*args)
    except Exception as exc:
        warn_once("attach:window", f"attach: the profile window failed ({_reason(exc)})")


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def _register_exit_writer() -> None:
    """The writer of an open window as the process ends: at exit, and, registered from the main
    thread, when SIGTERM (left at its default) ends it."""
    global _exit_writer
    with _lock:
        if _exit_writer:
            return
        _exit_writer = True
    at_exit(_end_at_exit)


# --- kname attach ------------------------------------------------------------------------------


def _serve_attach() -> None:
    """Read this process's request, run its window, write the reply; a refusal is the reply."""
    pid = os.getpid()
    try:
        folder = runtime_folder()
    except RequestRefused as exc:
        warn_once(f"attach:{exc}", f"attach: refused: {exc}")
        return
    reply = exchange_path(folder, pid, REPLY)
    path = exchange_path(folder, pid, REQUEST)
    try:
        text = read_owned(path, f"the request {path}")
        request = parse_request(text, "/", f"the request {path}")
    except RequestRefused as exc:
        _write_reply(reply, refused=str(exc))
        return
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    _run_window(request, ATTACH, reply)


# --- The trigger file --------------------------------------------------------------------------


def _watch_trigger(path: str) -> None:
    """Stat `path` every POLL_SECONDS; a change (made after this process started) asks for a
    window. Never raises: a fault is one line and the watch ends."""
    seen = _state(path)
    while True:
        time.sleep(POLL_SECONDS)
        try:
            now = _state(path)
            if now is None or now == seen:
                continue
            seen = now
            if now[2] / 1e9 < _started:
                continue  # touched before this process started: an old job's
            _triggered(path, now[2] / 1e9)
        except Exception as exc:
            warn_once("trigger:fault", f"{TRIGGER}: watching {path!r} failed ({exc}); it stops")
            return


def _state(path: str) -> tuple[int, int, int, int] | None:
    """What the trigger is now (inode, size, modification time in ns, change time), or None."""
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _triggered(path: str, touched: float) -> None:
    """The trigger changed: read it (the user's own only), then open the window at the same
    moment in every rank: POLL_SECONDS after it was touched, when each has seen it."""
    what = f"{TRIGGER} {path!r}"
    try:
        request = parse_request(read_owned(path, what), os.path.dirname(path), what)
    except RequestRefused as exc:
        warn_once(f"trigger:{exc}", f"{exc}; no profile window")
        return
    if not request.outputs():
        request = request._replace(json=os.path.join(os.path.dirname(path), TRIGGER_JSON))
    start_at = min(max(touched + POLL_SECONDS, time.time()), time.time() + POLL_SECONDS)
    try:
        ours = signal.getsignal(SIGNAL) is _on_signal
    except (ValueError, OSError):
        ours = False
    if ours:
        # Through the main thread, which sets the SIGTERM writer: a rank ended by its
        # scheduler during the window still writes its files.
        with _lock:
            _pending.append((request, start_at))
        os.kill(os.getpid(), SIGNAL)
    else:
        _guarded(_serve_trigger, request, start_at)


def _serve_trigger(request: Any, start_at: float) -> None:
    # What the window imports, imported first: every rank then starts collecting on time.
    import kname.profiling.cupti_collector
    import kname.profiling.session  # noqa: F401

    time.sleep(max(0.0, start_at - time.time()))
    _run_window(request, TRIGGER, None)


# --- The window ----------------------------------------------------------------------------


class Window:
    """One window: its session, its request, and whether it has ended (once, whoever ends it:
    its own timer or the process's exit)."""

    def __init__(self, session: Any, request: Any, origin: str, reply: str | None) -> None:
        self.session = session
        self.request = request
        self.origin = origin
        self.reply = reply
        self.started = time.time()
        self.ended = threading.Event()  # set: end now (at exit)
        self.finished = False
        self.lock = new_lock()

    def finish(self, note: str = "", detach: bool = True) -> None:
        """Stop collecting, write the files and the reply, then detach CUPTI (where `detach`
        and no CUDA graph ran under it); only the first call does."""
        global _graphs_traced
        with self.lock:
            if self.finished:
                return
            self.finished = True
            self.session.window["end_ns"] = time.time_ns()
            self.session.stop()
            notes = [note] if note else []
            # A graph replayed while CUPTI traced it fails at its next replay once CUPTI is
            # finalized (unspecified launch failure, H100, CUDA 13; torch keeps CUPTI attached
            # with graphs too): then CUPTI stays attached, in this process for good.
            _graphs_traced = _graphs_traced or ran_graphs(self.session.document())
            detach = detach and DETACH
            if detach and _graphs_traced:
                detach = False
                notes.append(GRAPHS_KEEP_CUPTI)
            _write_window(self, notes)
            if detach:
                self.session.detach()  # finalized at the next CUDA call: launches cost as before


def _run_window(request: Any, origin: str, reply: str | None) -> None:
    """Collect for request.duration, then write; refused (one line) where a window is open, a
    session collects already, or CUPTI cannot start."""
    global _window
    from kname.profiling import session as sessions

    _register_exit_writer()  # where no signal of ours came first (a program's own SIGUSR2)
    with _lock:
        busy = _window is not None or sessions._collecting is not None
        if busy:
            why = (
                "a profile window is open in this process already"
                if _window is not None
                else "a kname profile session is collecting in this process already "
                "(KNAME_MODE=profile or kname.profile())"
            )
        else:
            session = sessions.ProfileSession(keep_streams=request.trace is not None)
            window = _window = Window(session, request, origin, reply)
    if busy:
        _refuse(origin, reply, why)
        return
    try:
        if not session.start():
            # For a trigger, the collector's own line on stderr has said why.
            if reply is not None:
                _refuse(origin, reply, f"no GPU time can be collected: {session.not_collected}")
            return
        # From when CUPTI collects: the ranks of a trigger compare these.
        window.started = time.time()
        session.window = {"start_ns": time.time_ns(), "end_ns": 0, "by": _by(origin)}
        window.ended.wait(request.duration)
        window.finish()
    finally:
        with _lock:
            if _window is window:
                _window = None


def _by(origin: str) -> str:
    return "attach" if origin == ATTACH else "trigger"


def _refuse(origin: str, reply: str | None, why: str) -> None:
    if reply is not None:
        _write_reply(reply, refused=why)
    else:
        warn_once(f"trigger:{why}", f"{origin}: {why}; no profile window")


def _end_at_exit() -> None:
    """The process ends during a window: end it now, files whole."""
    window = _window
    if window is None or window.finished:
        return
    elapsed = time.time() - window.started
    window.ended.set()
    window.finish(
        f"the process ended {elapsed:.1f} s into the {window.request.duration:g} s window: "
        "the profile covers the window up to then",
        detach=False,  # the process ends: nothing to gain, and CUDA itself is going
    )


def _write_window(window: Window, notes: list[str]) -> None:
    """The files of a finished window, each rank its own; then the reply, or one line."""
    from kname.rank_paths import PathTemplateError, expand
    from kname.ranks import find_rank

    session = window.session
    notes = notes + graph_note(session.document())
    saves = {"json": session.save, "trace": session.save_trace, "html": session.save_html}
    written = []
    for kind, template in window.request.outputs().items():
        try:
            path = expand(template, find_rank(), variable=f"{window.origin} {kind}")
            saves[kind](path)
            written.append(path)
        except (OSError, PathTemplateError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            notes.append(f"the {kind} output {template!r} could not be written ({reason})")
    if window.reply is not None:
        _write_reply(window.reply, table=session.process_table(), files=written, notes=notes)
        return
    for note in notes:
        warn_once(f"trigger:{note}", f"{TRIGGER}: {note}")
    if written:
        warn_once(
            f"trigger:{window.started}",
            f"{TRIGGER}: profile window of {window.request.duration:g} s written to "
            f"{', '.join(written)}",
        )


def ran_graphs(document: dict[str, Any]) -> bool:
    """Whether CUDA graph work is in the profile (a site with graph fields)."""
    from kname.documents.schema import REPLAYED_AT, REPLAYED_UNSEEN

    return any(REPLAYED_AT in site or REPLAYED_UNSEEN in site for site in document["sites"])


def graph_note(document: dict[str, Any]) -> list[str]:
    """One line where graph work replayed in the window came from graphs captured before it:
    kname did not see their nodes made, so their kernels stay with the replaying line."""
    unseen = [site for site in document["sites"] if site.get("replayed_unseen")]
    if not unseen:
        return []
    launches = sum(site["replayed_unseen"]["launches"] for site in unseen)
    return [
        f"{launches} GPU records of CUDA graphs captured before the window are counted under "
        f"the line that replayed them ({len(unseen)} line{'s' if len(unseen) > 1 else ''}): "
        "kname did not see their capture, so it cannot name the lines that made their kernels"
    ]


def _write_reply(path: str, **reply: Any) -> None:
    """The answer `kname attach` waits for, written whole; a failure is one line here."""
    import json  # here: start-up imports this module, and json only a reply needs

    from kname.documents.files import write_atomically

    try:
        write_atomically(path, json.dumps(reply))
    except (OSError, ValueError) as exc:
        warn_once(f"attach:reply:{path}", f"attach: the reply {path!r} cannot be written ({exc})")
