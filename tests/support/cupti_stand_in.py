"""Stand-ins for CUPTI where no GPU is: the stand-in libcupti (fake_cupti.c, with its records
laid out by CUPTI's real headers where they are installed) and cupti-python's activity API.

The headers come from the nvidia-cuda-cupti wheel (with cuda.h from CUDA_HOME or
/usr/local/cuda) or from the CUDA toolkit itself, which ships CUPTI's headers beside cuda.h.
"""

from __future__ import annotations

import ctypes
import enum
import os
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

from support import REPO

ABI_FOLDER = REPO / "kname" / "profiling" / "_cupti_c"  # kname's CUPTI declarations

COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
SUPPORT = REPO / "tests" / "support"
# CUPTI's numbers the tests use: the driver's domain and two of its callback ids, record kinds.
DRIVER, CUDA_LAUNCH_KERNEL, CUDA_GRAPH_LAUNCH = 1, 307, 514
MEMCPY, MEMSET, KERNEL, CONCURRENT_KERNEL, RUNTIME, EXTERNAL_CORRELATION = 1, 2, 3, 10, 5, 39
MEMORY2 = 49  # kname profile --memory's records (CUpti_ActivityMemory4)
# CUPTI's memory APIs the stand-in binding names (cupti_driver_cbid.h, cupti_runtime_cbid.h).
CU_MEM_ALLOC, CU_MEM_FREE, CUDA_MALLOC, CUDA_FREE = 243, 245, 20, 22
# The resource domain and its graph callback ids (CUpti_CallbackIdResource, cupti_callbacks.h).
RESOURCE = 3
GRAPH_CALLBACK_IDS = {
    "GRAPH_DESTROY_STARTING": 10, "GRAPHNODE_CREATED": 13, "GRAPHNODE_DESTROY_STARTING": 14,
    "GRAPHEXEC_DESTROY_STARTING": 19, "GRAPHNODE_CLONED": 20, "GRAPH_NODE_UPDATED": 22,
}  # fmt: skip


def cupti_include() -> Path | None:
    """The include folder of an installed nvidia-cuda-cupti wheel, if any."""
    for distribution in metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower()
        if not name.startswith("nvidia-cuda-cupti"):
            continue
        for file in distribution.files or ():
            if file.name == "cupti_callbacks.h":
                return Path(distribution.locate_file(file)).parent
    return None


def cuda_include() -> Path | None:
    """The CUDA toolkit's include folder (cuda.h), from CUDA_HOME or /usr/local/cuda."""
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda.h").exists():
            return Path(root) / "include"
    return None


def header_sets() -> dict[str, list[Path]]:
    """Every set of CUPTI headers here, by name: the folders to include, CUPTI's first."""
    found = {}
    cuda, wheel = cuda_include(), cupti_include()
    if cuda is not None and wheel is not None:
        found["nvidia-cuda-cupti"] = [wheel, cuda]
    if cuda is not None and (cuda / "cupti_activity.h").exists():
        found["cuda-toolkit"] = [cuda]
    return found


