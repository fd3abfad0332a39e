"""CUPTI's floor for kname profile's benchmarks: its activity records, plus a launch callback that
returns at once on the launch APIs kname profile subscribes to (cupti_callback_floor.c).

    floor = CallbackFloor()               # compiles cupti_callback_floor.c on first use
    floor.start(cupti)                     # cupti-python's module: kinds are enabled by the caller
    ...
    floor.stop()

What any profiler that sees each launch at its API and reads kernel records pays, before it does
any work of its own. `build()` compiles the library once (the whole-program benchmark builds it
in the runner and hands its path to each program it starts).
"""

from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
CALL_DOMAINS = {1: "driver", 2: "runtime", 3: "resource"}  # CUPTI's callback domains


def build(out_dir: Path | None = None) -> Path:
    """cupti_callback_floor.c compiled (with the tests' compiler and flags): its path."""
    import sys

    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))
    from support.nvtx_capture import compile_c

    out_dir = out_dir or Path(tempfile.mkdtemp(prefix="kname-cupti-floor-"))
    source = BENCH_DIR / "cupti_callback_floor.c"
    return compile_c(source, out_dir / "libcupti_floor.so", "-shared", "-fPIC", f"-I{REPO}", "-ldl")


class CallbackFloor:
    """An empty launch callback on kname profile's launch APIs, and activity buffers freed
    unread; `library`: a built cupti_callback_floor.c (built on first start when not given).
    The parts of kname's own subscription, one at a time, for the split of its cost:
    `launches=False`: subscribed, no callback enabled; `graphs`: the graph resource callbacks
    kname profile enables too; `named`: subscribed by cuptiSubscribe_v2, as kname's recorder;
    `recording`: the callback keeps each call's id and a site on its thread (no lock), the least
    a recorder of launches does."""

    def __init__(
        self,
        library: Path | None = None,
        launches: bool = True,
        graphs: bool = False,
        named: bool = False,
        recording: bool = False,
    ) -> None:
        self.path = library
        self.library: Any = None
        self.launches, self.graphs, self.named = launches, graphs, named
        self.flags = int(named) | 2 * int(recording)  # FLOOR_NAMED, FLOOR_RECORDING

    def start(self, cupti: Any) -> None:
        from kname.profiling.native_callback import libcupti_path

        if self.library is None:
            self.library = _load(self.path or build())
        cupti.get_timestamp()  # the binding loads libcupti
        pairs = self.callbacks(cupti)
        domains = (ctypes.c_uint32 * max(1, len(pairs)))(*(domain for domain, _ in pairs))
        cbids = (ctypes.c_uint32 * max(1, len(pairs)))(*(cbid for _, cbid in pairs))
        path = libcupti_path().encode()
        status = self.library.floor_start(path, domains, cbids, len(pairs), self.flags)
        if status:
            raise SystemExit(f"CUPTI refused the floor's subscriber (status {status})")

    def callbacks(self, cupti: Any) -> list[tuple[int, int]]:
        """The (domain, callback id) pairs enabled, as kname profile enables them."""
        from kname.profiling.capture import select_graph_callbacks
        from kname.profiling.cupti_collector import launch_apis

        pairs = []
        if self.launches:
            apis = launch_apis(cupti)
            pairs += [(domain, cbid) for domain, chosen in apis.items() for cbid in chosen]
        if self.graphs:
            resource = int(cupti.CallbackDomain.RESOURCE)
            graphs = select_graph_callbacks(cupti.CallbackIdResource.__members__)
            pairs += [(resource, cbid) for cbid in graphs]
        return pairs

    def stop(self) -> None:
        self.library.floor_stop()

    def calls(self) -> dict[str, int]:
        """The callbacks the floor took since the last ask, by domain."""
        return {name: self.library.floor_calls(number) for number, name in CALL_DOMAINS.items()}


def _load(path: Path) -> Any:
    library = ctypes.CDLL(str(path))
    library.floor_start.argtypes = [
        ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_int, ctypes.c_int,
    ]  # fmt: skip
    library.floor_calls.restype = ctypes.c_ulong
    return library
