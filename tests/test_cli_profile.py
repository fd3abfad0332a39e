"""`kname profile` and `kname report` for profiles, run as the console script of the wheel."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Venv, line_of
from test_cli import APP, run_kname

pytestmark = pytest.mark.slow

PROBE = """\
import os, sys
import kname
print(kname.is_installed(), *(os.environ.get(v) for v in ("KNAME", "KNAME_MODE", "KNAME_REPORT",
      "KNAME_PROFILE_TRACE", "KNAME_PROFILE_HTML", "KNAME_PROFILE_TOP", "KNAME_SKIP",
      "KNAME_DEPTH", "KNAME_PROFILE_FLUSH", "KNAME_PROFILE_DELAY", "KNAME_PROFILE_DURATION",
      "KNAME_RANKS", "KNAME_PROFILE_VERDICT")), sep="|")
sys.exit(3)
"""


def test_profile_sets_the_mode_and_its_outputs_and_passes_the_exit_code(
    kname_venv: Venv, tmp_path: Path
) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    result = run_kname(
        kname_venv, "profile", "--json", "p.{rank}.json", "--trace", "t.json", "--html", "p.html",
        "--top", "7", "--skip", "mypkg.ops", "--depth", "2", "--flush-every", "60", "--delay",
        "0.5", "--duration", "600", "--ranks", "0-3", "--verdict", "--", "python", "probe.py",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert result.stdout.strip() == (
        "True|1|profile|p.{rank}.json|t.json|p.html|7|mypkg.ops|2|60|0.5|600|0-3|1"
    )


def test_profile_without_a_gpu_says_so_and_at_exit_names_the_files_not_written(
    kname_venv: Venv, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(
        APP.replace("    sys.exit(", "    import kname; print(kname.names())\n    sys.exit(")
    )
    result = run_kname(
        kname_venv, "profile", "--json", "p.json", "--html", "p.html", "--trace", "t.json",
        "--", "python", "app.py", "6", env={"NUMBA_ENABLE_CUDASIM": "1"}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 6
    lines = result.stderr.splitlines()
    # The binding missing, or (with it installed, as CI has it) CUPTI without a driver.
    assert len(lines) == 2 and lines[0].startswith("kname: profile: "), lines
    assert "binding cannot be imported" in lines[0] or "CUPTI could not be started" in lines[0]
    assert lines[0].endswith("GPU times are not collected in this run; launches are still named")
    # At exit, the outputs asked for and not written, and why.
    assert lines[1].startswith("kname: profile: no GPU time was collected ("), lines
    assert "binding cannot be imported" in lines[1] or "CUPTI could not start" in lines[1]
    assert lines[1].endswith("; p.json, t.json, p.html not written"), lines
    loop = f"main app.py:{line_of(APP, 'loop-line')}"
    assert f"'{loop}': 2" in result.stdout
    assert not any((tmp_path / name).exists() for name in ("p.json", "t.json", "p.html"))


def test_profile_mode_without_a_gpu_and_no_file_says_no_gpu_time_not_a_table(
    kname_venv: Venv, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    result = run_kname(
        kname_venv, "profile", "--", "python", "app.py", "0",
        env={"NUMBA_ENABLE_CUDASIM": "1"}, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and "no GPU time was collected (" in lines[1], lines
    assert "launches" not in lines[1] and not lines[1].endswith("not written"), lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["profile"], "kname profile: needs a command"),
        (["profile", "--", "no-such-command-here"], "kname profile: command not found: no-such"),
        (["profile", "--top", "0", "--", "python"], "argument --top: expected a whole number"),
        (
            ["profile", "--flush-every", "0", "--", "python"],
            "argument --flush-every: expected a number of seconds above 0, such as 30 or 0.5",
        ),
        (["profile", "--delay", "5min", "--", "python"], "argument --delay: expected a number"),
        (
            ["profile", "--ranks", "0-x", "--", "python"],
            "argument --ranks: expected ranks such as 0,3 or 0-7",
        ),
        (["profile", "--targets", "cupyy", "--", "python"], "'cupyy' is neither a built-in"),
    ],
)
def test_profile_usage_errors_are_one_line_and_exit_2(kname_venv: Venv, args, message) -> None:
    result = run_kname(kname_venv, *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_profile_help_shows_examples(kname_venv: Venv) -> None:
    result = run_kname(kname_venv, "profile", "--help")
    assert result.returncode == 0 and "examples:\n  kname profile -- python app.py" in result.stdout
    # memcpy and memset are a copy and a memset, not a "set".
    assert "every GPU kernel, copy and memset attributed" in " ".join(result.stdout.split())
    assert "  profile " in run_kname(kname_venv, "--help").stdout  # among the commands
