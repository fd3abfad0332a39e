"""kname/_cupti_abi.h, the CUPTI declarations kname builds with, against CUPTI's real headers.

kname._native_cupti is built without CUDA headers, from its own copy of the few CUPTI types and
functions it uses. Where the real headers are installed (the nvidia-cuda-cupti wheel's include
folder, cuda.h under CUDA_HOME or /usr/local/cuda) and a C compiler is found, a small C file
includes both and asserts, at compile time, that sizes, field offsets, enum values and function
types agree; a copy of the header with one thing changed must fail to compile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from support import REPO

COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
HEADER = REPO / "kname" / "_cupti_abi.h"

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
VALUES = {
    "KN_CUPTI_SUCCESS": "CUPTI_SUCCESS",
    "KN_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED": (
        "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
    ),
    "KN_CUPTI_API_ENTER": "CUPTI_API_ENTER",
    "KN_CUPTI_API_EXIT": "CUPTI_API_EXIT",
    "KN_CUPTI_CB_DOMAIN_DRIVER_API": "CUPTI_CB_DOMAIN_DRIVER_API",
    "KN_CUPTI_CB_DOMAIN_RUNTIME_API": "CUPTI_CB_DOMAIN_RUNTIME_API",
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
}


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


def missing() -> str:
    if COMPILER is None:
        return "no C compiler"
    if cupti_include() is None:
        return "CUPTI's headers are not installed (the nvidia-cuda-cupti wheel)"
    if cuda_include() is None:
        return "cuda.h is not there (CUDA_HOME or /usr/local/cuda)"
    return ""


pytestmark = pytest.mark.skipif(bool(missing()), reason=missing())


def check_source() -> str:
    lines = [
        "#include <stddef.h>",
        "#include <cupti_result.h>",
        "#include <cupti_callbacks.h>",
        "#include <cupti_activity.h>",
        '#include "_cupti_abi.h"',
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
    lines += [f"SAME_VALUE({mine}, {theirs});" for mine, theirs in VALUES.items()]
    lines += [f"SAME_TYPE({mine}, {theirs});" for mine, theirs in SAME_TYPES.items()]
    return "\n".join(lines) + "\n"


def compile_check(tmp_path: Path, header: Path) -> subprocess.CompletedProcess:
    source = tmp_path / "check_cupti_abi.c"
    source.write_text(check_source())
    return subprocess.run(
        [COMPILER, "-fsyntax-only", "-std=gnu11", "-Wall", "-Werror", f"-I{header.parent}",
         f"-I{cupti_include()}", f"-I{cuda_include()}", str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_the_declarations_agree_with_cuptis_headers(tmp_path):
    done = compile_check(tmp_path, HEADER)
    assert done.returncode == 0, done.stderr


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
    ],
)  # fmt: skip
def test_a_declaration_that_differs_fails_the_check(tmp_path, original, changed, said):
    text = HEADER.read_text()
    assert text.count(original) == 1
    header = tmp_path / "_cupti_abi.h"
    header.write_text(text.replace(original, changed))
    done = compile_check(tmp_path, header)
    assert done.returncode != 0 and said in done.stderr, done.stderr
