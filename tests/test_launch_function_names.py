"""Launches from comprehensions are named as on Python 3.12+, where list, set and dict
comprehensions run in the frame of the function they are written in (PEP 709): by that
function, and with KNAME_DEPTH, with that function's caller as the next frame. Generator
expressions keep their own frame, and name, on every version.

Launched through a user-named target (`fakegpu:launch`, a module written into tmp_path).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from support import FAKEGPU, line_of

import kname

pytestmark = pytest.mark.launches

MODEL = """\
import fakegpu


class Model:
    def step(self):
        [fakegpu.launch(i) for i in range(2)]  # list
        {fakegpu.launch(i) for i in range(3)}  # set
        {fakegpu.launch(i): i for i in range(4)}  # dict
        [[fakegpu.launch(i) for i in range(5)] for _ in range(1)]  # nested
        list(fakegpu.launch(i) for i in range(6))  # generator


def train():
    Model().step()  # train
"""


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The module `model` (MODEL), importable from tmp_path beside fakegpu."""
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    (tmp_path / "model.py").write_text(MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield lambda: importlib.import_module("model")
    for name in ("model", "fakegpu"):
        sys.modules.pop(name, None)


def at(marker: str) -> str:
    return f"model.py:{line_of(MODEL, marker)}"


def test_a_launch_in_a_comprehension_is_named_after_the_function_it_is_written_in(model):
    kname.install(targets=["fakegpu:launch"])
    model().train()
    assert kname.names() == {
        f"Model.step {at('# list')}": 2,
        f"Model.step {at('# set')}": 3,
        f"Model.step {at('# dict')}": 4,
        f"Model.step {at('# nested')}": 5,
        f"Model.step.<locals>.<genexpr> {at('# generator')}": 6,
    }


def test_with_kname_depth_the_caller_of_a_comprehension_is_its_functions_caller(
    model, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KNAME_DEPTH", "2")
    kname.install(targets=["fakegpu:launch"])
    model().train()
    caller = f"train {at('# train')}"
    assert kname.names() == {
        f"Model.step {at('# list')} < {caller}": 2,
        f"Model.step {at('# set')} < {caller}": 3,
        f"Model.step {at('# dict')} < {caller}": 4,
        f"Model.step {at('# nested')} < {caller}": 5,
        f"Model.step.<locals>.<genexpr> {at('# generator')} < Model.step {at('# generator')}": 6,
    }
