"""kname/_show_ranges_c/nvtx_tool.h, the NVTX declarations of kname's two NVTX tools (show_ranges.c
beside it and the tests' tests/support/nvtx_inject.c), against NVTX's own headers.

Neither tool is built with NVTX's headers. Where they are installed (the nvidia-nvtx wheel, a test
requirement) and a C compiler is found, a small C file includes both and asserts, at compile time,
that every value the header declares is NVTX's, and that the layouts of the structs NVTX hands a
tool and the types of its functions agree; a copy of the header with one thing changed must fail
to compile.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from support import REPO
from support.cupti_stand_in import COMPILER
from support.nvtx_capture import nvtx_include_dir

HEADER = REPO / "kname" / "_show_ranges_c" / "nvtx_tool.h"
SHOW_RANGES = HEADER.with_name("show_ranges.c")

# kname's name -> NVTX's, for the values that are not slot ids (those are matched by name).
VALUES = {
    "ETID_CALLBACKS": "NVTX_ETID_CALLBACKS",
    "MODULE_CORE": "NVTX_CB_MODULE_CORE",
    "MODULE_CORE2": "NVTX_CB_MODULE_CORE2",
    "MESSAGE_ASCII": "NVTX_MESSAGE_TYPE_ASCII",
    "MESSAGE_UNICODE": "NVTX_MESSAGE_TYPE_UNICODE",
    "MESSAGE_REGISTERED": "NVTX_MESSAGE_TYPE_REGISTERED",
    "COLOR_ARGB": "NVTX_COLOR_ARGB",
    "EVENT_ATTRIBUTES_VERSION": "NVTX_VERSION",
    "sizeof(event_attributes)": "NVTX_EVENT_ATTRIB_STRUCT_SIZE",
}
# event_attributes' fields -> nvtxEventAttributes_t's.
ATTRIBUTE_FIELDS = {
    "version": "version", "size": "size", "category": "category", "color_type": "colorType",
    "color": "color", "payload_type": "payloadType", "reserved0": "reserved0",
    "payload": "payload", "message_type": "messageType", "message": "message",
}  # fmt: skip
SAME_TYPES = {
    "nvtx_function": "NvtxFunctionPointer",
    "nvtx_function_table": "NvtxFunctionTable",
    "nvtx_get_export_table": "NvtxGetExportTableFunc_t",
    "__typeof__(((nvtx_callbacks *)0)->GetModuleFunctionTable)": (
        "__typeof__(((NvtxExportTableCallbacks *)0)->GetModuleFunctionTable)"
    ),
    # What each tool defines: InitializeInjectionNvtx2(get_export_table).
    "int (*)(nvtx_get_export_table)": "NvtxInitializeInjectionNvtxFunc_t",
    "__typeof__(((event_attributes *)0)->message.ascii)": "const char *",
    "__typeof__(((event_attributes *)0)->message.unicode)": "const wchar_t *",
}


def missing() -> str:
    if COMPILER is None:
        return "no C compiler"
    if nvtx_include_dir() is None:
        return "NVTX's headers are not installed (nvidia-nvtx is a test requirement)"
    return ""


pytestmark = pytest.mark.skipif(bool(missing()), reason=missing())


def slot_ids(header: Path) -> dict[str, str]:
    """Each slot id the header declares (CORE_RangePop, CORE2_DomainCreateA, ...) -> NVTX's."""
    names = re.findall(r"\b(CORE2?_\w+) = \d+", header.read_text())
    return {name: f"NVTX_CBID_{name}" for name in names}


