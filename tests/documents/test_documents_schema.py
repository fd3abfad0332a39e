"""The saved documents' layouts: every document survives its JSON text, and a bad one is one line
naming the file and the fault, for the launch census (schema 1) and the GPU profile (schema 2)."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.profile_streams import census_of, documents, profile_of, site_counts

from kname.documents.build import profile_document
from kname.documents.files import load
from kname.documents.schema import (
    CENSUS_SCHEMA,
    PROFILE_SCHEMA,
    SITE_FIELDS,
    DocumentError,
    _validate_site,
    render_json,
    validate,
)

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
        ({**GOOD, "total_launches": 2**63}, "'total_launches' must be a whole number from 0 to"),
        ({**GOOD, "total_launches": 0}, "total_launches (0) is not the sum of the sites'"),
        ({**GOOD, "kname": "v" * 65_537}, "'kname' (the version that wrote it) must be a str"),
    ],
)
def test_validate_names_the_file_and_the_fault_on_one_line(document, fault) -> None:
    with pytest.raises(DocumentError) as raised:
        validate(document, "census.json", (CENSUS_SCHEMA,))
    message = str(raised.value)
    assert message.startswith("census.json: ") and fault in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("schemas", "kinds"),
    [((CENSUS_SCHEMA,), "census"), ((CENSUS_SCHEMA, PROFILE_SCHEMA), "census or profile")],
)
def test_a_file_of_neither_kind_is_said_to_be_none_of_the_kinds_read(schemas, kinds) -> None:
    """`kname report` reads censuses and profiles: a file of neither (raw CUPTI streams, say)
    is said to be neither, not only "not a census"."""
    streams = {"streams": [], "activities": []}
    with pytest.raises(DocumentError) as raised:
        validate(streams, "x.json", schemas)
    assert str(raised.value) == f"x.json: not a kname {kinds} (an object with 'schema' and 'sites')"


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
        # Bounds (#45): every count and time within 2**63-1, every text within 65,536 chars.
        (lambda d: d["unattributed"].pop("launches"), "with 'launches', 'gpu_ns' and 'kernels'"),
        (
            lambda d: d["unattributed"].update(launches="<b>"),
            r"unattributed: 'launches' must be a whole number from 0 to 2\*\*63-1",
        ),
        (lambda d: d["unattributed"].update(gpu_ns=5), "unattributed: launches and gpu_ns are"),
        (
            lambda d: d["sites"][0].update(gpu_ns=10**400),
            r"gpu_ns must be a whole number from 0 to 2\*\*63-1 .*, not 1000000000.*\.\.\.$",
        ),
        (lambda d: d["sites"][0].update(order=2**63), r"sites\[0\].order must be a whole number"),
        (lambda d: d["sites"][0].update(kernel="k" * 65_537), "at most 65,536 characters"),
        (lambda d: d["sites"][0]["kernels"].update({"k" * 65_537: {}}), "a kernel's name must"),
        (lambda d: d.update(kname=2), "'kname' .* must be a string of at most 65,536"),
    ],
)
def test_a_bad_document_is_one_line_naming_the_file_and_the_fault(tmp_path, change, message):
    document = profile_document(profile_of({"main app.py:22": ("axpy", 3, 30)}))
    change(document)
    assert_one_line_fault(tmp_path, document, message)


def assert_one_line_fault(tmp_path, document: dict, message: str) -> None:
    """`document`, saved, is refused on one line naming the file and matching `message`."""
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


# --- ranks: who wrote a document, and a merged site's numbers on each rank -------------------

RECORD = {"rank": 0, "local_rank": 0, "world_size": 2, "launcher": "torchrun", "host": "n0",
          "pid": 11, "device": "0"}  # fmt: skip


def two_ranks() -> dict:
    """A merged profile of two ranks, written by hand: a site of 3 launches (1 + 2), 30 ns."""
    document = profile_document(profile_of({"main app.py:22": ("axpy", 3, 30)}))
    document["ranks"] = [dict(RECORD), {**RECORD, "rank": 1, "local_rank": 1, "pid": 12}]
    document["sites"][0]["by_rank"] = {"launches": [1, 2], "gpu_ns": [10, 20]}
    return document


WINDOW = {"start_ns": 10, "end_ns": 20, "by": "attach"}


def test_a_document_of_two_ranks_survives_its_json_form() -> None:
    document = two_ranks()
    document["ranks"][1]["window"] = dict(WINDOW)  # an on-demand window's, read back too
    text = render_json(document)
    assert validate(json.loads(text), "x.json") == document
    assert text.splitlines()[-4:-1] == [
        f"    {json.dumps(document['ranks'][0])},",
        f"    {json.dumps(document['ranks'][1])}",
        "  ]",
    ]  # one rank per line


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(ranks=[]), "'ranks' must be a list of one or more rank records"),
        (lambda d: d["ranks"][0].pop("host"), r"ranks\[0\] must be an object with rank, "),
        (lambda d: d["ranks"][1].update(rank=-1), r"ranks\[1\].rank cannot be -1"),
        (lambda d: d["ranks"][1].update(world_size=0), r"ranks\[1\].world_size cannot be 0"),
        (lambda d: d["ranks"][0].update(device=1.5), r"ranks\[0\].device cannot be 1.5"),
        (lambda d: d["ranks"][0].update(launcher=3), r"ranks\[0\].launcher cannot be 3"),
        (lambda d: d["ranks"].reverse(), r"ranks\[1\]: ranks must be listed once each, in order"),
        (lambda d: d["ranks"][1].update(rank=0), r"ranks\[1\]: ranks must be listed once each"),
        (lambda d: d["sites"][0].pop("by_rank"), r"sites\[0\] needs 'by_rank'.* has 2 ranks"),
        (
            lambda d: d["sites"][0]["by_rank"].update(gpu_ns=[10]),
            r"sites\[0\].gpu_ns: by_rank must list 2 whole numbers >= 0, one per rank",
        ),
        (lambda d: d["sites"][0]["by_rank"].update(gpu_ns=[-10, 40]), "whole numbers >= 0"),
        (lambda d: d["sites"][0]["by_rank"].update(launches=[True, 2]), "whole numbers >= 0"),
        (lambda d: d["sites"][0]["by_rank"].update(launches=[2, 2]), "does not add up to"),
        (lambda d: d.pop("ranks"), "sites have 'by_rank' but the document has no 'ranks'"),
        (lambda d: d["ranks"].pop(), r"sites\[0\] has 'by_rank' but the document has one rank"),
        (lambda d: d["ranks"][0].update(window=[1, 2]), r"ranks\[0\].window must be an object"),
        (lambda d: d["ranks"][0].update(window=WINDOW | {"end_ns": 5}), "the end not before"),
        (lambda d: d["ranks"][0].update(window=WINDOW | {"start_ns": 2**63}), "2\\*\\*63-1"),
        (lambda d: d["ranks"][1].update(window=WINDOW | {"by": "cron"}), "by \\(attach or trigger"),
    ],
)
def test_bad_ranks_are_one_line_naming_the_file_and_the_fault(tmp_path, change, message) -> None:
    document = two_ranks()
    change(document)
    assert_one_line_fault(tmp_path, document, message)


# Values a saved site's fields may hold, of every JSON type: the quick check of the common form
# must never pass what the full checks refuse.
json_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=3),
    st.just([]), st.just({}), st.just({"axpy": {"launches": 1, "gpu_ns": 1}}),
    st.just({"r.py:1": {"launches": 2, "gpu_ns": 0}}), st.just({"launches": 1, "gpu_ns": 1}),
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["name", "kernel", "lib", "launches", "gpu_ns", "share", "order",
                        "kernels", "replayed_at", "replayed_unseen"]), json_values)  # fmt: skip
def test_a_site_passes_validation_only_if_the_full_checks_pass_it(field, value) -> None:
    document = profile_document(profile_of({"main app.py:22": ("axpy", 1, 1)}))
    document["sites"][0][field] = value
    try:
        _validate_site(document["sites"][0], "x", SITE_FIELDS[2])
    except DocumentError:
        with pytest.raises(DocumentError):
            validate(document, "x.json")
