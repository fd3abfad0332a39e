"""kname.cells: how IPython's cell file names become `<cell N>`. In-process, with no IPython shell
running; the names in real shells and notebooks are tested in test_ipython.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname.cells import cell_path


@given(st.integers(min_value=0, max_value=10**9), st.text("0123456789abcdef", min_size=1))
def test_an_ipython_input_name_is_its_cell_number(number: int, digest: str) -> None:
    assert cell_path(f"<ipython-input-{number}-{digest}>") == f"<cell {number}>"


@pytest.mark.parametrize(
    "filename", ["<stdin>", "app.py", "/tmp/ipykernel_1/2914741263.py", "<ipython-input-x-1>"]
)
def test_other_names_are_no_cell_outside_a_shell(filename: str) -> None:
    # No IPython shell runs in this process: only the terminal's own pattern is recognised.
    assert cell_path(filename) is None
