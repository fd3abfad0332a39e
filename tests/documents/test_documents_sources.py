"""The source a saved document keeps (kname.documents.sources): where a name points, which lines
are kept, the cap, the field's validation, JSON form and merge, and the files naming read."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO
from support.html_pages import PATHS, chains, name_of, sourced_profiles

from kname import _warnings, naming
from kname.documents import sources
from kname.documents.merge import merge_documents
from kname.documents.owner import OWNER_VARIABLE
from kname.documents.schema import DocumentError, render_json, validate
from kname.documents.sources import CONTEXT, CUT, MAX_LINE_CHARS, SOURCES, chain, lines_of


@given(chains)
def test_each_part_of_a_name_points_at_its_path_and_line(made):
    frames = chain(name_of(made), known=PATHS)
    assert [(frame.path, frame.line) for frame in frames] == [(p, n) for _, p, n in made]
    assert [frame.label for frame in frames] == [f"{f} {p}:{n}" for f, p, n in made]


@given(st.lists(chains, min_size=1, max_size=6), st.sets(st.sampled_from(PATHS), min_size=1))
def test_the_lines_names_point_at_are_the_same_parsed_afresh_or_remembered(made, known):
    files = dict.fromkeys(known, "unread.py")
    names = [name_of(frames) for frames in made]
    afresh: dict[str, set[int]] = {}
    for name in names:
        for frame in chain(name, known):
            if frame.path in known:
                afresh.setdefault(frame.path, set()).add(frame.line)
    assert sources._pointed_lines(names, files) == afresh
    assert sources._pointed_lines(names, files) == afresh  # remembered this time


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("<no Python frame>", ("", 0)),
        ("axpy <no user frame>", ("", 0)),
        ("forward model.py:21 (compile)", ("model.py", 21)),
        ("step app.py:12 [concurrent backward]", ("app.py", 12)),
        ("x.py:1", ("x.py", 1)),
        ("step <cell 3>:4", ("3>", 4)),  # a path with a space needs its source kept
        ("step app.py:12:3", ("app.py:12", 3)),
    ],
)
def test_a_part_points_at_the_last_word_ending_in_a_line_number(name, where):
    frame = chain(name)[0]
    assert (frame.path, frame.line) == where


def write_lines(path, count: int) -> list[str]:
    lines = [f"line {n} = {n} * 2" for n in range(1, count + 1)]
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_the_lines_around_each_pointed_line_are_kept_as_they_are(tmp_path):
    text = write_lines(tmp_path / "app.py", 200)
    names = ["f app.py:10", "g app.py:180 < main app.py:100", "h other.py:3"]
    kept, left_out = sources.capture(names, {"app.py": str(tmp_path / "app.py")})
    assert left_out == 0 and list(kept) == ["app.py"]  # other.py: no file known for it
    spans = [(span["first"], len(span["lines"])) for span in kept["app.py"]]
    wanted = [(1, 10 + CONTEXT), (100 - CONTEXT, 2 * CONTEXT + 1), (180 - CONTEXT, 200 - 160 + 1)]
    assert spans == wanted
    assert all(text[n - 1] == line for n, line in lines_of(kept["app.py"]).items())


def test_a_long_line_is_cut_and_says_so(tmp_path):
    (tmp_path / "app.py").write_text("x = 1\n" + "y" * (MAX_LINE_CHARS + 50) + "\n")
    kept, _ = sources.capture(["f app.py:2"], {"app.py": str(tmp_path / "app.py")})
    long = lines_of(kept["app.py"])[2]
    assert len(long) == MAX_LINE_CHARS and long.endswith(CUT)


def test_past_the_cap_files_are_left_out_whole_and_said_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sources, "MAX_LINES", 2 * CONTEXT + 1)
    for name in ("hot.py", "cold.py"):
        write_lines(tmp_path / name, 100)
    files = {name: str(tmp_path / name) for name in ("hot.py", "cold.py")}
    document = {
        "sites": [
            {"name": "f cold.py:50", "launches": 1, "gpu_ns": 10},
            {"name": "f hot.py:50", "launches": 1, "gpu_ns": 99},
        ],
        "total_gpu_ns": 109,
    }
    monkeypatch.setattr(_warnings, "_said", set())
    kept = sources.with_sources(document, files)
    assert list(kept[SOURCES]) == ["hot.py"]  # the hottest file first
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "the source of 1 file was not kept" in err[0]


def test_a_file_that_cannot_be_read_leaves_the_document_as_it_was(tmp_path):
    document = {"sites": [{"name": "f gone.py:3", "launches": 1}], "total_launches": 1}
    assert sources.with_sources(document, {"gone.py": str(tmp_path / "gone.py")}) == document


def test_a_name_s_path_leads_to_the_file_naming_read_it_from():
    facts = naming.frame_facts(sys._getframe())
    assert naming.shown_files()[facts.path] == __file__


@settings(deadline=None)
@given(sourced_profiles())
def test_a_document_s_source_survives_its_json_form(made):
    document, _ = made
    assert validate(json.loads(render_json(document)), "p.json") == document


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "must be an object"),
        ({"a.py": {}}, "must be a list of spans"),
        ({"a.py": [{"first": 0, "lines": []}]}, "line number from 1"),
        ({"a.py": [{"first": 1, "lines": [3]}]}, "the lines strings"),
        ({"a.py": [{"first": True, "lines": []}]}, "line number from 1"),
        ({"a.py": [{"first": 5, "lines": ["a"]}, {"first": 2, "lines": ["b"]}]}, "in order"),
        ({"a.py": [{"first": 1, "lines": ["a", "b"]}, {"first": 2, "lines": ["c"]}]}, "overlap"),
        # Past the bounds a document is written within (#45).
        ({"a.py": [{"first": 10**9, "lines": []}]}, "line number from 1 to 999,999,999"),
        ({"a.py": [{"first": 1, "lines": ["x" * 401]}]}, "lines of at most 400 characters"),
        ({"a.py": [{"first": 1, "lines": [""] * 20_001}]}, "at most 20,000 lines"),
        ({"p" * 65_537: []}, "a file's path must be a string of at most 65,536 characters"),
    ],
)
def test_a_malformed_source_field_is_one_line_naming_the_file(value, message):
    document = {"kname": "0.1.0", "schema": 1, "sites": [], "total_launches": 0, SOURCES: value}
    with pytest.raises(DocumentError, match=message) as caught:
        validate(document, "c.json")
    assert str(caught.value).startswith("c.json") and "\n" not in str(caught.value)


def test_merged_documents_keep_each_one_s_source_the_first_one_s_first():
    def census(name: str, kept: dict) -> dict:
        return {
            "kname": "0.1.0",
            "schema": 1,
            "sites": [{"name": name, "kernel": "k", "lib": "", "launches": 1, "share": 1.0,
                       "order": 1}],
            "total_launches": 1,
            SOURCES: kept,
        }  # fmt: skip

    first = census("f a.py:2", {"a.py": [{"first": 1, "lines": ["one", "two"]}]})
    second = census("g b.py:1", {"a.py": [{"first": 2, "lines": ["TWO", "three"]}],
                                 "b.py": [{"first": 1, "lines": ["b"]}]})  # fmt: skip
    merged = validate(merge_documents([first, second]), "merged")
    assert merged[SOURCES] == {
        "a.py": [{"first": 1, "lines": ["one", "two", "three"]}],
        "b.py": [{"first": 1, "lines": ["b"]}],
    }
    assert SOURCES not in merge_documents([census("f a.py:2", {})])


@pytest.fixture(scope="module")
def long_file(tmp_path_factory) -> tuple[str, list[str]]:
    path = tmp_path_factory.mktemp("source") / "long.py"
    return str(path), write_lines(path, 600)


@given(st.lists(st.integers(1, 600), min_size=1, max_size=20))
def test_kept_spans_neither_overlap_nor_touch_and_hold_every_line_near_a_pointed_one(
    long_file, numbers
):
    path, text = long_file
    kept, _ = sources.capture([f"f long.py:{n}" for n in numbers], {"long.py": path})
    spans = kept["long.py"]
    ends = [(span["first"], span["first"] + len(span["lines"])) for span in spans]
    assert all(end < start for (_, end), (start, _) in itertools.pairwise(ends))
    near = {n for n in range(1, 601) if any(abs(n - p) <= CONTEXT for p in numbers)}
    assert lines_of(spans) == {n: text[n - 1] for n in near}


# --- whose source is kept: the program's Python only ----------------------------------------


def census_of(name: str) -> dict:
    return {"sites": [{"name": name, "launches": 1}], "total_launches": 1}


def kept_for_code_named(filename: str) -> dict:
    """The sources a census keeps for a launch from code compiled as `filename`."""
    scope: dict = {}
    exec(compile("import sys\nframe = sys._getframe()\n", filename, "exec"), scope)
    facts = naming.frame_facts(scope["frame"])
    return sources.with_sources(census_of(f"<module> {facts.path}:1"), naming.shown_files())


def passwd_behind_a_python_name(folder) -> str:
    (folder / "app.py").symlink_to("/etc/passwd")
    return str(folder / "app.py")


def a_template(folder) -> str:
    (folder / "page.html").write_text("<p>{{ secret }}</p>\n")
    return str(folder / "page.html")


def a_folder_named_like_python(folder) -> str:
    (folder / "pkg.py").mkdir()
    return str(folder / "pkg.py")


@pytest.mark.parametrize(
    "named",
    [lambda _: "/etc/passwd", passwd_behind_a_python_name, a_template, a_folder_named_like_python],
)
def test_code_named_after_a_file_that_is_not_the_programs_python_keeps_no_source(tmp_path, named):
    assert SOURCES not in kept_for_code_named(named(tmp_path))


def test_code_of_a_python_file_of_the_program_keeps_its_source(tmp_path):
    write_lines(tmp_path / "tool.py", 3)
    assert list(kept_for_code_named(str(tmp_path / "tool.py"))[SOURCES].values()) == [
        [{"first": 1, "lines": ["line 1 = 1 * 2", "line 2 = 2 * 2", "line 3 = 3 * 2"]}]
    ]


def test_kname_sources_off_keeps_no_source(tmp_path, monkeypatch):
    write_lines(tmp_path / "tool.py", 3)
    monkeypatch.setenv("KNAME_SOURCES", "0")
    assert SOURCES not in kept_for_code_named(str(tmp_path / "tool.py"))


def test_a_file_is_read_once_while_it_is_unchanged_and_again_once_it_changes(tmp_path):
    path = tmp_path / "app.py"
    write_lines(path, 5)
    first = sources.program_source("app.py", str(path))
    assert sources.program_source("app.py", str(path)) is first  # not read again
    path.write_text("changed = 1\n")
    assert sources.program_source("app.py", str(path)) == ["changed = 1\n"]


def test_a_source_is_decoded_as_python_decodes_it(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\r\nname = '\xe9t\xe9'\rx = 1\n")
    assert sources.program_source("latin.py", str(path)) == [
        "# -*- coding: latin-1 -*-\n",
        "name = 'été'\n",
        "x = 1\n",
    ]


CELL = """\
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from kname import naming
from kname.documents import sources

