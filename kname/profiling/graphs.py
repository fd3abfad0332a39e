"""CUDA graph nodes and the lines that made them: what a replayed kernel is attributed to.

CUPTI reports each graph node as it is made (resource callbacks, synchronous, on the thread that
makes it): a node made during stream capture is made inside the captured launch call, so its site
is that call's; a node added explicitly (cudaGraphAddKernelNode) gets the line that added it.
Instantiation clones every node into the executable graph (the clone takes its original's site),
and cudaGraphExecUpdate gives an executable graph's node the parameters of a node of another
graph (it takes that node's site, for replays launched after the update). The kernel, copy and
set records of a replay carry the node's id: the join asks `charged(node, graph, ...)`.

A graph a library makes and runs itself is not the user's capture: XLA builds its executables'
CUDA graphs (command buffers) inside the call that first runs them, torch.compile's cudagraph
trees record theirs at build time (`(compile)`). So a node made at the line that launched its
graph first, or made at build time, counts each replay's work under the line replaying it
(`charged`): a jitted step called from two lines is two lines' run, never the first's.

A node whose making kname did not see (a graph captured or instantiated before profiling began)
has no site here: its work stays with the line that replayed it, marked so.

Memory is bounded. A destroyed node (or every node of a destroyed graph or executable graph) is
kept a while longer, in a window of the RECENT_NODES last destroyed, because the records of its
last replays come later, in CUPTI's buffers. Past MAX_NODES live nodes, new ones are not kept
(said once): their work stays with the line that replayed it.

kname._native_cupti keeps the same table in C for the join it does there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kname._warnings import warn_once
from kname.callsite import COMPILE_MARK
from kname.profiling.records import (
    EXEC_DESTROYED,
    GRAPH_DESTROYED,
    NODE_CLONED,
    NODE_CREATED,
    NODE_DESTROYED,
    NODE_UPDATED,
    GraphNodeRecord,
)

MAX_NODES = 1_000_000
RECENT_NODES = 65_536
MAX_GRAPHS = 65_536  # graphs whose first launch is kept: past it, nodes keep their lines

Container = tuple[bool, int]  # (an executable graph, its id): what a node is destroyed with


@dataclass(slots=True)
class Updated:
    """The sites of a node whose parameters were updated: `before`, then each update's site for
    the replays launched after the update (correlation ids above `after`)."""

    before: str | None
    changes: list[tuple[int, str | None]] = field(default_factory=list)  # (after, site)

    def at(self, correlation_id: int) -> str | None:
        """The site for a replay launched with this correlation id."""
        site = self.before
        for after, changed in self.changes:
            if correlation_id > after:
                site = changed
        return site


class GraphNodes:
    """Node id -> the site that made it, from CUPTI's graph node records in the order they came."""

    def __init__(self, max_nodes: int = MAX_NODES, recent_nodes: int = RECENT_NODES) -> None:
        self.max_nodes = max_nodes
        self.recent_nodes = recent_nodes
        # Every node kept, live or destroyed lately: its site (None: its capture was not seen).
        self._sites: dict[int, str | Updated | None] = {}
        self._container_of: dict[int, Container] = {}  # live nodes only
        self._members: dict[Container, set[int]] = {}  # live nodes by what destroys them
        self._destroyed: deque[int] = deque()  # lately destroyed, oldest first
        self.not_kept = 0  # nodes refused at the bound
        # A launched graph's id (the records' graph id) -> its earliest launch: id, line.
        self._first_launches: dict[int, tuple[int, str]] = {}

    def site_of(self, node: int, correlation_id: int) -> str | None:
        """The line that made `node`, for its work in the replay with this correlation id; None
        where kname did not see it made."""
        site = self._sites.get(node)
        if site is None or type(site) is str:
            return site
        return site.at(correlation_id)

    def charged(self, node: int, graph: int, correlation_id: int, replay: str) -> str | None:
        """The line a replayed record of `node` goes to: the line that made the node, or
        `replay` where the graph is a library's own (made at its first launch's line, or at
        build time); None where kname did not see the node made."""
        capture = self.site_of(node, correlation_id)
        if capture is None:
            return None
        first = self._first_launch(graph, correlation_id, replay)
        return replay if follows_replay(capture, first) else capture

    def _first_launch(self, graph: int, correlation_id: int, replay: str) -> str | None:
        """The line of the earliest launch of `graph` seen so far (this one counted)."""
        first = self._first_launches.get(graph)
        if first is None or correlation_id < first[0]:
            if first is None and len(self._first_launches) >= MAX_GRAPHS:
                return None
            first = self._first_launches[graph] = (correlation_id, replay)
        return first[1]

    @property
    def live(self) -> int:
        """Nodes kept that are not destroyed."""
        return len(self._container_of)

    @property
    def kept(self) -> int:
        """Nodes kept, live or lately destroyed."""
        return len(self._sites)

    def add(self, record: GraphNodeRecord) -> None:
        """One graph node record (in the order CUPTI's callbacks came)."""
        event = record.event
        if event == NODE_CREATED:
            # Instantiation makes its copies too; a clone's site (from its original) wins.
            if record.node not in self._sites:
                self._keep(record.node, record.site, record)
        elif event == NODE_CLONED:
            self._keep(record.node, self._sites_of(record.original), record)
        elif event == NODE_UPDATED:
            self._update(record)
        elif event == NODE_DESTROYED:
            self._destroy(record.node)
        elif event in (GRAPH_DESTROYED, EXEC_DESTROYED):
            exec_ = event == EXEC_DESTROYED
            container = (exec_, record.graph_exec if exec_ else record.graph)
            for node in self._members.pop(container, ()):
                self._container_of.pop(node, None)
                self._remember_destroyed(node)

    def _sites_of(self, node: int) -> str | None:
        site = self._sites.get(node)
        if isinstance(site, Updated):  # a copy made now runs with the parameters it has now
            return site.changes[-1][1] if site.changes else site.before
        return site

    def _keep(self, node: int, site: str | Updated | None, record: GraphNodeRecord) -> None:
        if node not in self._container_of:
            if len(self._container_of) >= self.max_nodes:
                self.not_kept += 1
                say_nodes_not_kept(self.max_nodes)
                self._sites.pop(node, None)  # not a stale site either: the replay line's
                return
            container = (bool(record.graph_exec), record.graph_exec or record.graph)
            self._container_of[node] = container
            self._members.setdefault(container, set()).add(node)
        self._sites[node] = site

    def _update(self, record: GraphNodeRecord) -> None:
        """From the next replay on, the executable graph's node (`original`) runs as the
        update's graph's `node` does: with its site."""
        site = self._sites_of(record.node)
        current = self._sites.get(record.original)
        if current is None and site is None:
            return  # neither made where kname saw it: the replay line's, before and after
        if not isinstance(current, Updated):
            current = Updated(current)
            self._keep(record.original, current, record)
        current.changes.append((record.correlation_id, site))

    def _destroy(self, node: int) -> None:
        container = self._container_of.pop(node, None)
        if container is None:
            return
        members = self._members[container]
        members.discard(node)
        if not members:
            del self._members[container]
        self._remember_destroyed(node)

    def _remember_destroyed(self, node: int) -> None:
        self._destroyed.append(node)
        if len(self._destroyed) > self.recent_nodes:
            gone = self._destroyed.popleft()
            if gone not in self._container_of:  # not made live again since (ids are unique)
                self._sites.pop(gone, None)


def follows_replay(capture: str, first_launch: str | None) -> bool:
    """Whether a node made at `capture` is a library's own, its work each replay's line's: made
    at build time, or at the line that launched its graph first (inside that call)."""
    return capture.endswith(COMPILE_MARK) or capture == first_launch


def say_nodes_not_kept(max_nodes: int) -> None:
    """Said once: more CUDA graph nodes are live than kname keeps."""
    warn_once(
        "profile:graph-nodes",
        f"profile: more than {max_nodes} CUDA graph nodes are live; the GPU work of nodes made "
        "from now on is counted under the line that replayed their graph",
    )
