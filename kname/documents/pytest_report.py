"""The pytest plugin's report (`pytest --kname-report`, and its baselines): each test's census.

    {
      "kname": "0.1.0",
      "schema": 1,                           the schema of each test's census
      "report": "pytest",
      "tests": {                             in node-id order
        "test_solver.py::test_step": {"outcome": "passed", "total_launches": 3,
                                      "sites": [...]}     a census's sites (schema 1)
      },
      "total_launches": 4
    }

`kname report` reads it as one census: every test's sites summed (`suite_census`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kname._version import __version__
from kname.documents.build import census_document
from kname.documents.merge import merge_documents
from kname.documents.schema import (
    CENSUS_SCHEMA,
    COUNT_RULE,
    PYTEST_REPORT,
    TEXT_RULE,
    DocumentError,
    is_count,
    is_text,
    validate,
)

REPORT_SCHEMA = 1
_JSON_TYPES = ((type(None), "null"), (bool, "a boolean"), (list, "a list"), (str, "a string"),
               ((int, float), "a number"))  # fmt: skip


def is_pytest_report(value: Any) -> bool:
    """Whether a JSON value read from a file says it is the pytest plugin's report."""
    return isinstance(value, dict) and value.get("report") == PYTEST_REPORT


def render_pytest_report(tests: Mapping[str, Mapping[str, Any]]) -> str:
    """The report of {node id: census with its outcome} as JSON text, one site per line."""
    entries = []
    for nodeid in sorted(tests):
        test = tests[nodeid]
        head = {k: test[k] for k in ("outcome", "total_launches") if k in test}
        sites = ",\n".join(f"      {json.dumps(s, ensure_ascii=False)}" for s in test["sites"])
        body = f"[\n{sites}\n    ]" if sites else "[]"
        fields = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
        entries.append(
            f'    {json.dumps(nodeid, ensure_ascii=False)}: {{{fields}, "sites": {body}}}'
        )
    total = sum(t["total_launches"] for t in tests.values())
    return (
        "{\n"
        f'  "kname": {json.dumps(__version__)},\n'
        f'  "schema": {REPORT_SCHEMA},\n'
        '  "report": "pytest",\n'
        + ('  "tests": {\n' + ",\n".join(entries) + "\n  },\n" if entries else '  "tests": {},\n')
        + f'  "total_launches": {total}\n'
        "}\n"
    )


def validate_pytest_report(value: Any, source: str) -> dict[str, Any]:
    """`value` if it is a valid report, else a one-line DocumentError naming `source`."""
    if not is_pytest_report(value):
        raise DocumentError(f"{source}: not a kname test report (--kname-report)")
    if value.get("schema") != REPORT_SCHEMA or not isinstance(value.get("tests"), dict):
        raise DocumentError(
            f"{source}: test report schema {value.get('schema')!r} is not supported "
            f"(kname {__version__} reads schema {REPORT_SCHEMA}, with a 'tests' object)"
        )
    if "kname" in value and not is_text(value["kname"]):
        raise DocumentError(f"{source}: 'kname' (the version that wrote it) must be {TEXT_RULE}")
    for nodeid, test in value["tests"].items():
        if not is_text(nodeid):
            raise DocumentError(f"{source}: a test's node id must be {TEXT_RULE}")
        if not isinstance(test, dict):
            raise DocumentError(
                f"{source}: test {nodeid!r} must be an object with 'sites' and "
                f"'total_launches', not {_json_type(test)}"
            )
        if "outcome" in test and not is_text(test["outcome"]):
            raise DocumentError(f"{source}: test {nodeid!r}: 'outcome' must be {TEXT_RULE}")
        validate({**test, "schema": CENSUS_SCHEMA}, f"{source}: {nodeid}", (CENSUS_SCHEMA,))
    if not is_count(value.get("total_launches")):
        raise DocumentError(f"{source}: 'total_launches' must be {COUNT_RULE}")
    return value


def suite_census(report: Mapping[str, Any]) -> dict[str, Any]:
    """The census (schema 1) of a whole suite: every test's sites summed."""
    tests = [{**test, "schema": CENSUS_SCHEMA} for test in report["tests"].values()]
    return merge_documents(tests) if tests else census_document({})


def _json_type(value: Any) -> str:
    return next(name for kind, name in _JSON_TYPES if isinstance(value, kind))
