"""kname's NVTX ranges, as a profiler records them: one push and pop per launch in launch order,
closed when the launch fails, each name registered once, a colour per kernel the same in every
run, in the kname domain or KNAME_DOMAIN's, and none in census mode.

Launches through a user-named target (`fakegpu:launch`) in a subprocess, whose NVTX calls the
injection library records; colours, and a process with no NVTX tool, in-process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import FAKEGPU, line_of
from support.nvtx_capture import run_captured
from test_callsite import clean_env

from kname import ranges
from kname.ranges import colour_of

pytestmark = pytest.mark.launches

CAPTURED = """
import json
import sys

sys.path.insert(0, {root!r})
import kname

kname.install(targets=["fakegpu:launch", "fakegpu:launch_a", "fakegpu:fail"])
import fakegpu


def sites():
    fakegpu.launch(1)  # L:one
    fakegpu.launch(2)  # L:two


for _ in range(3):
    sites()
fakegpu.launch_a()  # L:a

caught = None
try:
    fakegpu.fail("boom: the launch failed")  # L:fail
except ValueError as exc:
    caught = exc
print(json.dumps({{"type": type(caught).__name__, "message": str(caught)}}))
print(json.dumps(kname.names()))
"""


def run_fakegpu_captured(inject_lib: Path, tmp_path: Path, **env: str | None):
    """Run CAPTURED under NVTX capture; return (names, exception seen, capture)."""
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    script = tmp_path / "captured_app.py"
    script.write_text(CAPTURED.format(root=str(tmp_path)))
    done, cap = run_captured([sys.executable, str(script)], inject_lib, tmp_path,
                             env=clean_env(**env), cwd=tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    *_, caught, names = done.stdout.splitlines()
    return json.loads(names), json.loads(caught), cap


def captured_name(marker: str, function: str) -> str:
    return f"{function} captured_app.py:{line_of(CAPTURED, marker)}"


def test_ranges_are_pushed_and_popped_in_launch_order(inject_lib, tmp_path) -> None:
    _, _, cap = run_fakegpu_captured(inject_lib, tmp_path)
    one, two = captured_name("L:one", "sites"), captured_name("L:two", "sites")
    a, fail = captured_name("L:a", "<module>"), captured_name("L:fail", "<module>")
    assert cap.ranges("kname") == [one, two] * 3 + [a, fail]
    kinds = [e.kind for e in cap.events if e.domain == "kname" and e.kind in ("push", "pop")]
    assert kinds == ["push", "pop"] * 8
    assert cap.balanced(), cap.stack_errors()
    assert cap.max_depth("kname") == 1


def test_each_site_registers_its_string_once(inject_lib, tmp_path) -> None:
    names, _, cap = run_fakegpu_captured(inject_lib, tmp_path)
    registered = cap.registered_strings("kname")
    assert sorted(registered) == sorted(names)
    assert len(registered) == len(set(registered)) == 4
    assert names[captured_name("L:one", "sites")] == 3


def test_a_failing_launch_closes_its_range_and_raises_unchanged(inject_lib, tmp_path) -> None:
    names, caught, cap = run_fakegpu_captured(inject_lib, tmp_path)
    assert caught == {"type": "ValueError", "message": "boom: the launch failed"}
    assert names[captured_name("L:fail", "<module>")] == 1
    assert cap.ranges("kname")[-1] == captured_name("L:fail", "<module>")
    last = [e.kind for e in cap.events if e.domain == "kname" and e.kind in ("push", "pop")][-2:]
    assert last == ["push", "pop"]  # the failed launch's range was closed
    assert cap.balanced(), cap.stack_errors()


def test_a_kernel_has_the_same_colour_in_every_run(inject_lib, tmp_path) -> None:
    colours = []
    for seed in ("1", "2"):
        _, _, cap = run_fakegpu_captured(inject_lib, tmp_path, PYTHONHASHSEED=seed)
        colours.append({e.message: e.color for e in cap.of("push", "kname")})
    assert colours[0] == colours[1]
    one, two = captured_name("L:one", "sites"), captured_name("L:two", "sites")
    assert colours[0][one] == colours[0][two]  # same kernel, same colour
    assert colours[0][one] == colour_of("launch")


def test_ranges_are_in_the_kname_domain_unless_kname_domain_says(inject_lib, tmp_path) -> None:
    names, _, cap = run_fakegpu_captured(inject_lib, tmp_path)
    assert "kname" in cap.domains()
    assert len(cap.ranges("kname")) == sum(names.values())
    names, _, mine = run_fakegpu_captured(inject_lib, tmp_path, KNAME_DOMAIN="mine")
    assert len(mine.ranges("mine")) == sum(names.values())
    assert mine.ranges("kname") == []
    assert "kname" not in mine.domains()


def test_census_mode_counts_launches_but_emits_no_ranges(inject_lib, tmp_path) -> None:
    names, caught, cap = run_fakegpu_captured(inject_lib, tmp_path, KNAME_MODE="census")
    assert names == {
        captured_name("L:one", "sites"): 3,
        captured_name("L:two", "sites"): 3,
        captured_name("L:a", "<module>"): 1,
        captured_name("L:fail", "<module>"): 1,
    }
    assert caught["type"] == "ValueError"
    assert cap.of("push") == [] and cap.of("pop") == []
    assert cap.registered_strings("kname") == []


# --------------------------------------------------------------------------
# In-process: colours, and no ranges where no NVTX tool listens
# --------------------------------------------------------------------------


# Kernel names as Python has them: identifiers, dotted paths, and lone surrogates (a name from
# os.fsdecode of bytes that are not UTF-8).
kernel_names = st.text(st.characters(categories=["Lu", "Ll", "Lo", "Nd", "Pc", "Po", "Cs"]))


@given(kernel_names)
def test_any_kernel_name_gets_one_of_the_palettes_colours(kernel: str) -> None:
    assert colour_of(kernel) in ranges.PALETTE


def test_the_palette_has_twelve_distinct_colours_each_some_kernels() -> None:
    assert len(set(ranges.PALETTE)) == 12
    assert {colour_of(f"kernel_{n}") for n in range(500)} == set(ranges.PALETTE)


def test_without_an_nvtx_tool_no_range_is_made_and_no_name_registered() -> None:
    # This process never had an NVTX tool: the nvtx package's domain is its dummy.
    before = ranges.registered_names()
    assert not ranges.tool_attached()
    assert ranges.range_for("step app.py:3", "axpy", "numba") is None
    assert ranges.registered_names() == before