def build_fake_cupti(out_dir: Path) -> tuple[Path, str]:
    """tests/support/fake_cupti.c (and its records) built as a libcupti: its path, and the headers
    its records are laid out by (the CUDA toolkit's where there, else the wheel's, else kname's
    declarations)."""
    sets = header_sets()
    name = next((n for n in ("cuda-toolkit", "nvidia-cuda-cupti") if n in sets), "")
    flags = ["-DFAKE_CUPTI_HEADERS", *(f"-I{folder}" for folder in sets[name])] if name else []
    built = out_dir / "libcupti.so.99"
    done = subprocess.run(
        [COMPILER, "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{ABI_FOLDER}",
         *flags, "-o", str(built), str(SUPPORT / "fake_cupti.c"),
         str(SUPPORT / "fake_cupti_records.c"), "-lpthread"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return built, name or "kname's declarations"


def built_or_skip(out_dir: Path) -> Path:
    """The stand-in built into `out_dir`, for tests of the native callback (skipped where it is
    not in use, or no C compiler is found)."""
    import pytest

    from kname import hotpath

    native, why = hotpath.choose(True).cupti()
    if native is None:
        pytest.skip(f"no native CUPTI callback here: {why}")
    if COMPILER is None:
        pytest.skip("no C compiler")
    return build_fake_cupti(out_dir)[0]


def memcpy_name(copy_kind: int) -> str:
    """A copy of CUPTI's memcpy kind `copy_kind` as the collector names it (`[memcpy HtoD]`)."""
    from kname.profiling.capture import memcpy_work_name

    return memcpy_work_name(StandInBinding.ActivityMemcpyKind(copy_kind).name)


def queue_record(library: ctypes.CDLL, record) -> None:
    """A kname record (ActivityRecord or ExternalCorrelation) queued in the stand-in as the
    CUPTI record it was read from (a kernel's as CONCURRENT_KERNEL)."""
    from kname.profiling.records import KERNEL as KERNEL_WORK
    from kname.profiling.records import MEMCPY as MEMCPY_WORK
    from kname.profiling.records import ExternalCorrelation

    r = record
    if isinstance(r, ExternalCorrelation):
        library.fake_external(r.correlation_id, r.external_id)
    elif r.kind == KERNEL_WORK:
        library.fake_kernel(
            CONCURRENT_KERNEL, r.correlation_id, r.start, r.end, r.stream, r.device, r.graph_id,
            r.graph_node_id, r.name.encode(),
        )  # fmt: skip
    elif r.kind == MEMCPY_WORK:
        copy_kinds = {memcpy_name(kind): kind for kind in StandInBinding.ActivityMemcpyKind}
        library.fake_memcpy(
            r.correlation_id, copy_kinds[r.name], r.start, r.end, r.stream, r.device, r.graph_id,
            r.graph_node_id,
        )  # fmt: skip
    else:
        library.fake_memset(
            r.correlation_id, r.start, r.end, r.stream, r.device, r.graph_id, r.graph_node_id
        )


def queue_memory(library: ctypes.CDLL, record) -> None:
    """A kname MemoryRecord queued in the stand-in as the MEMORY2 record it was read from."""
    from kname.profiling.records import ALLOCATION

    kinds = {name.lower(): number for name, number in MEMORY_KINDS.items()}
    library.fake_memory(
        record.correlation_id, 1 if record.operation == ALLOCATION else 2,
        kinds[record.memory_kind], record.address, record.bytes, record.timestamp,
        record.device, record.stream, int(record.is_async),
    )  # fmt: skip


# CUpti_ActivityMemoryKind (cupti_activity.h)
MEMORY_KINDS = {
    "UNKNOWN": 0, "PAGEABLE": 1, "PINNED": 2, "DEVICE": 3, "ARRAY": 4, "MANAGED": 5,
    "DEVICE_STATIC": 6, "MANAGED_STATIC": 7,
}  # fmt: skip


def fire_graph_event(library: ctypes.CDLL, record) -> int:
    """A kname GraphNodeRecord made by the stand-in as CUPTI's graph resource callback that
    reports it (handles whose ids are the record's); 0 when that callback is not enabled."""
    from kname.profiling.capture import GRAPH_CALLBACKS

    cbid = {event: GRAPH_CALLBACK_IDS[name] for name, event in GRAPH_CALLBACKS.items()}
    return library.fake_graph_callback(
        cbid[record.event], record.graph, record.node, record.original, record.graph_exec
    )


def joining_recorder(
    native,
    cupti,
    apis: list[tuple[str, bool]],
    buffer_bytes: int,
    bounds: tuple[int, int, int, int],
    trace: int | None = None,
):
    """A recorder of kname._native_cupti (`native`) on the stand-in (`cupti`: its library and
    path) with CUPTI's graph resource callbacks enabled, joining in C with these bounds
    (max_pending, recent_window, max_nodes, recent_nodes), keeping the trace (at most `trace`
    records) when asked, its activity buffers taken."""
    from kname.profiling.capture import select_graph_callbacks
    from kname.profiling.join import UNATTRIBUTED
    from kname.profiling.records import NODE_EVENTS

    cupti.library.fake_reset_activity()
    recorder = native.Recorder(
        apis=apis, sites={}, kinds={}, site_of_frame=lambda frame: "s", site_key="k",
        no_frame="<no Python frame>", unnamed="<unnamed>", max_pending=1_000_000,
        max_open_calls=8,
    )  # fmt: skip
    assert recorder.subscribe(cupti.path)[0] == 0
    for cbid, event in select_graph_callbacks(GRAPH_CALLBACK_IDS).items():
        assert recorder.enable_graph(cbid, NODE_EVENTS.index(event) + 1) == 0
    recorder.time_outer_launches(True)  # the C join counts launch times, as join.py's does
    recorder.join_in_c(bounds[0], bounds[1], UNATTRIBUTED, bounds[2], bounds[3])
    if trace is not None:
        recorder.keep_trace(trace)
    assert recorder.take_activity_buffers(buffer_bytes, 1_000_000, None) == 0
    return recorder


def stand_in_library(built: Path) -> ctypes.CDLL:
    """The built stand-in, loaded (once per process: its state is global), made fresh: no
    refusal, no record queued. ctypes calls release the GIL, as torch does around its launches."""
    library = ctypes.CDLL(str(built))
    library.fake_refuse(0, b"")
    library.fake_reset_activity()
    for name in ("fake_kernel", "fake_memcpy", "fake_memset"):
        function = getattr(library, name)
        function.restype = None
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    library.fake_kernel.argtypes = [u32, u32, u64, u64, u32, u32, u32, u64, ctypes.c_char_p]
    library.fake_memcpy.argtypes = [u32, ctypes.c_uint8, u64, u64, u32, u32, u32, u64]
    library.fake_memset.argtypes = [u32, u64, u64, u32, u32, u32, u64]
    library.fake_graph_callback.argtypes = [u32, u32, u64, u64, u32]
    library.fake_external.argtypes = [u32, u64]
    library.fake_memory.restype = None
    library.fake_memory.argtypes = [u32, u32, u32, u64, u64, u64, u32, u32, u32]
    library.fake_drop.argtypes = [ctypes.c_size_t]
    library.fake_timestamps_taken.restype = ctypes.c_ulong
    return library


class StandInBinding:
    """cupti-python's activity API, which needs a GPU: buffers handed back at flush (the Python
    path's; `registered` says whether its buffer callbacks were asked for)."""

    class Result:
        def __init__(self, status: int) -> None:
            self.name = {39: "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"}.get(status, "ERROR")

    Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39

    class cuptiError(Exception):
        def __init__(self, status: int) -> None:
            super().__init__(f"CUPTI status {status}")
            self.status = status

    CallbackDomain = SimpleNamespace(DRIVER_API=1, RUNTIME_API=2, RESOURCE=3)
    CallbackIdResource = SimpleNamespace(__members__=GRAPH_CALLBACK_IDS)
    driver_api_trace_cbid = SimpleNamespace(
        __members__={
            "cuLaunchKernel": CUDA_LAUNCH_KERNEL, "cuGraphLaunch": CUDA_GRAPH_LAUNCH,
            "cuMemAlloc_v2": CU_MEM_ALLOC, "cuMemFree_v2": CU_MEM_FREE,
        }
    )  # fmt: skip
    runtime_api_trace_cbid = SimpleNamespace(
        __members__={"cudaMalloc_v3020": CUDA_MALLOC, "cudaFree_v3020": CUDA_FREE}
    )
    ActivityKind = SimpleNamespace(
        CONCURRENT_KERNEL=10, KERNEL=3, MEMCPY=1, MEMSET=2, EXTERNAL_CORRELATION=39, DRIVER=4,
        RUNTIME=5, MEMORY2=MEMORY2,
    )  # fmt: skip
    ActivityMemoryKind = enum.IntEnum("ActivityMemoryKind", MEMORY_KINDS)
    ActivityMemoryOperationType = enum.IntEnum(
        "ActivityMemoryOperationType", {"INVALID": 0, "ALLOCATION": 1, "RELEASE": 2}
    )

    ActivityMemcpyKind = enum.IntEnum(
        "ActivityMemcpyKind", "UNKNOWN HTOD DTOH HTOA ATOH ATOA ATOD DTOA DTOD HTOH PTOP", start=0
    )  # cupti.ActivityMemcpyKind: CUpti_ActivityMemcpyKind's values

    def __init__(self) -> None:
        self.kernels: list[SimpleNamespace] = []
        self.registered = False

    def get_timestamp(self) -> int:
        return 0

    def activity_register_callbacks(self, requested, completed) -> None:
        self.registered = True
        self.completed = completed

    def activity_enable(self, kind) -> None:
        pass

    def activity_disable(self, kind) -> None:
        pass

    def activity_flush_all(self, flag) -> None:
        self.completed(self.kernels)