def check_source(header: Path) -> str:
    lines = [
        "#define NVTX_NO_IMPL",
        "#include <stddef.h>",
        "#include <nvtx3/nvToolsExt.h>",
        f'#include "{header.name}"',
        "#define SAME_VALUE(mine, theirs) _Static_assert((long long)(mine) == (long long)(theirs), "
        '"not the same value: " #mine " and " #theirs)',
        "#define SAME_TYPE(a, b) _Static_assert(__builtin_types_compatible_p(a, b), "
        '"not the same type: " #a " and " #b)',
        "#define SAME_FIELD(mine, theirs, f, g) _Static_assert(offsetof(mine, f) == "
        "offsetof(theirs, g) && sizeof(((mine *)0)->f) == sizeof(((theirs *)0)->g), "
        '"not the same field: " #theirs "." #g)',
        "_Static_assert(sizeof(event_attributes) == sizeof(nvtxEventAttributes_t), "
        '"not the same size: nvtxEventAttributes_t");',
        "_Static_assert(sizeof(nvtx_callbacks) == sizeof(NvtxExportTableCallbacks), "
        '"not the same size: NvtxExportTableCallbacks");',
        "SAME_FIELD(nvtx_callbacks, NvtxExportTableCallbacks, struct_size, struct_size);",
        "SAME_FIELD(nvtx_callbacks, NvtxExportTableCallbacks, GetModuleFunctionTable, "
        "GetModuleFunctionTable);",
    ]
    lines += [
        f"SAME_FIELD(event_attributes, nvtxEventAttributes_t, {mine}, {theirs});"
        for mine, theirs in ATTRIBUTE_FIELDS.items()
    ]
    values = {**VALUES, **slot_ids(header)}
    lines += [f"SAME_VALUE({mine}, {theirs});" for mine, theirs in values.items()]
    lines += [f"SAME_TYPE({mine}, {theirs});" for mine, theirs in SAME_TYPES.items()]
    return "\n".join(lines) + "\n"


def compile_check(tmp_path: Path, header: Path) -> subprocess.CompletedProcess:
    source = tmp_path / "check_nvtx_tool.c"
    source.write_text(check_source(header))
    return subprocess.run(
        [COMPILER, "-fsyntax-only", "-std=gnu11", "-Wall", "-Werror", f"-I{header.parent}",
         f"-I{nvtx_include_dir()}", str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_the_declarations_agree_with_nvtxs_headers(tmp_path: Path) -> None:
    done = compile_check(tmp_path, HEADER)
    assert done.returncode == 0, done.stderr


def test_every_slot_the_tools_fill_is_checked() -> None:
    """The slot ids are checked by name: each one either tool puts a function in is one."""
    declared = set(slot_ids(HEADER))
    for tool in (SHOW_RANGES, REPO / "tests" / "support" / "nvtx_inject.c"):
        used = set(re.findall(r"SLOT\((CORE2?_\w+),", tool.read_text()))
        assert used and used <= declared, (tool.name, sorted(used - declared))


@pytest.mark.parametrize(
    ("original", "changed", "said"),
    [
        ("CORE_NameCategoryA = 12", "CORE_NameCategoryA = 13", "NVTX_CBID_CORE_NameCategoryA"),
        ("CORE2_DomainDestroy = 14", "CORE2_DomainDestroy = 15", "NVTX_CBID_CORE2_DomainDestroy"),
        ("MESSAGE_REGISTERED = 3", "MESSAGE_REGISTERED = 4", "NVTX_MESSAGE_TYPE_REGISTERED"),
        ("    uint16_t size;", "    uint32_t size;", "nvtxEventAttributes_t.category"),
        ("    int32_t message_type;", "    int64_t message_type;", "nvtxEventAttributes_t.message"),
        ("(uint32_t export_table_id)", "(uint64_t export_table_id)", "nvtx_get_export_table"),
        ("(unsigned int module,", "(size_t module,", "GetModuleFunctionTable"),
    ],
)  # fmt: skip
def test_a_declaration_that_differs_fails_the_check(tmp_path, original, changed, said) -> None:
    text = HEADER.read_text()
    assert text.count(original) == 1
    header = tmp_path / HEADER.name
    header.write_text(text.replace(original, changed))
    done = compile_check(tmp_path, header)
    assert done.returncode != 0 and said in done.stderr, done.stderr
