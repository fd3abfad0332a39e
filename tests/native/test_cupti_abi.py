"""kname/profiling/_cupti_c/cupti_abi.h, the CUPTI declarations kname builds with, against
CUPTI's real headers.

kname._native_cupti is built without CUDA headers, from its own copy of the few CUPTI types and
functions it uses. Where the real headers are installed (the nvidia-cuda-cupti wheel's include
folder with cuda.h under CUDA_HOME or /usr/local/cuda; the CUDA toolkit's own CUPTI headers
there) and a C compiler is found, a small C file includes both and asserts, at compile time,
that sizes, field offsets, enum values and function types agree, against every set of headers
found; a copy of the header with one thing changed must fail to compile.

The resource callbacks' data (CUpti_ResourceData, CUpti_GraphData) and the graph id functions
are checked the same way. Activity records are declared only as far as the fields kname reads:
those fields' offsets and sizes are checked against the record versions CUPTI 13.0 writes
(CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4, CUpti_ActivityMemory4)
and against the newest version each set of headers declares (what that release writes).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from support import REPO
from support.cupti_stand_in import COMPILER, cuda_include, header_sets

HEADER = REPO / "kname" / "profiling" / "_cupti_c" / "cupti_abi.h"

CALLBACK_DATA_FIELDS = (
    "callbackSite", "functionName", "functionParams", "functionReturnValue", "symbolName",
    "context", "contextUid", "correlationData", "correlationId",
)  # fmt: skip
# The fields of CUPTI 13.0's struct, which later releases extend (structSize says which).
SUBSCRIBER_PARAMS_FIELDS = (
    "structSize",
    "subscriberName",
    "oldSubscriberName",
    "oldSubscriberSize",
)
RESOURCE_DATA_FIELDS = ("context", "resourceHandle", "resourceDescriptor")
GRAPH_DATA_FIELDS = (
    "graph", "originalGraph", "node", "originalNode", "nodeType", "dependency", "graphExec",
)  # fmt: skip
# kname's record: (CUPTI's record without its version number, the fields kname reads).
RECORDS = {
    "kn_ActivityKernel": ("CUpti_ActivityKernel", (
        "kind", "start", "end", "deviceId", "streamId", "correlationId", "name", "graphNodeId",
        "graphId",
    )),
    "kn_ActivityMemcpy": ("CUpti_ActivityMemcpy", (
        "kind", "copyKind", "start", "end", "deviceId", "streamId", "correlationId",
        "graphNodeId", "graphId",
    )),
    "kn_ActivityMemset": ("CUpti_ActivityMemset", (
        "kind", "start", "end", "deviceId", "streamId", "correlationId", "graphNodeId", "graphId",
    )),
    "kn_ActivityExternalCorrelation": ("CUpti_ActivityExternalCorrelation", (
        "kind", "externalKind", "externalId", "correlationId",
    )),
    "kn_ActivityMemory": ("CUpti_ActivityMemory", (
        "kind", "memoryOperationType", "memoryKind", "correlationId", "address", "bytes",
        "timestamp", "deviceId", "streamId", "isAsync",
    )),
}  # fmt: skip
# The versions CUPTI 13.0 writes (the GPU host's CUPTI).
CUPTI_13_0_VERSIONS = {"CUpti_ActivityKernel": 10, "CUpti_ActivityMemcpy": 6,
                       "CUpti_ActivityMemset": 4, "CUpti_ActivityMemory": 4}  # fmt: skip
VALUES = {
    "KN_CUPTI_SUCCESS": "CUPTI_SUCCESS",
    "KN_CUPTI_ERROR_MAX_LIMIT_REACHED": "CUPTI_ERROR_MAX_LIMIT_REACHED",
    "KN_CUPTI_ERROR_INVALID_KIND": "CUPTI_ERROR_INVALID_KIND",
    "KN_CUPTI_ACTIVITY_KIND_MEMCPY": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "KN_CUPTI_ACTIVITY_KIND_MEMSET": "CUPTI_ACTIVITY_KIND_MEMSET",
    "KN_CUPTI_ACTIVITY_KIND_KERNEL": "CUPTI_ACTIVITY_KIND_KERNEL",
    "KN_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL": "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL",
    "KN_CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION": "CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION",
    "KN_CUPTI_ACTIVITY_KIND_MEMORY2": "CUPTI_ACTIVITY_KIND_MEMORY2",
    "KN_CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION": (
        "CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION"
    ),
    "KN_CUPTI_ACTIVITY_FLAG_FLUSH_FORCED": "CUPTI_ACTIVITY_FLAG_FLUSH_FORCED",
    "KN_CUPTI_ACTIVITY_RECORD_ALIGNMENT": "ACTIVITY_RECORD_ALIGNMENT",
    "KN_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED": (
        "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    ),
    "KN_CUPTI_API_ENTER": "CUPTI_API_ENTER",
    "KN_CUPTI_API_EXIT": "CUPTI_API_EXIT",
    "KN_CUPTI_CB_DOMAIN_DRIVER_API": "CUPTI_CB_DOMAIN_DRIVER_API",
    "KN_CUPTI_CB_DOMAIN_RUNTIME_API": "CUPTI_CB_DOMAIN_RUNTIME_API",
    "KN_CUPTI_CB_DOMAIN_RESOURCE": "CUPTI_CB_DOMAIN_RESOURCE",
    **{
        f"KN_CUPTI_CBID_RESOURCE_{name}": f"CUPTI_CBID_RESOURCE_{name}"
        for name in (
            "GRAPH_DESTROY_STARTING",
            "GRAPHNODE_CREATED",
            "GRAPHNODE_DESTROY_STARTING",
            "GRAPHEXEC_DESTROY_STARTING",
            "GRAPHNODE_CLONED",
            "GRAPH_NODE_UPDATED",
        )
    },
    "KN_CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN": "CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN",
    "sizeof(kn_SubscriberParams)": (
        "CUPTI_CALLBACK_STRUCT_SIZE(CUpti_SubscriberParams, oldSubscriberSize)"
    ),
}
SAME_TYPES = {
    "kn_CUptiResult": "CUptiResult",
    "kn_CallbackDomain": "CUpti_CallbackDomain",
    "kn_CallbackId": "CUpti_CallbackId",
    "kn_SubscriberHandle": "CUpti_SubscriberHandle",
    "kn_CallbackFunc": "CUpti_CallbackFunc",
    "kn_Subscribe": "__typeof__(&cuptiSubscribe)",
    "kn_Unsubscribe": "__typeof__(&cuptiUnsubscribe)",
    "kn_EnableCallback": "__typeof__(&cuptiEnableCallback)",
    "kn_GetTimestamp": "__typeof__(&cuptiGetTimestamp)",
    # cuptiSubscribe_v2: the same but for its parameter struct, whose layout is checked above.
    "kn_CUptiResult (*)(kn_SubscriberHandle *, kn_CallbackFunc, void *, "
    "CUpti_SubscriberParams *)": "__typeof__(&cuptiSubscribe_v2)",
    "kn_Subscribe_v2": (
        "kn_CUptiResult (*)(kn_SubscriberHandle *, kn_CallbackFunc, void *, kn_SubscriberParams *)"
    ),
    "kn_CUcontext": "CUcontext",
    "kn_CUstream": "CUstream",
    "kn_CUgraph": "CUgraph",
    "kn_CUgraphNode": "CUgraphNode",
    "kn_CUgraphExec": "CUgraphExec",
    "kn_GetGraphNodeId": "__typeof__(&cuptiGetGraphNodeId)",
    "kn_GetGraphId": "__typeof__(&cuptiGetGraphId)",
    "kn_GetGraphExecId": "__typeof__(&cuptiGetGraphExecId)",
    "kn_BuffersRequested": "CUpti_BuffersCallbackRequestFunc",
    "kn_BuffersCompleted": "CUpti_BuffersCallbackCompleteFunc",
    "kn_ActivityRegisterCallbacks": "__typeof__(&cuptiActivityRegisterCallbacks)",
    "kn_ActivityGetNumDroppedRecords": "__typeof__(&cuptiActivityGetNumDroppedRecords)",
    "kn_ActivityFlushAll": "__typeof__(&cuptiActivityFlushAll)",
    # cuptiActivityGetNextRecord: the same but for its record type, whose kind is checked above.
    "kn_CUptiResult (*)(uint8_t *, size_t, CUpti_Activity **)": (
        "__typeof__(&cuptiActivityGetNextRecord)"
    ),
    "kn_ActivityGetNextRecord": "kn_CUptiResult (*)(uint8_t *, size_t, kn_Activity **)",
}


def missing() -> str:
    if COMPILER is None:
        return "no C compiler"
    if cuda_include() is None:
        return "cuda.h is not there (CUDA_HOME or /usr/local/cuda)"
    if not header_sets():
        return "CUPTI's headers are not installed (the nvidia-cuda-cupti wheel, or CUDA's own)"
    return ""


pytestmark = pytest.mark.skipif(bool(missing()), reason=missing())
HEADER_SETS = header_sets()


def record_versions(includes: list[Path]) -> dict[str, list[str]]:
    """CUPTI's record types to check each of kname's against: the version CUPTI 13.0 writes and
    the newest these headers declare."""
    text = "".join(
        (folder / name).read_text(errors="replace")
        for folder in includes[:1]
        for name in ("cupti_activity.h", "cupti_activity_deprecated.h")
        if (folder / name).exists()
    )
    versions = {}
    for mine, (theirs, _) in RECORDS.items():
        numbers = {int(n or 0) for n in re.findall(rf"}}\s*{theirs}(\d*)\s*;", text)}
        if theirs in CUPTI_13_0_VERSIONS:
            numbers = {CUPTI_13_0_VERSIONS[theirs], max(numbers)}
        versions[mine] = [f"{theirs}{n or ''}" for n in sorted(numbers)]
    return versions


def check_source(includes: list[Path]) -> str:
    lines = [
        "#include <stddef.h>",
        "#include <cupti_result.h>",
        "#include <cupti_callbacks.h>",
        "#include <cupti_activity.h>",
        '#include "cupti_abi.h"',
        "#define SAME_TYPE(a, b) _Static_assert(__builtin_types_compatible_p(a, b), "
        '"not the same type: " #a " and " #b)',
        "#define SAME_FIELD(mine, theirs, f) _Static_assert(offsetof(mine, f) == "
        "offsetof(theirs, f) && sizeof(((mine *)0)->f) == sizeof(((theirs *)0)->f), "
        '"not the same field: " #theirs "." #f)',
        "#define SAME_VALUE(mine, theirs) _Static_assert((mine) == (theirs), "
        '"not the same value: " #mine " and " #theirs)',
        "_Static_assert(sizeof(kn_CallbackData) == sizeof(CUpti_CallbackData), "
        '"not the same size: CUpti_CallbackData");',
        "_Static_assert(sizeof(uint32_t) == sizeof(CUpti_ApiCallbackSite), "
        '"not the same size: CUpti_ApiCallbackSite");',
    ]
    lines += [
        f"SAME_FIELD(kn_CallbackData, CUpti_CallbackData, {f});" for f in CALLBACK_DATA_FIELDS
    ]
    lines += [
        f"SAME_FIELD(kn_SubscriberParams, CUpti_SubscriberParams, {f});"
        for f in SUBSCRIBER_PARAMS_FIELDS
    ]
    lines += [
        f"SAME_FIELD(kn_ResourceData, CUpti_ResourceData, {f});" for f in RESOURCE_DATA_FIELDS
    ]
    lines += [f"SAME_FIELD(kn_GraphData, CUpti_GraphData, {f});" for f in GRAPH_DATA_FIELDS]
    lines += [
        "_Static_assert(sizeof(kn_ResourceData) == sizeof(CUpti_ResourceData), "
        '"not the same size: CUpti_ResourceData");',
        "_Static_assert(sizeof(kn_GraphData) == sizeof(CUpti_GraphData), "
        '"not the same size: CUpti_GraphData");',
        "_Static_assert(sizeof(uint32_t) == sizeof(CUgraphNodeType), "
        '"not the same size: CUgraphNodeType");',
    ]
    lines.append("SAME_FIELD(kn_Activity, CUpti_Activity, kind);")
    for mine, types in record_versions(includes).items():
        for theirs in types:
            lines += [f"SAME_FIELD({mine}, {theirs}, {f});" for f in RECORDS[mine][1]]
            lines.append(
                f"_Static_assert(sizeof({mine}) <= sizeof({theirs}), "
                f'"longer than CUPTI\'s record: {theirs}");'
            )
    lines += [f"SAME_VALUE({mine}, {theirs});" for mine, theirs in VALUES.items()]
    lines += [f"SAME_TYPE({mine}, {theirs});" for mine, theirs in SAME_TYPES.items()]
    return "\n".join(lines) + "\n"


def compile_check(
    tmp_path: Path, header: Path, includes: list[Path]
) -> subprocess.CompletedProcess:
    source = tmp_path / "check_cupti_abi.c"
    source.write_text(check_source(includes))
    return subprocess.run(
        [COMPILER, "-fsyntax-only", "-std=gnu11", "-Wall", "-Werror", f"-I{header.parent}",
         *(f"-I{folder}" for folder in includes), str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("headers", list(HEADER_SETS))
def test_the_declarations_agree_with_cuptis_headers(tmp_path, headers):
    done = compile_check(tmp_path, HEADER, HEADER_SETS[headers])
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("headers", list(HEADER_SETS))
def test_the_records_checked_include_those_cupti_13_0_writes(headers):
    versions = record_versions(HEADER_SETS[headers])
    assert {"CUpti_ActivityKernel10", "CUpti_ActivityMemcpy6", "CUpti_ActivityMemset4"} <= {
        theirs for types in versions.values() for theirs in types
    }
    assert versions["kn_ActivityExternalCorrelation"] == ["CUpti_ActivityExternalCorrelation"]


@pytest.mark.parametrize(
    ("original", "changed", "said"),
    [
        ("    uint32_t contextUid;", "    uint64_t contextUid;", "CUpti_CallbackData.contextUid"),
        ("    const char *symbolName;\n    void *context;",
         "    void *context;\n    const char *symbolName;", "CUpti_CallbackData.symbolName"),
        ("#define KN_CUPTI_API_EXIT 1", "#define KN_CUPTI_API_EXIT 2", "KN_CUPTI_API_EXIT"),
        ("(*kn_GetTimestamp)(uint64_t *timestamp)", "(*kn_GetTimestamp)(uint32_t *timestamp)",
         "kn_GetTimestamp"),
        ("    size_t oldSubscriberSize;", "    uint32_t oldSubscriberSize;",
         "CUpti_SubscriberParams.oldSubscriberSize"),
        ("    uint8_t filler3[40]; /* gridX", "    uint8_t filler3[36]; /* gridX",
         "CUpti_ActivityKernel10.correlationId"),
        ("    uint8_t filler6[4];", "    uint8_t filler6[8];", "CUpti_ActivityKernel10.graphId"),
        ("    uint8_t filler5[32];", "    uint8_t filler5[28];",
         "CUpti_ActivityKernel10.graphNodeId"),
        ("    uint8_t filler2[16]; /* runtimeCorrelationId", "    uint8_t filler2[12]; /* r",
         "CUpti_ActivityMemcpy6.graphNodeId"),
        ("    kn_CUgraph originalGraph; ", "    uint32_t originalGraph; ",
         "CUpti_GraphData.originalGraph"),
        ("    void *resourceDescriptor;", "    uint32_t resourceDescriptor;",
         "CUpti_ResourceData.resourceDescriptor"),
        ("    uint32_t nodeType; ", "    uint64_t nodeType; ", "CUpti_GraphData.nodeType"),
        ("#define KN_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED 20",
         "#define KN_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED 21",
         "KN_CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED"),
        ("(kn_CUgraphNode node, uint64_t *nodeId)", "(kn_CUgraphNode node, uint32_t *nodeId)",
         "kn_GetGraphNodeId"),
        ("    uint8_t copyKind; ", "    uint16_t copyKind; ", "CUpti_ActivityMemcpy6.copyKind"),
        ("    uint8_t filler2[16]; /* flags", "    uint8_t filler2[20]; /* flags",
         "CUpti_ActivityMemset4.graphNodeId"),
        ("    uint64_t externalId;", "    uint32_t externalId;",
         "CUpti_ActivityExternalCorrelation.externalId"),
        ("#define KN_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL 10",
         "#define KN_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL 11",
         "KN_CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"),
        ("(*kn_ActivityFlushAll)(uint32_t flag)", "(*kn_ActivityFlushAll)(uint64_t flag)",
         "kn_ActivityFlushAll"),
        ("size_t validBufferSizeBytes,", "uint32_t validBufferSizeBytes,",
         "kn_ActivityGetNextRecord"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("headers", list(HEADER_SETS))
def test_a_declaration_that_differs_fails_the_check(tmp_path, original, changed, said, headers):
    text = HEADER.read_text()
    assert text.count(original) == 1
    header = tmp_path / "cupti_abi.h"
    header.write_text(text.replace(original, changed))
    done = compile_check(tmp_path, header, HEADER_SETS[headers])
    assert done.returncode != 0 and said in done.stderr, done.stderr
