"""Readable kernel names, for tables, pages and traces.

Kernel names are demangled by the C++ runtime's real `__cxa_demangle` (libstdc++ is on every
machine these tests run on).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname.documents.kernel_names import CUT, demangle, display_name, distinct_forms

NUMBA_AXPY = "_ZN6cudapy8__main__4axpyB2v1E5ArrayIfLi1E1C7mutable7alignedEf"
TORCH_ADD = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEE"
    "viT0_T1_"
)


def test_mangled_names_are_demangled_and_shortened():
    assert demangle("_Z9scale_rawPfi") == "scale_raw(float*, int)"
    assert display_name("_Z9scale_rawPfi") == "scale_raw"
    assert demangle(NUMBA_AXPY).startswith("cudapy::__main__::axpy[abi:v1](Array<float, 1")
    assert display_name(NUMBA_AXPY) == "cudapy::__main__::axpy"
    assert display_name(TORCH_ADD) == "at::native::vectorized_elementwise_kernel<...>"


@pytest.mark.parametrize(
    "name", ["scale_raw", "triton_poi_fused_add_0", "_Zbad", "[memcpy HtoD]", ""]
)
def test_names_that_are_not_mangled_stay_as_they_are(name):
    assert display_name(name) == name
    assert demangle(name) == name


@given(st.lists(st.text(max_size=30), min_size=1, unique=True), st.text(max_size=90), st.booleans())
def test_names_sharing_one_form_get_distinct_forms_and_a_cut_form_keeps_its_width(
    names, form, was_cut
):
    form += CUT * was_cut
    forms = distinct_forms(dict.fromkeys(names, form), width=120)
    assert len(set(forms.values())) == len(names)
    assert all(len(told) <= 120 for told in forms.values())
    if len(names) > 1 and was_cut and len(form) >= 20:
        assert all(len(told) == len(form) and CUT + "#" in told for told in forms.values())