shell = InteractiveShell.instance(colors="nocolor")
shell.run_cell("import sys\\nframe = sys._getframe()  # in a cell", store_history=True)
facts = naming.frame_facts(shell.user_ns["frame"])
census = {"sites": [{"name": f"<module> {facts.path}:2", "launches": 1}], "total_launches": 1}
print(json.dumps(sources.with_sources(census, naming.shown_files()).get("sources")))
"""


def test_a_notebook_cell_keeps_the_source_ipython_gave_it(tmp_path):
    pytest.importorskip("IPython")
    env = {**os.environ, "PYTHONPATH": str(REPO), "IPYTHONDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", CELL], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "<cell 1>": [{"first": 1, "lines": ["import sys", "frame = sys._getframe()  # in a cell"]}]
    }


FROM_A_PIPE = """\
import helper

helper.launch()  # the launch line
print("ran", flush=True)
"""


def test_a_program_read_from_a_named_pipe_keeps_its_census_and_exits(tmp_path):
    """The census is written at exit without opening the pipe again (no writer is left: opening
    it would wait for ever)."""
    (tmp_path / "helper.py").write_text("def launch():\n    return 1\n")
    pipe = tmp_path / "app.py"
    os.mkfifo(pipe)
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{tmp_path}", "KNAME": "1",
           "KNAME_TARGETS": "helper:launch", "KNAME_MODE": "census", "KNAME_REPORT": "c.json",
           OWNER_VARIABLE: ""}  # fmt: skip
    with subprocess.Popen(
        [sys.executable, str(pipe)], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as program:  # fmt: skip
        try:
            pipe.write_text(FROM_A_PIPE)  # as `cat app.py > pipe` would, then gone
            stdout, stderr = program.communicate(timeout=30)
        finally:
            if program.poll() is None:
                program.kill()
    assert (program.returncode, stdout, stderr) == (0, "ran\n", "")
    census = json.loads((tmp_path / "c.json").read_text())
    assert [site["name"] for site in census["sites"]] == ["<module> app.py:3"]
    assert SOURCES not in census
