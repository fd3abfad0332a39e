"""The IPython extension, in real IPython shells in subprocesses, running cells that launch
numba kernels on the CUDA simulator: `%load_ext kname`, `%kname`, `%%kname` (its value, its
traceback), cell names (timing magics' code too), the profile config, and a real Jupyter kernel
(ipykernel's in-process kernel) where installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, cleaned, kernels, line_of

pytest.importorskip("IPython")
from kname.ipython import _ends_in_semicolon

pytestmark = pytest.mark.launches

SHELL = """\
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

shell = InteractiveShell.instance(colors="nocolor")
results = []
for cell in json.load(open(sys.argv[1])):
    with capture_output() as captured:
        result = shell.run_cell(cell, store_history=True)
    error = result.error_in_exec or result.error_before_exec
    results.append({
        "stdout": captured.stdout,
        "stderr": captured.stderr,
        "outputs": [output.data for output in captured.outputs],
        "error": type(error).__name__ if error else None,
    })
print(json.dumps(results))
"""

KERNELS = kernels.program("""\
def step(out, x):
    axpy[1, 8](out, 2.0, x)  # step-line
""")

COUNTED = """\
%%kname
out, x = np.zeros(8), np.arange(8.0)
for _ in range(3):
    step(out, x)
axpy[1, 8](out, 1.0, x)  # direct-line
out.sum()
"""

STEP_LINE = line_of(KERNELS, "step-line")
DIRECT_LINE = line_of(COUNTED, "direct-line")


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env.update(
        NUMBA_ENABLE_CUDASIM="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        IPYTHONDIR=str(tmp_path / "ipython"),  # never the user's profile or history
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        **extra,
    )
    return env


def run_cells(tmp_path: Path, *cells: str, env: dict[str, str] | None = None) -> list[dict]:
    """Run `cells` one after another in one fresh IPython shell (in `env`, else environment());
    what each cell showed."""
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    (tmp_path / "shell.py").write_text(SHELL)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "shell.py"), str(tmp_path / "cells.json")],
        env=environment(tmp_path) if env is None else env, cwd=tmp_path, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def shown_text(result: dict) -> str:
    """The plain-text form of what the cell displayed (the census table)."""
    return "".join(output["text/plain"] + "\n" for output in result["outputs"])


def test_a_kname_cell_shows_the_launches_of_that_cell_alone(tmp_path: Path) -> None:
    before = "out0 = np.zeros(8)\nfor _ in range(5):\n    step(out0, out0)\n"
    results = run_cells(
        tmp_path, "%load_ext kname", KERNELS, before, COUNTED, "import kname; kname.names()"
    )
    assert [r["error"] for r in results] == [None] * 5
    assert shown_text(results[3]) == (
        "kname census of cell 4: 4 launches from 2 call sites\n"
        "call site            kernel  library  launches  share\n"
        f"step <cell 2>:{STEP_LINE}     axpy    numba           3  75.0%\n"
        f"<module> <cell 4>:{DIRECT_LINE}  axpy    numba           1  25.0%\n"
    )
    assert "Out[4]: np.float64(196.0)" in results[3]["stdout"]  # the cell's value, as without
    # kname's own counts were not reset: cell 3's five launches are still there.
    assert f"'step <cell 2>:{STEP_LINE}': 8" in results[4]["stdout"]


def test_the_cell_census_is_an_html_table_for_jupyter(tmp_path: Path) -> None:
    results = run_cells(tmp_path, "%load_ext kname", KERNELS, COUNTED)
    [shown] = results[2]["outputs"]
    page = shown["text/html"]
    assert page.startswith('<div class="kname-census">')
    assert page.count("<tr>") == 3
    assert f'<td style="text-align:left">step &lt;cell 2&gt;:{STEP_LINE}</td>' in page
    assert "kname census of cell 3: 4 launches from 2 call sites" in page


def test_a_second_kname_cell_counts_only_its_own_launches(tmp_path: Path) -> None:
    again = "%%kname\nstep(out, x)\nstep(out, x)\n"
    results = run_cells(tmp_path, "%load_ext kname", KERNELS, COUNTED, again)
    assert shown_text(results[3]) == (
        "kname census of cell 4: 2 launches from 1 call site\n"
        "call site         kernel  library  launches   share\n"
        f"step <cell 2>:{STEP_LINE}  axpy    numba           2  100.0%\n"
    )


def test_kname_off_and_on_switch_naming_in_the_live_session(tmp_path: Path) -> None:
    check = "import kname; print('enabled:', kname.is_enabled())"
    once = "%%kname\nstep(out, x)\n"
    results = run_cells(
        tmp_path, "%load_ext kname", KERNELS, COUNTED, "%kname off", check, once, "%kname on",
        check, once,
    )  # fmt: skip
    assert results[3]["stdout"].startswith("kname: off")
    assert results[4]["stdout"] == "enabled: False\n"
    assert shown_text(results[5]) == (
        "kname census of cell 6 (kname is off: %kname on): 0 launches from 0 call sites\n"
    )
    assert results[6]["stdout"] == "kname: on (launches are named)\n"
    assert results[7]["stdout"] == "enabled: True\n"
    assert shown_text(results[8]).startswith("kname census of cell 9: 1 launch from 1 call site\n")


def test_status_report_and_wrong_arguments(tmp_path: Path) -> None:
    results = run_cells(
        tmp_path, "%kname status", "%load_ext kname", KERNELS, COUNTED, "%kname status",
        "%kname", "%kname report", "%kname sideways", "%%kname now\npass\n",
    )  # fmt: skip
    assert results[0]["error"] == "UsageError"  # no %kname before the extension is loaded
    status = results[4]["stdout"].splitlines()
    assert status[0] == "kname 0.1.0: installed, naming on; KNAME_MODE=nvtx, NVTX domain 'kname'"
    assert status[1].startswith("counted so far: 4 launches from 2 call sites; NVTX tool: none")
    assert results[5]["stdout"] == results[4]["stdout"]  # bare %kname is %kname status
    assert shown_text(results[6]).startswith(
        "kname census since install: 4 launches from 2 call sites\n"
    )
    assert (
        "%kname sideways: unknown command; accepted: on, off, status, report"
        in (results[7]["stderr"])
    )
    assert "%%kname takes no arguments, not 'now'" in results[8]["stderr"]


def test_gpu_modules_imported_before_the_extension_are_named_too(tmp_path: Path) -> None:
    results = run_cells(
        tmp_path, KERNELS, "%load_ext kname", "%%kname\nstep(np.zeros(8), np.ones(8))\n"
    )
    assert shown_text(results[2]).splitlines()[2].startswith(f"step <cell 1>:{STEP_LINE} ")


def test_a_failing_kname_cell_shows_its_census_and_its_own_traceback(tmp_path: Path) -> None:
    failing = "%%kname\nstep(np.zeros(8), np.ones(8))\n1 / 0  # fails-here\n"
    results = run_cells(tmp_path, "%load_ext kname", KERNELS, failing)
    assert results[2]["error"] == "ZeroDivisionError"
    assert shown_text(results[2]).startswith("kname census of cell 3: 1 launch from 1 call site\n")
    # Line 3 of the cell as shown (line 1 is `%%kname`), in IPython's own traceback form
    # (`Cell In[3], line 3` since IPython 8.1; 8.0 printed `Input In [3]`).
    shown = results[2]["stdout"]
    assert re.search(r"Cell In\[3\], line 3|Input In \[3\]", shown), shown
    assert re.search(r"-+> 3 1 / 0  # fails-here", shown), shown


def test_launches_timed_by_time_and_timeit_are_named_by_their_cell_and_line(tmp_path) -> None:
    launch = "axpy[1, 8](out, 1.0, x)"
    timed = [
        f"out, x = np.zeros(8), np.arange(8.0)\n%time {launch}\n",  # cell 3, its line 2
        f"%%time\nstep(out, x)\n{launch}\n",  # cell 4: the body starts at line 2
        f"%timeit -n1 -r1 {launch}\n",  # cell 5
        f"%%timeit -n1 -r1 pass\n{launch}\n(lambda: {launch})()\n",  # cell 6
        f"%time {launch}\n",  # cell 7: cell 3's line again, in another cell
        f"%%kname\n\n%time {launch}\n",  # cell 8: a %%kname cell's lines are as shown
    ]
    names = "import json, kname; print(json.dumps(kname.names()))"
    results = run_cells(tmp_path, "%load_ext kname", KERNELS, *timed, names)
    assert [r["error"] for r in results] == [None] * len(results)
    assert json.loads(results[-1]["stdout"]) == {
        "<module> <cell 3>:2": 1,
        f"step <cell 2>:{STEP_LINE}": 1,
        "<module> <cell 4>:3": 1,
        "<module> <cell 5>:1": 1,
        "<module> <cell 6>:2": 1,
        "<lambda> <cell 6>:3": 1,
        "<module> <cell 7>:1": 1,
        "<module> <cell 8>:3": 1,
    }


def test_a_kname_cell_ending_in_a_semicolon_shows_no_value_as_a_plain_cell_shows_none(
    tmp_path: Path,
) -> None:
    cells = ["%%kname\n42;", "%%kname\nx = 6\nx * 7;  # quiet\n\n", "%%kname\n42  # shown", "42;"]
    results = run_cells(tmp_path, "%load_ext kname", *cells, "42")
    assert [r["error"] for r in results] == [None] * 6
    assert [re.findall(r"Out\[\d+\]: .*", r["stdout"]) for r in results[1:]] == [
        [], [], ["Out[4]: 42"], [], ["Out[6]: 42"],
    ]  # fmt: skip
    assert shown_text(results[1]) == "kname census of cell 2: 0 launches from 0 call sites\n"


# Lines of cells: values, values ended by `;`, comments and strings holding `;`, blank lines.
cell_lines = st.sampled_from([
    "42", "42;", "x = 1;", "f(1) ;", "'a;'", "s = 'b;' # c", "# ;", "#", "", "   ", "42;  # shown?",
    "for i in r:\n    f(i);", "if x:\n    y\n", "(1,\n 2);", "a; b", "a; b;",
])  # fmt: skip
cells_text = st.builds(
    lambda lines, end: "\n".join(lines) + end,
    st.lists(cell_lines, max_size=6),
    st.sampled_from(["", "\n"]),
)


@settings(max_examples=300, deadline=None)
@given(cells_text)
def test_a_kname_cell_hides_its_value_exactly_when_ipython_hides_a_plain_cells(source) -> None:
    from IPython.core.displayhook import DisplayHook

    ipython_rule = getattr(DisplayHook, "semicolon_at_end_of_expression", None)
    if ipython_rule is None:
        pytest.skip("this IPython keeps its rule inside DisplayHook.quiet")
    assert _ends_in_semicolon(source) == bool(ipython_rule(source))


def frames_shown(traceback: str) -> list[str]:
    """The frames a traceback IPython printed shows, outermost first, by their headers."""
    return re.findall(r"^(?:Cell In\[\d+\], line \d+.*|File .*|Input In .*)$", traceback, re.M)


def test_a_kname_cells_traceback_starts_at_the_cells_code_as_a_plain_cells_does(
    tmp_path: Path,
) -> None:
    code = "def fails():\n    step(np.zeros(8), np.ones(8))\n    1 / 0\n\nfails()\n"
    results = run_cells(tmp_path, "%load_ext kname", KERNELS, "%%kname\n" + code, code)
    assert [r["error"] for r in results] == [None, None, "ZeroDivisionError", "ZeroDivisionError"]
    assert shown_text(results[2]).startswith("kname census of cell 3: 1 launch from 1 call site")
    # Line N of the plain cell is line N + 1 of the %%kname cell, under its `%%kname` line.
    assert frames_shown(results[2]["stdout"]) == [
        "Cell In[3], line 6",
        "Cell In[3], line 4, in fails()",
    ]
    assert frames_shown(results[3]["stdout"]) == [
        "Cell In[4], line 5",
        "Cell In[4], line 3, in fails()",
    ]


def test_an_exception_that_refuses_attributes_reaches_the_cell_unchanged(tmp_path) -> None:
    stubborn = (
        "class Stubborn(Exception):\n"
        "    def __setattr__(self, name, value):\n"
        "        raise TypeError('no attributes here')\n"
    )
    results = run_cells(tmp_path, "%load_ext kname", stubborn, "%%kname\nraise Stubborn()\n")
    assert results[2]["error"] == "Stubborn"
    assert "no attributes here" not in results[2]["stdout"]


def test_unloading_the_extension_uninstalls_what_it_installed(tmp_path: Path) -> None:
    check = "import kname; print('installed:', kname.is_installed())"
    results = run_cells(tmp_path, "%load_ext kname", check, "%unload_ext kname", check)
    assert [results[1]["stdout"], results[3]["stdout"]] == [
        "installed: True\n",
        "installed: False\n",
    ]


def test_a_profile_config_loads_kname_in_terminal_ipython(tmp_path: Path) -> None:
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_config.py").write_text('c.InteractiveShellApp.extensions = ["kname"]\n')
    # Typed at the terminal prompt: a blank line ends a cell that spans several lines.
    session = KERNELS.replace("\n\n\n", "\n") + "\n\n" + COUNTED + "\n\nexit\n"
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=nocolor",
         "--HistoryManager.hist_file=:memory:"],
        input=session, env=environment(tmp_path), cwd=tmp_path, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = re.sub(r"(In \[\d+\]: |   \.\.\.: )", "", done.stdout)
    table = text[text.index("kname census of cell") :].splitlines()[:4]
    number = int(re.match(r"kname census of cell (\d+):", table[0]).group(1))
    assert table[0] == f"kname census of cell {number}: 4 launches from 2 call sites"
    assert table[1].split() == ["call", "site", "kernel", "library", "launches", "share"]
    # Where the prompt split the definitions into cells is the terminal's business; the
    # %%kname cell is one cell, numbered as its prompt was.
    step_cell = re.match(r"step <cell (\d+)>:\d+ +axpy +numba +3 +75\.0%$", table[2])
    assert step_cell and int(step_cell.group(1)) < number, table
    assert re.fullmatch(
        rf"<module> <cell {number}>:{DIRECT_LINE} +axpy +numba +1 +25\.0%", table[3]
    )
    assert f"Out[{number}]: np.float64(196.0)" in done.stdout  # the number its prompt showed
    assert "<table" not in done.stdout  # a terminal shows the text table only


JUPYTER = """\
import json, sys
from ipykernel.inprocess.manager import InProcessKernelManager

