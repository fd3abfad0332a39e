"""The run a saved document is of (kname.documents.run_facts): its program and when it was
written, kept in each rank record, bounded on read, carried by a merge."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.profile_streams import census_of

from kname.census import census
from kname.documents.merge import merge_documents
from kname.documents.run_facts import MAX_PROGRAM, program_name, run_facts
from kname.documents.schema import RANKS, DocumentError, render_json, validate
from kname.ranks import Rank, meta


def test_a_live_census_says_its_program_and_when_it_was_made() -> None:
    (record,) = census()[RANKS]
    assert record["program"] == program_name()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["written"])


@pytest.mark.parametrize(
    ("argv", "program"),
    [(["/home/me/train.py", "--token", "s3cret"], "train.py"), (["-c"], "-c"), ([""], "python"),
     ([], "python"), (["/opt/venv/bin/torchrun"], "torchrun")],
)  # fmt: skip
def test_the_program_is_its_file_name_never_its_arguments(argv, program) -> None:
    assert program_name(argv) == program


@given(st.lists(st.text(), max_size=4))
def test_a_program_name_is_a_file_name_a_record_accepts(argv) -> None:
    name = program_name(argv)
    assert name and "/" not in name and len(name) <= MAX_PROGRAM


def rank_census(rank: int, **facts: object) -> dict:
    record = meta(Rank(rank, rank, 2, "slurm"), host="n1", pid=rank) | facts
    return {**census_of({("step app.py:1", "axpy"): 1 + rank}), RANKS: [record]}


@pytest.mark.parametrize(
    ("facts", "fault"),
    [({"program": 3}, "ranks[0].program cannot be 3"),
     ({"program": "x" * 256}, "ranks[0].program cannot be"),
     ({"written": "yesterday"}, "ranks[0].written cannot be 'yesterday'"),
     ({"written": "2026-12-06T08:30:12Z\n"}, "ranks[0].written cannot be")],
)  # fmt: skip
def test_a_malformed_run_fact_is_one_line_naming_it(facts, fault) -> None:
    with pytest.raises(DocumentError) as raised:
        validate(rank_census(0, **facts), "c.json")
    assert str(raised.value).startswith(f"c.json: {fault}") and "\n" not in str(raised.value)


def test_files_written_before_the_facts_were_kept_are_read_as_they_were() -> None:
    assert validate(rank_census(0), "c.json") == rank_census(0)


def test_a_merge_keeps_each_ranks_program_and_time() -> None:
    facts = [run_facts() | {"program": f"p{rank}.py"} for rank in (0, 1)]
    merged = merge_documents([rank_census(rank, **facts[rank]) for rank in (0, 1)])
    assert [record["program"] for record in merged[RANKS]] == ["p0.py", "p1.py"]
    assert [record["written"] for record in merged[RANKS]] == [f["written"] for f in facts]
    assert validate(json.loads(render_json(merged)), "m.json") == merged
