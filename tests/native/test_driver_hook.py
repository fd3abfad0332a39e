"""kname's driver hook against a stand-in driver: every launch outside a kname range is named.

The stand-in libcuda.so.1 (support/fake_cuda.c) marks each launch with an NVTX mark; the
stand-in runtime (support/fake_cudart.c) reaches it each way a real library does (through
cuGetProcAddress as libcudart does, by dlsym as XLA's stubs do, by a direct import as CuPy does,
and from a thread Python never ran on). Each program runs in a fresh process under the capturing
NVTX tool (support/nvtx_capture.py), which is what makes kname install the hook; a mark's range
is the innermost kname range open on its thread when it was made. The driver is the only thing
mocked: kname does not own it and no GPU is here.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, line_of
from support.nvtx_capture import Capture, InjectionUnavailable, compile_c, run_captured

from kname import hotpath

SUPPORT = REPO / "tests" / "support"
WHY_NOT = hotpath.choose(True).why_python
NATIVE = None if WHY_NOT else sys.modules[hotpath.NATIVE]
HOOK_PLATFORM = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")
# Where the hook can be (the C hot path, Linux x86-64/aarch64), kname._native must have it.
needs_hook = pytest.mark.skipif(
    NATIVE is None or not HOOK_PLATFORM,
    reason=f"no driver hook here: {WHY_NOT or 'Linux x86-64 and aarch64 only'}",
)
pytestmark = needs_hook

PRELUDE = """
import ctypes, json, sys, threading
import kname
from kname import driver_hook

kname.install()
runtime = ctypes.PyDLL(sys.argv[1])  # PyDLL: the GIL held, as a library's launch holds it
free_runtime = ctypes.CDLL(sys.argv[1])  # CDLL: the GIL released around the call


def report():
    print(json.dumps(driver_hook.state()))
"""


@pytest.fixture(scope="module")
def fake_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in runtime, linked to the stand-in driver beside it (as libcuda.so.1)."""
    folder = tmp_path_factory.mktemp("fake_cuda")
    try:
        compile_c(SUPPORT / "fake_cuda.c", folder / "libcuda.so.1", "-shared", "-fPIC",
                  "-Wl,-soname,libcuda.so.1")  # fmt: skip
        return compile_c(
            SUPPORT / "fake_cudart.c", folder / "libfakecudart.so", "-shared", "-fPIC",
            f"-L{folder}", "-l:libcuda.so.1", f"-Wl,-rpath,{folder}", "-ldl", "-lpthread",
        )  # fmt: skip
    except InjectionUnavailable as exc:
        pytest.skip(str(exc))


