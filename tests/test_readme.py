"""The README tells the truth: its commands and snippets that need no GPU run as written.

GPU-only recipes (ncu, nsys) are checked on the H200 by tests/test_gpu_*.py, not here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO, Venv

from kname.documents.build import profile_document
from kname.profiling.join import replay
from kname.profiling.records import load_streams

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text()
CI_RUN = (REPO / ".ci" / "run").read_text()


def indented_commands() -> list[str]:
    """The README's 4-space-indented shell lines (its command blocks), comments removed."""
    lines = re.findall(r"^    (\S.*)$", README, flags=re.MULTILINE)
    return [line.split("  #")[0].strip() for line in lines]


def marked_block(marker: str, text: str = README) -> str:
    """The fenced block right after `<!-- readme-test: marker -->` in `text` (the README's)."""
    match = re.search(rf"<!-- readme-test: {marker} -->\n```\w*\n(.*?)```", text, re.DOTALL)
    assert match, f"README has no block marked {marker!r}"
    return match.group(1)


def readme_test_command() -> str:
    return next(c for c in indented_commands() if "pytest" in c and "pip install" in c)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert readme_test_command() in CI_RUN.splitlines()


def test_ci_fails_when_any_step_of_the_test_command_fails(tmp_path: Path) -> None:
    # .ci/run with each step of the command made `true` but one, `false`, and nothing else run.
    test_command = readme_test_command()
    steps = test_command.split(" && ")
    script = CI_RUN.replace('cd "$(dirname "$0")/.."', f"cd {tmp_path}")
    script = script.replace("rm -rf .venv", "true").replace(".venv/bin/ruff check .", "echo ruff")
    for failing in range(len(steps)):
        command = " && ".join("false" if n == failing else "true" for n in range(len(steps)))
        done = subprocess.run(
            ["bash", "-c", script.replace(test_command, command)], capture_output=True, text=True
        )
        assert (done.returncode, done.stdout) == (1, ""), (steps[failing], done)


def test_the_readme_demo_command_is_the_demo_in_examples() -> None:
    demo_command = indented_commands()[0]
    assert demo_command.endswith("examples/demo.py")
    assert "KNAME=1" in demo_command and '".[auto]"' in demo_command


def test_the_demo_prints_what_the_readme_shows(kname_venv: Venv) -> None:
    env = {"KNAME": "1", "KNAME_SKIP": "demo_launchers"}
    result = kname_venv.python_run(str(REPO / "examples" / "demo.py"), env=env)
    assert result.returncode == 0, result.stderr
    if "on the GPU" in result.stdout:
        pytest.skip("this machine has a GPU; the README shows the simulator's output")
    assert result.stdout == marked_block("demo-output")


def test_the_live_session_snippet_runs(kname_venv: Venv) -> None:
    result = kname_venv.python_run("-c", marked_block("python"), env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def run_shell(command: str, venv: Venv, cwd: Path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    environ.update(NUMBA_ENABLE_CUDASIM="1", PATH=f"{venv.root / 'bin'}:{environ['PATH']}")
    environ.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=environ, capture_output=True, text=True
    )


def section(title: str, text: str = README) -> str:
    """The text from the heading `title` to the next heading of any level (the README's, or a
    docs page's given as `text`)."""
    start = text.index(f"{title}\n")
    following = re.search(r"^#{2,3} ", text[start + len(title) :], flags=re.MULTILINE)
    return text[start : start + len(title) + (following.start() if following else len(text))]


def section_commands(title: str) -> list[str]:
    return re.findall(r"^    (\S.*)$", section(title), flags=re.MULTILINE)


CENSUS = "### Launch census, and a CI check on launch counts (run here)"


def test_the_census_recipe_prints_the_table_of_the_multi_gpu_example_for_one_rank(
    kname_venv: Venv, tmp_path: Path
) -> None:
    """The README says so in place of showing it: the census table has the merged one's columns
    (before the ranks') and the same call sites, kernels and libraries."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    table_command, *_ = section_commands(CENSUS)
    result = run_shell(table_command, kname_venv, tmp_path)
    assert result.returncode == 0, result.stderr
    title, header, *rows = result.stderr.splitlines()
    _, merged_header, *merged_rows = marked_block("ranks-census").splitlines()
    merged_rows = [row for row in merged_rows if not row.startswith("kname report: ")]  # verdict
    assert re.match(r"kname census of process \d+: ", title)
    assert merged_header.startswith(header.rstrip())
    assert {tuple(row.split()[:4]) for row in rows} == {
        tuple(row.split()[:4]) for row in merged_rows
    }


def test_the_ci_check_recipe_prints_the_diff_shown_and_fails(
    kname_venv: Venv, tmp_path: Path
) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    _, *ci_check = section_commands(CENSUS)
    assert len(ci_check) == 3 and "--fail-on-change" in ci_check[-1], ci_check
    for command in ci_check[:-1]:
        saved = run_shell(command, kname_venv, tmp_path)
        assert saved.returncode == 0, f"{command}\n{saved.stderr}"
    diff = run_shell(ci_check[-1], kname_venv, tmp_path)
    assert diff.returncode == 1, diff.stderr
    assert diff.stdout + diff.stderr == marked_block("census-diff")


def example_recipes() -> list[str]:
    """Every `kname report` of the example profiles (examples/, recorded on a GPU) that the
    README shows, as written: in a command block, a shell block or a sentence."""
    found = re.findall(r"kname report examples/[^`\n]*", README)
    return list(dict.fromkeys(command.split("  #")[0].strip() for command in found))


def test_the_example_recipes_try_every_option_on_profiles() -> None:
    options = " ".join(example_recipes()).split()
    wanted = {"--top", "--diff", "--fail-on-slower", "--straggler", "--fail-on-straggler",
              "--by-rank", "--html"}  # fmt: skip
    assert wanted <= set(options), wanted - set(options)


@pytest.mark.parametrize("command", example_recipes())
def test_each_example_recipe_runs_as_written_without_a_gpu(
    kname_venv: Venv, tmp_path: Path, command: str
) -> None:
    """The profiles in examples/ stand for the user's: every recipe on them works here; a
    --fail-on-* recipe fails (the pair and the ranks differ), after saying why."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shown = run_shell(command, kname_venv, tmp_path)
    failing = "--fail-on" in command
    assert shown.returncode == (1 if failing else 0), shown.stderr
    assert shown.stdout.startswith("kname profile")
    verdicts = shown.stderr.splitlines()  # the lines that say what failed, and nothing else
    assert all(re.search(r"\(--(fail-on-\w+|straggler)\)", line) for line in verdicts)
    assert bool(verdicts) >= failing
    for page in re.findall(r"--html (\S+)", command):
        assert (tmp_path / page).read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("command", "marker"),
    [("kname report examples/profile.json --top 3", "profile-table")],
)  # fmt: skip
def test_the_example_outputs_shown_are_what_kname_report_prints(
    kname_venv: Venv, tmp_path: Path, command: str, marker: str
) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    assert command in example_recipes()
    shown = run_shell(command, kname_venv, tmp_path)
    assert shown.stdout + shown.stderr == marked_block(marker)


