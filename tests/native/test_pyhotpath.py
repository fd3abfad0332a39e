"""kname.pyhotpath: the pure-Python twins of the C extension's types, on their own.

Each twin is run against its C type by the tests marked `launches` (test_native.py,
test_targets_triton.py, ...); here, what the twins promise whatever the hot path.
"""

from __future__ import annotations

import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname import pyhotpath

kernels = st.builds(types.SimpleNamespace, dispatcher=st.integers())


@given(st.lists(kernels, max_size=6).map(tuple), st.integers(0, 7), st.booleans())
def test_a_kernel_arg_is_the_argument_at_its_index_or_its_attribute_and_none_past_the_end(
    args: tuple, index: int, by_attribute: bool
) -> None:
    attribute = "dispatcher" if by_attribute else None
    found = pyhotpath.KernelArg(index, attribute)(args)
    if index >= len(args):
        assert found is None
    else:
        assert found == (args[index].dispatcher if by_attribute else args[index])


def test_a_kernel_arg_says_where_it_looks() -> None:
    assert repr(pyhotpath.KernelArg(0, "dispatcher")) == "KernelArg(0, 'dispatcher')"


class Kernel:
    def run(self, *args, **kwargs):
        return args, kwargs


def test_a_subscript_launch_passes_the_key_and_fixed_keywords_through_the_wrapper() -> None:
    wrapped = []

    def wrap(call):
        def launch(*args, **kwargs):
            wrapped.append(args[1:2])  # the key, as the launch wrapper sees it
            return call(*args, **kwargs)

        return launch

    Kernel.__getitem__ = pyhotpath.subscript_launch(wrap, "run", "grid", {"warmup": False})
    try:
        assert Kernel()[(4, 1)](1, 2, stream=0) == ((1, 2), {"stream": 0, "grid": (4, 1),
                                                             "warmup": False})  # fmt: skip
        assert wrapped == [((4, 1),)]
        with pytest.raises(TypeError):
            Kernel()[(4, 1)](grid=(8, 1))  # the key given twice, as Triton would refuse it
    finally:
        del Kernel.__getitem__