manager = InProcessKernelManager()
manager.start_kernel()
client = manager.client()
client.start_channels()
results = []
for cell in json.load(open(sys.argv[1])):
    msg_id = client.execute(cell)
    shown = []
    while True:
        message = client.get_iopub_msg(timeout=60)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind = message["msg_type"]
        if kind == "status" and message["content"]["execution_state"] == "idle":
            break
        if kind in ("display_data", "execute_result", "stream", "error"):
            shown.append({"type": kind, **message["content"]})
    results.append(shown)
print(json.dumps(results))
"""


NO_IPYKERNEL = pytest.mark.skipif(
    importlib.util.find_spec("ipykernel") is None, reason="ipykernel is not installed"
)


def run_in_jupyter(tmp_path: Path, *cells: str) -> list[list[dict]]:
    """Run `cells` in a real Jupyter kernel; the messages each cell sent to the notebook."""
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    (tmp_path / "jupyter.py").write_text(JUPYTER)
    done = subprocess.run(
        [sys.executable, "-X", "frozen_modules=off", str(tmp_path / "jupyter.py"),
         str(tmp_path / "cells.json")],
        env=environment(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@NO_IPYKERNEL
def test_a_jupyter_kernel_names_cells_by_their_execution_number(tmp_path: Path) -> None:
    where = "step.__code__.co_filename"
    results = run_in_jupyter(tmp_path, "%load_ext kname", KERNELS, COUNTED, where)
    # Jupyter compiles a cell under a file named by a hash of its text, not by its number ...
    [value] = results[3]
    assert re.search(r"ipykernel_\d+[/\\]\d+\.py'$", value["data"]["text/plain"]), value
    # ... and kname names it by the number Jupyter shows beside the cell.
    displayed = [shown for shown in results[2] if shown["type"] == "display_data"]
    assert [shown["data"]["text/plain"].splitlines() for shown in displayed] == [
        [
            "kname census of cell 3: 4 launches from 2 call sites",
            "call site            kernel  library  launches  share",
            f"step <cell 2>:{STEP_LINE}     axpy    numba           3  75.0%",
            f"<module> <cell 3>:{DIRECT_LINE}  axpy    numba           1  25.0%",
        ]
    ]
    assert "<table>" in displayed[0]["data"]["text/html"]


@NO_IPYKERNEL
def test_a_jupyter_kernel_shows_a_kname_cells_traceback_from_the_cells_code(tmp_path) -> None:
    results = run_in_jupyter(tmp_path, "%load_ext kname", "%%kname\n\n1 / 0\n")
    [error] = [shown for shown in results[1] if shown["type"] == "error"]
    assert error["ename"] == "ZeroDivisionError"
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert frames_shown(traceback) == ["Cell In[2], line 3"], traceback
