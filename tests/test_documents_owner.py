"""Which process owns the saved files, and the name of a file beside the owner's.

Processes that really start beneath an owner are run in test_census.py (the census) and
test_profile_mode.py (a profile's files); these are the rules in-process.
"""

from __future__ import annotations

import os

import pytest

from kname.documents.owner import OWNER_VARIABLE, beside, owner_pid


def test_beside_puts_the_pid_before_the_suffix() -> None:
    pid = os.getpid()
    assert beside("out/p.json") == f"out/p.pid{pid}.json"
    assert beside("trace") == f"trace.pid{pid}.json"


@pytest.mark.parametrize("inherited", [None, "", "12x", "²"])
def test_the_first_process_to_ask_owns_the_files_and_marks_itself(monkeypatch, inherited) -> None:
    # Set first, so that monkeypatch puts back what was there (or nothing) after owner_pid()'s mark.
    monkeypatch.setenv(OWNER_VARIABLE, inherited or "")
    if inherited is None:
        monkeypatch.delenv(OWNER_VARIABLE)
    assert owner_pid() == os.getpid()
    assert os.environ[OWNER_VARIABLE] == str(os.getpid())


def test_a_process_beneath_an_owner_keeps_its_mark(monkeypatch) -> None:
    monkeypatch.setenv(OWNER_VARIABLE, "1")
    assert owner_pid() == 1
    assert os.environ[OWNER_VARIABLE] == "1"
