"""The saved documents' layouts: every document survives its JSON text, and a bad one is one line
naming the file and the fault, for the launch census (schema 1) and the GPU profile (schema 2)."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given
from profile_streams import census_of, documents, profile_of, site_counts

from kname.documents.build import profile_document
from kname.documents.files import load
from kname.documents.schema import CENSUS_SCHEMA, DocumentError, render_json, validate

GOOD = census_of({("step app.py:3", "axpy"): 2})


@given(site_counts)
def test_render_json_reads_back_as_the_same_valid_census(counts) -> None:
    document = census_of(counts)
    text = render_json(document)
    assert text.endswith("}\n")
    assert json.loads(text) == document
    assert validate(json.loads(text), "x.json") == document


@given(documents)
def test_a_document_survives_its_json_form(document):
    text = render_json(document)
    assert json.loads(text) == document
    assert validate(json.loads(text), "x.json") == document
    assert all(line.startswith(("{", "}", "  ")) for line in text.splitlines())


@pytest.mark.parametrize(
    ("document", "fault"),
    [
        ([], "not a kname census"),
        ({"schema": 1}, "not a kname census"),
        ({**GOOD, "schema": 2}, "census schema 2 is not supported"),
        ({**GOOD, "sites": {}}, "'sites' must be a list"),
        ({**GOOD, "sites": [{"name": "x"}]}, "sites[0] has no 'kernel'"),
        ({**GOOD, "sites": [{**GOOD["sites"][0], "launches": -1}]}, "sites[0].launches"),
        ({**GOOD, "sites": [{**GOOD["sites"][0], "launches": True}]}, "sites[0].launches"),
        ({**GOOD, "sites": [{**GOOD["sites"][0], "share": 1.5}]}, "sites[0].share"),
        ({**GOOD, "total_launches": "2"}, "'total_launches' must be a whole number"),
    ],
)
def test_validate_names_the_file_and_the_fault_on_one_line(document, fault) -> None:
    with pytest.raises(DocumentError) as raised:
        validate(document, "census.json", (CENSUS_SCHEMA,))
    message = str(raised.value)
    assert message.startswith("census.json: ") and fault in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema=3), "schema 3 is not supported .* reads schemas 1 and 2"),
        (lambda d: d["sites"][0].pop("gpu_ns"), r"sites\[0\] has no 'gpu_ns'"),
        (lambda d: d["sites"][0].update(gpu_ns=-1), r"sites\[0\].gpu_ns must be a whole number"),
        (lambda d: d["sites"][0].update(share=1.5), "share must be a number from 0 to 1"),
        (lambda d: d["sites"][0].update(kernels=[]), "kernels must be an object"),
        (
            lambda d: d["sites"][0]["kernels"]["axpy"].update(gpu_ns=2),
            "not the sums of its kernels",
        ),
        (lambda d: d.update(total_gpu_ns=1), "totals .* are not the sums of the sites"),
        (lambda d: d["sites"].append(copy.deepcopy(d["sites"][0])), "is listed twice"),
        (lambda d: d.pop("unattributed"), "'unattributed' must be an object"),
        (lambda d: d.update(processes="2"), "'processes' must be a whole number"),
        (lambda d: d["sites"][0].update(replayed_at=[]), r"sites\[0\].replayed_at must be"),
        (
            lambda d: d["sites"][0].update(replayed_at={"r.py:1": {"launches": -1, "gpu_ns": 0}}),
            r"sites\[0\].replayed_at must be \{replay site: ",
        ),
        (
            lambda d: d["sites"][0].update(replayed_unseen={"launches": 1}),
            r"sites\[0\].replayed_unseen must be",
        ),
        (
            lambda d: d["sites"][0].update(
                replayed_at={"r.py:1": {"launches": 2, "gpu_ns": 20}},
                replayed_unseen={"launches": 2, "gpu_ns": 0},
            ),
            "replayed_at and replayed_unseen add up to more than the site's launches",
        ),
    ],
)
def test_a_bad_document_is_one_line_naming_the_file_and_the_fault(tmp_path, change, message):
    document = profile_document(profile_of({"main app.py:22": ("axpy", 3, 30)}))
    change(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(DocumentError, match=message) as caught:
        load(str(path))
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_a_profile_written_before_graph_fields_reads_as_sites_with_no_graph_work(tmp_path):
    document = profile_document(profile_of({"main app.py:22": ("axpy", 3, 30)}))
    assert "replayed_at" not in document["sites"][0]  # only where there is graph work
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    assert load(str(path)) == document
