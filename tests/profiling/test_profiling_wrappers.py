"""kname's library launch wrappers out of the call path while a profile names launches from
CUPTI's callback (kname.profiling.wrappers, issue 43), and back when it stops.

A built-in target in a process of its own: numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1, its
FakeCUDAKernel.__call__ is numba's built-in target there), beside a KNAME_TARGETS launcher
(fakegpu), which stays; CUPTI is the tests' stand-in libcupti (tests/support/fake_cupti.c),
which is what kname does not own and cannot run here. Which conditions keep the wrappers is
asked of why_kept in this process, on the configuration install() read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import FAKEGPU, REPO
from support.nvtx_capture import null_env

import kname
from kname import lifecycle
from kname.config import FORMAT_FIELDS
from kname.profiling import wrappers

pytest.importorskip("numba")

SCRIPT = """
import os, sys
from types import SimpleNamespace
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
sys.path[:0] = [{repo!r}, {tests!r}, {folder!r}]
from support.cupti_stand_in import StandInBinding

import kname
from kname.patching import is_wrapper
from kname.profiling import native_callback
from kname.profiling.session import ProfileSession

sys.modules["cupti"] = SimpleNamespace(cupti=StandInBinding())
native_callback.libcupti_path = lambda: {libcupti!r}
kname.install(targets=["numba", "fakegpu:launch"])
kname.profile()  # its install lends kname profile's sessions the wrappers
import fakegpu


def wrapped():
    from numba.cuda.simulator import kernel

    numba = is_wrapper(vars(kernel.FakeCUDAKernel)["__call__"])
    return f"numba {{numba}} launcher {{is_wrapper(fakegpu.launch)}}"


if {numba_first}:
    from numba import cuda
print("before:", wrapped() if {numba_first} else "numba not imported")
session = ProfileSession(keep_wrappers={keep})
print("started:", session.start(), "out:", session.wrappers_out)
from numba import cuda  # imported while collecting, where it was not before
print("collecting:", wrapped())
kname.disable()
kname.enable()
print("enabled again:", wrapped())
session.stop()
print("stopped:", wrapped())
"""


def run_script(tmp_path: Path, libcupti: Path, env: dict, **choices: bool) -> list[str]:
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    script = SCRIPT.format(
        repo=str(REPO),
        tests=str(REPO / "tests"),
        folder=str(tmp_path),
        libcupti=str(libcupti),
        **choices,
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def clean_env(**more: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    env.update({k: v for k, v in more.items() if v is not None})
    return env


def run_after_head(tmp_path: Path, libcupti: Path, tail: str) -> subprocess.CompletedProcess:
    """SCRIPT's set-up (stand-in CUPTI, kname installed), then `tail`; it must exit 0."""
    head = SCRIPT.split("if {numba_first}:")[0]
    (tmp_path / "fakegpu.py").write_text(FAKEGPU)
    script = head.format(
        repo=str(REPO), tests=str(REPO / "tests"), folder=str(tmp_path), libcupti=str(libcupti)
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script + tail)], cwd=tmp_path, env=clean_env(),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("numba_first", [True, False], ids=["imported before", "while out"])
def test_a_profile_takes_the_library_launch_wrappers_out_and_puts_them_back_when_it_stops(
    tmp_path, fake_libcupti, numba_first: bool
) -> None:
    lines = run_script(tmp_path, fake_libcupti, clean_env(), numba_first=numba_first, keep=False)
    before = "before: numba True launcher True" if numba_first else "before: numba not imported"
    assert lines == [
        before,
        "started: True out: True",
        "collecting: numba False launcher True",  # the launcher is named at its own call
        "enabled again: numba False launcher True",  # enable() leaves them out meanwhile
        "stopped: numba True launcher True",
    ]


def test_keep_wrappers_and_an_nvtx_tool_attached_each_keep_them_in_the_call_path(
    tmp_path, fake_libcupti, inject_lib
) -> None:
    kept = ["collecting: numba True launcher True", "stopped: numba True launcher True"]
    lines = run_script(tmp_path, fake_libcupti, clean_env(), numba_first=True, keep=True)
    assert lines[1] == "started: True out: False" and lines[2:3] + lines[4:] == kept
    tool = clean_env(**null_env(inject_lib))  # the ranges a tool reads: the wrappers' own
    lines = run_script(tmp_path, fake_libcupti, tool, numba_first=True, keep=False)
    assert lines[1] == "started: True out: False" and lines[2:3] + lines[4:] == kept


AT_EXIT = """
import atexit
atexit.register(lambda: print("after the profile's exit:", wrapped()))  # runs after the session's
session = ProfileSession()
session.start()
session.write_at_exit(print_table=False)
print("collecting:", wrapped())
"""


def test_a_profile_ended_by_the_program_s_exit_leaves_the_wrappers_out(
    tmp_path, fake_libcupti
) -> None:
    """At exit there is nothing left to name: no class is patched again, nor can fail to be."""
    done = run_after_head(tmp_path, fake_libcupti, "from numba import cuda\n" + AT_EXIT)
    assert done.stdout.splitlines() == [
        "collecting: numba False launcher True",
        "after the profile's exit: numba False launcher True",
    ]
    assert "cannot wrap" not in done.stderr