@pytest.mark.parametrize(
    ("recorded", "command", "marker"),
    [
        ("verdict_h100.json", "kname report verdict.json --top 3", "verdict-table"),
    ],
)
def test_a_profile_table_is_kname_report_of_the_streams_recorded_on_the_gpu(
    kname_venv: Venv, tmp_path: Path, recorded: str, command: str, marker: str
) -> None:
    """The table shown is `kname report` of the profile made from a run's CUPTI records:
    tests/gpu/verdict_demo.py on the H100 (its launch calls timed: the verdict)."""
    document = profile_document(replay(load_streams(str(REPO / "tests/data" / recorded))))
    (tmp_path / command.split()[2]).write_text(json.dumps(document))
    assert command in section("### Where does my GPU time go? (run on the H200)")
    shown = run_shell(command, kname_venv, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout + shown.stderr == marked_block(marker)


@pytest.mark.parametrize(
    ("recorded", "title", "command", "marker"),
    [
        ("torch_h200.json", "docs/libraries.md", "kname report torch.json --top 1", "torch-table"),
        ("jax_h100_profile.json", "### JAX (run on the H100)", "kname report jax.json --top 1",
         "jax-table"),
        ("attach_h100.json", "docs/attach.md", "kname report now.json --top 2", "attach-table"),
        ("backward_h100_profile.json", "### PyTorch (run on the H200)",
         "kname report backward.json --top 4 | cut -c1-66", "backward-table"),
    ],
)  # fmt: skip
def test_a_frameworks_table_is_kname_report_of_the_profile_written_on_the_gpu(
    kname_venv: Venv, tmp_path: Path, recorded: str, title: str, command: str, marker: str
) -> None:
    """The table shown is `kname report` of what `kname profile --json` wrote for
    tests/gpu/torch_demo.py on the H200, tests/gpu/jax_demo.py on the H100
    (tests/gpu/test_gpu_torch.py
    and tests/gpu/test_gpu_jax.py run them there), and `kname attach --json` for
    tests/gpu/attach_demo.py on the H100 (tests/gpu/test_gpu_attach.py)."""
    shutil.copy(REPO / "tests/data" / recorded, tmp_path / command.split()[2])
    # A README section's title, or a docs page (its sample there, where the README has no room).
    text = (REPO / title).read_text() if title.startswith("docs/") else README
    assert command in (text if title.startswith("docs/") else section(title))
    shown = run_shell(command, kname_venv, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout + shown.stderr == marked_block(marker, text)


def test_the_ranks_recipe_prints_the_merged_census_shown(kname_venv: Venv, tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    *tasks, report = section_commands("### Multi-GPU jobs: torchrun, mpirun, srun")
    for command in tasks:
        started = run_shell(command, kname_venv, tmp_path)
        assert started.returncode == 0, f"{command}\n{started.stderr}"
    assert sorted(p.name for p in tmp_path.glob("census*.json")) == [
        f"census.rank{rank}.json" for rank in range(4)
    ]
    merged = run_shell(report, kname_venv, tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout + merged.stderr == marked_block("ranks-census")


def test_the_readme_is_at_most_20_kb() -> None:
    assert len(README.encode()) <= 20 * 1024


def test_every_sample_output_in_the_readme_is_checked_by_a_test() -> None:
    """A fenced block that is not commands (`shell`) is output or code a test runs: marked."""
    blocks = re.finditer(r"(?:<!-- readme-test: ([\w-]+) -->\n)?```(\w*)\n", README)
    opening = [match for n, match in enumerate(blocks) if n % 2 == 0]  # every other fence opens
    unmarked = [m.group(0) for m in opening if m.group(2) != "shell" and not m.group(1)]
    assert unmarked == []
    tests = "".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py"))
    for match in opening:
        if match.group(1):
            assert match.group(1) in tests, f"no test reads the block {match.group(1)!r}"


def test_every_page_the_readme_links_to_is_in_the_repository() -> None:
    """The reference moved out of the README (docs/configuration.md, ...) is where it points."""
    targets = re.findall(r"\]\(([\w-]+(?:/[\w.-]+)*\.\w+|[\w-]+/)(?:#[\w-]*)?\)", README)
    assert "docs/configuration.md" in targets
    assert [t for t in targets if not (REPO / t).exists()] == []
