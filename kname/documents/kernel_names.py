"""Readable kernel names for tables, pages and traces (the JSON keeps CUPTI's exact names).

CUPTI reports C++ kernels by their mangled symbol (`_Z9scale_rawPfi`, numba's
`_ZN6cudapy8__main__4axpyB2v1B94cw51...E5ArrayIfLi1E1C7mutable7alignedE...`). The display form is
the demangled name without its parameter list, return type and ABI tags: `scale_raw`,
`cudapy::__main__::axpy`. Demangling uses the C++ runtime's own `__cxa_demangle`; without it,
names are shown as they are. Short forms can meet (two cuBLAS kernels cut at the same place):
within one table, distinct_forms tells them apart by a digest of the full name.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from collections.abc import Mapping

MAX_DISPLAY = 80
CUT = "..."  # ends a name cut to MAX_DISPLAY
_ABI_TAG = re.compile(r"\[abi:[^\]]*\]")
_RETURN_TYPE = re.compile(r"^(?:void|int|float|double|unsigned|bool)\s+(?=\S)")


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The demangled C++ name, or `name` itself when it is not mangled or cannot be demangled."""
    if not name.startswith("_Z"):
        return name
    runtime = _cxx_runtime()
    if runtime is None:
        return name
    demangler, free = runtime
    import ctypes  # already loaded by _cxx_runtime()

    status = ctypes.c_int(0)
    result = demangler(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not result:
        return name
    try:
        text = ctypes.string_at(result).decode("utf-8", "replace") if status.value == 0 else name
    finally:
        free(result)
    return text


@functools.lru_cache(maxsize=4096)
def display_name(name: str) -> str:
    """A short, readable kernel name: demangled, without parameters, return type or ABI tags."""
    if name.startswith("["):  # "[memcpy HtoD]", "[memset]": already readable
        return name
    text = _RETURN_TYPE.sub("", _without_parameters(demangle(name)))
    text = _ABI_TAG.sub("", text).strip() or name
    if len(text) > MAX_DISPLAY:
        text = _without_template_arguments(text)
    return text if len(text) <= MAX_DISPLAY else text[: MAX_DISPLAY - len(CUT)] + CUT


def distinct_forms(shown: Mapping[str, str], width: int) -> dict[str, str]:
    """`shown` ({name: its short form}) with each form that several names share told apart by
    a digest of the name (`#1a2b3c`), every form at most `width` characters (more than 20)."""
    shared = Counter(shown.values())
    forms: dict[str, str] = {}
    taken: set[str] = set()
    for name, form in shown.items():
        told = _with_digest(form, name, width) if shared[form] > 1 else form
        # A digest can still meet another name's form: number it until it is free.
        number = 1
        while told in taken:
            number += 1
            told = _with_digest(form, name, width, f"-{number}")
        forms[name] = told
        taken.add(told)
    return forms


def _with_digest(form: str, name: str, width: int, tail: str = "") -> str:
    digest = "#" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:6] + tail
    if form.endswith(CUT) and len(form) >= 2 * len(CUT) + len(digest):
        # A cut form: the digest takes its last characters, so the cell keeps its width.
        return form[: len(form) - len(CUT) - len(digest)] + CUT + digest
    return form[: width - len(digest) - 1] + " " + digest


def _without_parameters(text: str) -> str:
    """Cut the final balanced `(...)`: template arguments may hold parentheses of their own."""
    if not text.endswith(")"):
        return text
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        if text[index] == ")":
            depth += 1
        elif text[index] == "(":
            depth -= 1
            if depth == 0:
                return text[:index] if index else text
    return text


def _without_template_arguments(text: str) -> str:
    """`f<4, g<float>, h>` -> `f<...>`: outermost template argument lists collapsed."""
    kept, depth = [], 0
    for char in text:
        if char == "<":
            depth += 1
            if depth == 1:
                kept.append("<...")
        elif char == ">" and depth:
            depth -= 1
            if depth == 0:
                kept.append(">")
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


@functools.cache
def _cxx_runtime():
    """(__cxa_demangle, free) from the C++ runtime, or None where there is none."""
    # Imported here: `import kname` reaches this module (the census table) and never demangles.
    import ctypes
    import ctypes.util

    for candidate in (ctypes.util.find_library("stdc++"), "libstdc++.so.6", "libc++.so.1"):
        if not candidate:
            continue
        try:
            library = ctypes.CDLL(candidate)
            demangler = library.__cxa_demangle
        except (OSError, AttributeError):
            continue
        demangler.restype = ctypes.c_void_p
        demangler.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int),
        ]
        try:
            free = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").free
        except (OSError, AttributeError):
            return None
        free.argtypes = [ctypes.c_void_p]
        free.restype = None
        return demangler, free
    return None