STRETCH = """
from numba import cuda
import numpy
from kname import stretch


@cuda.jit
def add_one(a):
    a[0] += 1


def launch(times):
    for _ in range(times):
        add_one[1, 1](numpy.zeros(1))


session = ProfileSession()
print("started:", session.start(), "out:", session.wrappers_out, wrapped())
cell = stretch.Stretch()  # %%kname's and kname_census's census, begun while collecting
print("stretch:", wrapped())
launch(3)
print("counted:", cell.launches())
session.stop()
launch(2)
print("stopped:", wrapped(), cell.launches())
again = ProfileSession()
print("again:", again.start(), "out:", again.wrappers_out, wrapped())
launch(1)
again.stop()
print("last:", cell.launches())
"""


def test_a_stretch_begun_while_a_profile_collects_puts_the_wrappers_back_and_counts_every_launch(
    tmp_path, fake_libcupti
) -> None:
    """A notebook cell's `%%kname` or a test's `kname_census` inside kname.profile(): its counts
    are the wrappers', so they come back at once and stay for later profiles; the session's stop
    puts nothing back twice (a launch wrapped twice counts two)."""
    done = run_after_head(tmp_path, fake_libcupti, STRETCH)
    assert done.stdout.splitlines() == [
        "started: True out: True numba False launcher True",
        "stretch: numba True launcher True",
        "counted: 3",
        "stopped: numba True launcher True 5",
        "again: True out: False numba True launcher True",
        "last: 6",
    ]


TAGGING = """
from kname.profiling.cupti_collector import CuptiCollector


class Tagging(CuptiCollector):  # external_correlation=True's calls (the stand-in has no ids)
    def external_calls(self):
        return (lambda external_id: None, lambda: None)


session = ProfileSession(collector=Tagging)
print("tagging:", session.start(), "out:", session.wrappers_out, wrapped())
session.stop()
"""


def test_a_collector_tagging_launches_with_external_correlation_ids_keeps_the_wrappers(
    tmp_path, fake_libcupti
) -> None:
    """The wrappers push and pop the ids around each launch: out, nothing would be tagged."""
    done = run_after_head(tmp_path, fake_libcupti, "from numba import cuda\n" + TAGGING)
    assert done.stdout.splitlines() == ["tagging: True out: False numba True launcher True"]


@pytest.mark.parametrize(
    ("variables", "reason"),
    [
        ({}, None),
        ({"KNAME_MODE": "profile", "KNAME_REPORT": "p.json"}, None),
        ({"KNAME_FORMAT": "{kernel} {path}:{line}"}, "KNAME_FORMAT names the kernel"),
        ({"KNAME_FORMAT": "{function} ({lib!r:>6})"}, "KNAME_FORMAT names the kernel"),
        ({"KNAME_MODE": "rename"}, "KNAME_MODE=rename renames kernels"),
        ({"KNAME_REPORT": "census.json"}, "a census is written at exit"),
    ],
    ids=["defaults", "kname profile", "kernel", "lib", "rename", "census"],
)
def test_the_wrappers_stay_where_something_reads_what_they_add(
    monkeypatch, tmp_path, variables: dict, reason: str | None
) -> None:
    monkeypatch.chdir(tmp_path)  # a census or profile at exit: written here
    for variable, value in variables.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setattr(lifecycle, "_start_profiling", lambda config: None)  # no session here
    kname.profile()  # installs kname, which lends its sessions the wrappers
    said = wrappers.why_kept(native_callback=True)
    assert said is None if reason is None else said.startswith(reason)
    assert wrappers.why_kept(native_callback=False) == "the Python callback collects"


def test_without_an_install_the_wrappers_stay() -> None:
    assert wrappers.why_kept(native_callback=True) == "kname is not installed"
    assert not wrappers.take_out(native_callback=True) and not lifecycle.wrappers_are_out()


FIELD = st.sampled_from(FORMAT_FIELDS)
LITERAL = st.text(st.characters(blacklist_characters="{}"), max_size=8)
PART = st.tuples(
    LITERAL, FIELD, st.sampled_from(["", "!r", "!s"]), st.sampled_from(["", ":>10", ":.5"])
)


@given(st.lists(PART, max_size=6), LITERAL)
def test_format_fields_are_the_names_of_the_fields_a_template_has_whatever_their_spec(
    parts: list, tail: str
) -> None:
    template = "".join(
        f"{text}{{{name}{conversion}{spec}}}" for text, name, conversion, spec in parts
    )
    assert wrappers.format_fields(template + tail) == {name for _, name, _, _ in parts}


MODE_SCRIPT = """
import os, sys
from types import SimpleNamespace
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
sys.path[:0] = [{repo!r}, {tests!r}]
from support.cupti_stand_in import StandInBinding

sys.modules["cupti"] = SimpleNamespace(cupti=StandInBinding())
from kname.profiling import native_callback

native_callback.libcupti_path = lambda: {libcupti!r}
from numba import cuda  # imported before kname: its target is wrapped as install() runs
from numba.cuda.simulator import kernel

import kname
from kname.patching import is_wrapper
from kname.profiling import mode

kname.install()
print(mode._session.wrappers_out, is_wrapper(vars(kernel.FakeCUDAKernel)["__call__"]))
"""


def test_kname_profile_from_start_up_never_puts_a_library_wrapper_in_the_call_path(
    tmp_path, fake_libcupti
) -> None:
    """KNAME_MODE=profile: the session starts inside install(), before the targets are watched;
    a library imported before kname is wrapped as install() runs, after the session took the
    wrappers out: its launch is left as the library's."""
    script = MODE_SCRIPT.format(
        repo=str(REPO), tests=str(REPO / "tests"), libcupti=str(fake_libcupti)
    )
    env = clean_env(KNAME_MODE="profile", KNAME_REPORT=str(tmp_path / "p.json"))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "True False"
