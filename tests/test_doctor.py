"""`kname doctor`'s checks, run in this process (the installed command is in test_cli.py)."""

from __future__ import annotations

import pytest

from kname import doctor
from kname.config import KNOWN_VARIABLES


def doctor_lines(capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = doctor.main()
    return code, capsys.readouterr().out.splitlines()


def test_doctor_flags_a_misspelled_variable_with_the_nearest_name(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KNAME_MDOE", "census")
    code, lines = doctor_lines(capsys)
    assert code == 1
    assert "✗ KNAME_MDOE is not a kname variable (did you mean KNAME_MODE?); ignoring it" in lines


def test_doctor_flags_every_unknown_kname_variable(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KNAME_FOO", "1")  # like KNAME_FORMAT, but not a near miss
    monkeypatch.setenv("KNAME_OTHER_TOOL_LOG", "x")  # like nothing kname reads
    monkeypatch.setenv("_KNAME_REPORT_PID", "1")  # kname's own, internal
    _, lines = doctor_lines(capsys)
    flagged = [line for line in lines if "is not a kname variable" in line]
    assert flagged == [
        "✗ KNAME_FOO is not a kname variable; ignoring it (the nearest is KNAME_FORMAT)",
        "✗ KNAME_OTHER_TOOL_LOG is not a kname variable; ignoring it (kname reads "
        + ", ".join(KNOWN_VARIABLES)
        + ")",
    ]


def test_doctor_flags_no_variable_kname_reads(monkeypatch, capsys) -> None:
    for variable in KNOWN_VARIABLES:
        monkeypatch.setenv(variable, "")
    _, lines = doctor_lines(capsys)
    assert not [line for line in lines if "is not a kname variable" in line]
