"""CuPy's CUDA graphs: `graph.launch()` named after the line that replays the graph.

    stream.begin_capture()
    y = x * 2.0                   # captured: kname profile gives these kernels this line
    graph = stream.end_capture()
    graph.launch()                # replayed: this line's NVTX range holds the replay

`cupy.cuda.graph.Graph` is a Cython type that refuses attribute assignment, and only
`end_capture()` makes one, in Cython: kname can neither wrap its `launch` in place nor make its
instances of a subclass. So `end_capture` of cupy.cuda.Stream and ExternalStream (Python classes
over CuPy's Cython stream) is wrapped to hand back a NamedGraph: the graph CuPy made, whose
`launch` is in kname's launch wrapper and whose every other attribute is CuPy's (`upload`,
`debug_dot_str`, `graph`, `graphExec`), and whose `__class__` is CuPy's Graph, so that
`isinstance(g, cupy.cuda.graph.Graph)` still holds (`type(g)` is NamedGraph).
install() adds the named `launch`; disable() and uninstall() take it away again (CuPy's own is
called) and give `end_capture` back. Graphs captured before install() keep CuPy's class and are
not named.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kname.launch import KernelArg, LaunchSpec
from kname.patching import Change, Patch, is_wrapper, mark_wrapper
from kname.targets import Options

LIB = "cupy"
STREAM_CLASSES = ("Stream", "ExternalStream")  # cupy.cuda.stream's Python stream classes
KERNEL_NAME = "cuda graph"  # what a graph launch is counted as, in the census and the range


class NamedGraph:
    """A CuPy graph whose `launch` kname names (see the module's docstring)."""

    # Weakly referable: kname's call-site cache does not keep the graph alive.
    __slots__ = ("__weakref__", "_graph")

    def __init__(self, graph: Any) -> None:
        self._graph = graph

    @property  # type: ignore[misc]  # isinstance() reads __class__: CuPy's Graph, as before
    def __class__(self) -> type:
        return type(self._graph)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)

    def __repr__(self) -> str:
        return repr(self._graph)

    def _launch(self, stream: Any = None) -> Any:
        """CuPy's own `launch`, of the graph held (what kname's wrapper calls)."""
        return self._graph.launch(stream)


def graph_name(graph: Any) -> str:
    return KERNEL_NAME


LAUNCH = LaunchSpec(LIB, graph_name, KernelArg(0))


def named_end_capture(end_capture: Any) -> Any:
    """`end_capture` handing back the graph CuPy made as a NamedGraph."""

    def end_capture_named(stream: Any) -> NamedGraph:
        return NamedGraph(end_capture(stream))

    return mark_wrapper(end_capture_named, end_capture)


def name_graphs(module: ModuleType, options: Options) -> list[Change]:
    """`end_capture` wrapped on CuPy's stream classes, and the named `launch` for this install;
    nothing when the hook fired again."""
    stream_patches: list[Change] = [
        Patch(cls, "end_capture", named_end_capture(cls.end_capture))
        for cls in (getattr(module, name, None) for name in STREAM_CLASSES)
        if cls is not None and not is_wrapper(cls.end_capture)
    ]
    if not stream_patches:
        return []
    launch = mark_wrapper(options.wrapper(NamedGraph._launch, LAUNCH), NamedGraph._launch)
    launch.__name__ = launch.__qualname__ = "launch"
    return [Patch(NamedGraph, "launch", launch), *stream_patches]