def run_program(
    body: str, tmp_path: Path, inject_lib: Path, runtime: Path, env: dict | None = None
) -> tuple[str, Capture]:
    """Run PRELUDE + `body` as app.py under the capturing tool; its stdout and capture."""
    source = PRELUDE + textwrap.dedent(body)
    (tmp_path / "app.py").write_text(source)
    done, capture = run_captured(
        [sys.executable, "app.py", str(runtime)], inject_lib, tmp_path, cwd=tmp_path,
        timeout=120, env={"PYTHONPATH": str(REPO), **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "kname:" not in done.stderr, done.stderr
    return done.stdout, capture


def launches(capture: Capture) -> list[tuple[str, str | None, int]]:
    """Each stand-in launch: (its entry point, the innermost kname range around it or None, how
    many kname ranges were open on its thread)."""
    stacks: dict[int, list[str]] = {}
    found = []
    for event in capture.events:
        stack = stacks.setdefault(event.tid, [])
        if event.kind == "push" and event.domain == "kname":
            stack.append(event.message)
        elif event.kind == "pop" and event.domain == "kname":
            stack.pop()
        elif event.kind == "mark" and event.message.startswith("launch "):
            found.append((event.message[7:], stack[-1] if stack else None, len(stack)))
    return found


def line_name(source: str, marker: str) -> str:
    """The range name kname gives `marker`'s line of app.py (in `main`)."""
    return f"main app.py:{line_of(PRELUDE + textwrap.dedent(source), f'# L:{marker}')}"


EACH_WAY = """
def main():
    runtime.runtime_launch(0)  # L:runtime
    runtime.runtime_launch(1)  # L:per_thread
    runtime.stub_launch()  # L:stub
    runtime.direct_launch()  # L:direct


for _ in range(3):
    main()
report()
"""


def test_a_launch_each_way_a_library_reaches_the_driver_is_named_after_its_line_once(
    tmp_path: Path, inject_lib: Path, fake_runtime: Path
) -> None:
    out, capture = run_program(EACH_WAY, tmp_path, inject_lib, fake_runtime)
    expected = [
        ("cuLaunchKernel", line_name(EACH_WAY, "runtime"), 1),
        ("cuLaunchKernel_ptsz", line_name(EACH_WAY, "per_thread"), 1),
        ("cuGraphLaunch", line_name(EACH_WAY, "stub"), 1),
        ("cuLaunchKernel", line_name(EACH_WAY, "direct"), 1),
    ]
    assert launches(capture) == expected * 3
    assert capture.balanced(), capture.stack_errors()
    assert '"installed": true' in out


WRAPPED = """
import gpulib


def main():
    gpulib.launch()  # L:wrapped
    runtime.runtime_launch(0)  # L:plain


for _ in range(2):
    main()
"""

GPULIB = """
import ctypes, sys

runtime = ctypes.PyDLL(sys.argv[1])


def launch():
    return runtime.runtime_launch(0)
"""


def test_a_launch_inside_a_kname_wrappers_range_is_not_wrapped_again(
    tmp_path: Path, inject_lib: Path, fake_runtime: Path
) -> None:
    (tmp_path / "gpulib.py").write_text(GPULIB)
    _, capture = run_program(
        WRAPPED, tmp_path, inject_lib, fake_runtime, env={"KNAME_TARGETS": "gpulib:launch"}
    )
    found = launches(capture)
    assert [depth for _, _, depth in found] == [1, 1, 1, 1]
    assert found[1][1] == found[3][1] == line_name(WRAPPED, "plain")
    assert found[0][1] is not None and found[0][1] != found[1][1]  # the wrapper's own range


FRAMELESS = """
from kname.profiling import backward


def main():
    runtime.thread_launch()  # L:no_scope
    scope = backward.enter(sys._getframe())  # L:scope
    runtime.thread_launch()
    backward.leave(scope)
    runtime.thread_launch()
    free_runtime.runtime_launch(0)  # L:released


main()
"""


def test_a_thread_with_no_python_frame_gets_the_backward_passs_name_and_none_without_one(
    tmp_path: Path, inject_lib: Path, fake_runtime: Path
) -> None:
    _, capture = run_program(FRAMELESS, tmp_path, inject_lib, fake_runtime)
    scope = line_name(FRAMELESS, "scope")
    released = line_name(FRAMELESS, "released")  # the GIL let go, as torch's ops do
    assert [(name, depth) for _, name, depth in launches(capture)] == [
        (None, 0), (scope, 1), (None, 0), (released, 1),
    ]  # fmt: skip


THREADS = """
def work(which):
    for _ in range(200):
        if which:
            free_runtime.runtime_launch(1)  # L:one (the GIL let go)
        else:
            runtime.direct_launch()  # L:other


def main():
    threads = [threading.Thread(target=work, args=(n % 2,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


main()
"""


def test_launches_from_several_threads_each_take_their_own_threads_line(
    tmp_path: Path, inject_lib: Path, fake_runtime: Path
) -> None:
    _, capture = run_program(THREADS, tmp_path, inject_lib, fake_runtime)
    source = PRELUDE + textwrap.dedent(THREADS)
    expected = {
        "cuLaunchKernel_ptsz": f"work app.py:{line_of(source, '# L:one')}",
        "cuLaunchKernel": f"work app.py:{line_of(source, '# L:other')}",
    }
    found = launches(capture)
    assert len(found) == 800
    assert all((name, depth) == (expected[entry], 1) for entry, name, depth in found)
    assert capture.balanced(), capture.stack_errors()


SWITCHED = """
def main():
    runtime.runtime_launch(0)  # L:launch
    runtime.direct_launch()


main()
kname.disable()
print(json.dumps(driver_hook.state()["slots"]))
main()
kname.enable()
main()
kname.uninstall()
print(json.dumps(driver_hook.state()["slots"]))
main()
"""


def test_disable_and_uninstall_give_every_entry_point_back_and_enable_takes_them_again(
    tmp_path: Path, inject_lib: Path, fake_runtime: Path
) -> None:
    out, capture = run_program(SWITCHED, tmp_path, inject_lib, fake_runtime)
    named = [name is not None for _, name, _ in launches(capture)]
    assert named == [True, True, False, False, True, True, False, False]
    assert out.split() == ["0", "0"]


FORKED = """
import os


def main():
    runtime.runtime_launch(0)  # L:launch
    runtime.direct_launch()  # L:direct


main()
child = os.fork()
if child == 0:
    main()
    os._exit(0)
os.waitpid(child, 0)
"""


def test_a_forked_child_names_its_launches_as_its_parent(
    tmp_path: Path, inject_lib: Path, fake_runtime: Path
) -> None:
    _, capture = run_program(FORKED, tmp_path, inject_lib, fake_runtime)
    runtime_line = line_name(FORKED, "launch")
    direct_line = line_name(FORKED, "direct")
    assert [name for _, name, _ in launches(capture)] == [runtime_line, direct_line] * 2


NOT_WANTED = """
runtime.runtime_launch(0)
report()
"""


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"KNAME_DRIVER_HOOK": "0"}, "KNAME_DRIVER_HOOK=0"),
        ({"KNAME_MODE": "census"}, "KNAME_MODE is census"),
        ({"KNAME_NATIVE": "0"}, "kname._native is not in use"),
    ],
)
def test_where_the_hook_is_not_wanted_launches_run_as_before_and_the_state_says_why(
    tmp_path: Path, inject_lib: Path, fake_runtime: Path, env: dict, why: str
) -> None:
    out, capture = run_program(NOT_WANTED, tmp_path, inject_lib, fake_runtime, env=env)
    assert [name for _, name, _ in launches(capture)] == [None]
    assert why in out


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({}, "✓ driver hook: ready: under an NVTX tool"),
        ({"KNAME_DRIVER_HOOK": "0"}, "– driver hook: off (KNAME_DRIVER_HOOK=0)"),
        ({"KNAME_NATIVE": "0"}, "– driver hook: unavailable (KNAME_NATIVE is off)"),
        ({"KNAME_MODE": "census"}, "– driver hook: not used (KNAME_MODE=census)"),
    ],
)
def test_kname_doctor_says_in_one_line_whether_the_hook_will_be_in_place_and_why_not(
    env: dict, line: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kname", "doctor"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **env}, check=False,
    )  # fmt: skip
    hook_lines = [text for text in done.stdout.splitlines() if "driver hook" in text]
    assert len(hook_lines) == 1 and hook_lines[0].startswith(line), done.stdout
