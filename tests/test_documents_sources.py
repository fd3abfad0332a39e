"""The source a saved document keeps (kname.documents.sources): where a name points, which lines
are kept, the cap, the field's validation, JSON form and merge, and the files naming read."""

from __future__ import annotations

import itertools
import json
import sys

import pytest
from html_pages import PATHS, chains, name_of, sourced_profiles
from hypothesis import given, settings
from hypothesis import strategies as st

from kname import _warnings, naming
from kname.documents import sources
from kname.documents.merge import merge_documents
from kname.documents.schema import DocumentError, render_json, validate
from kname.documents.sources import CONTEXT, CUT, MAX_LINE_CHARS, SOURCES, chain, lines_of


@given(chains)
def test_each_part_of_a_name_points_at_its_path_and_line(made):
    frames = chain(name_of(made), known=PATHS)
    assert [(frame.path, frame.line) for frame in frames] == [(p, n) for _, p, n in made]
    assert [frame.label for frame in frames] == [f"{f} {p}:{n}" for f, p, n in made]


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
