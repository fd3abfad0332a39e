"""The saved documents' layouts: every document survives its JSON text, and a bad one is one line
naming the file and the fault, for the launch census (schema 1) and the GPU profile (schema 2)."""

from __future__ import annotations

import copy
import json
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.profile_streams import (
    census_of,
    documents,
    plain_documents,
    profile_of,
    site_counts,
)

from kname.documents import schema as schema_module
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


# --- sites of their schema's own fields, checked in one loop (issue 43) ----------------------

# What a broken or hostile file may hold where a site's field is: values at and past each bound
# (a count's 0 and 2**63-1, a text's 65,536 characters, a share's 0 and 1), NaN, the
# infinities, and JSON's other types.
COUNTS = [-1, 0, 2**63 - 1, 2**63, 10**400, True, False, 1.0, None, "1", [1]]
SHARES = [-1, -0.5, -0.0, 0, 0.5, 1, 1.0, 1.5, float("nan"), float("inf"), float("-inf"), True,
          None, "0.5"]  # fmt: skip
TEXTS = ["", "k" * 65_536, "k" * 65_537, 1, None, True, ["x"]]
KERNELS = [[], {}, None, "axpy", {"axpy": []}, {"axpy": {"launches": 1}}, {"axpy": None}]
BOUNDARY = {"name": TEXTS, "kernel": TEXTS, "lib": TEXTS, "launches": COUNTS, "gpu_ns": COUNTS,
            "order": COUNTS, "share": SHARES, "kernels": KERNELS}  # fmt: skip
OPTIONAL_SITE_FIELDS = ("replayed_at", "replayed_unseen", "launch_times", "backward_ns",
                        "memory", "by_rank", "not_a_field")  # fmt: skip


def is_whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@st.composite
def broken(draw, document: dict) -> dict:
    """`document` as read back from its JSON, with a few of its sites' fields (or a kernel's
    count, its site's kept its sum, or its name) replaced, removed or added, or a site replaced,
    by what a broken file may hold."""
    document = json.loads(json.dumps(document))
    sites = document["sites"]
    for _ in range(draw(st.integers(1, 2)) if sites else 0):
        index = draw(st.integers(0, len(sites) - 1))
        site = sites[index]
        change = draw(st.sampled_from(["set", "set", "kernel", "kernel", "remove", "add", "site"]))
        if change == "site" or not isinstance(site, dict):
            sites[index] = draw(st.sampled_from([None, 1, "site", [], {}]))
        elif change == "set":
            field = draw(st.sampled_from(SITE_FIELDS[document["schema"]]))
            site[field] = draw(st.sampled_from(BOUNDARY[field]))
        elif change == "remove" and site:
            site.pop(draw(st.sampled_from(sorted(site))))
        elif change == "add":
            site[draw(st.sampled_from(OPTIONAL_SITE_FIELDS))] = draw(st.sampled_from(COUNTS))
        elif isinstance(site.get("kernels"), dict) and site["kernels"]:
            kernels = site["kernels"]
            kernel = draw(st.sampled_from(sorted(kernels)))
            counts = kernels[kernel]
            if draw(st.booleans()):  # renamed, its counts kept
                kernels[draw(st.sampled_from(["k" * 65_536, "k" * 65_537]))] = kernels.pop(kernel)
            elif isinstance(counts, dict):
                field = draw(st.sampled_from(["launches", "gpu_ns"]))
                value = draw(st.sampled_from(COUNTS))
                if is_whole(value) and is_whole(counts.get(field)) and is_whole(site.get(field)):
                    site[field] += value - counts[field]  # the site's sum kept
                counts[field] = value
    return document


def fault_of(document: dict) -> str | None:
    """What validate says is wrong with `document` (None: it is valid)."""
    try:
        validate(copy.deepcopy(document), "x.json")
    except DocumentError as exc:
        return str(exc)
    return None


one_rank = {"ranks": [dict(RECORD)]}
profiles_and_censuses = st.one_of(
    plain_documents,
    plain_documents.map(lambda d: d | one_rank),
    documents,
    site_counts.map(census_of),
)


@settings(max_examples=1000, deadline=None)
@given(profiles_and_censuses.flatmap(broken))
def test_validate_accepts_and_refuses_a_document_exactly_as_its_site_by_site_checks_do(document):
    # The one loop over sites of their own fields is a shortcut: with it turned off each
    # document gets the same verdict and the same one-line fault.
    assert fault_of(document) == site_by_site_fault_of(document)


def site_by_site_fault_of(document: dict) -> str | None:
    """fault_of with the one loop turned off: every site through the checks of each, as
    before issue 43."""
    site_by_site = dict.fromkeys(schema_module._PLAIN_SITES, lambda sites: False)
    with mock.patch.dict(schema_module._PLAIN_SITES, site_by_site):
        return fault_of(document)


TWO_SITES = {
    PROFILE_SCHEMA: profile_document(
        profile_of({"main app.py:2": ("axpy", 3, 30), "f b.py:9": ("k", 1, 5)})
    ),
    CENSUS_SCHEMA: census_of({("main app.py:2", "axpy"): 3, ("f b.py:9", "k"): 1}),
}
KERNEL_FIELDS = ("kernel launches", "kernel gpu_ns", "kernel name")


def with_value(schema: int, field: str, value) -> dict:
    """TWO_SITES[schema] with its second site's `field` set to `value`; a kernel's count (the
    site's sum kept) or its name for a KERNEL_FIELDS one."""
    document = copy.deepcopy(TWO_SITES[schema])
    site = document["sites"][1]
    if field == "kernel name":
        site["kernels"][value] = site["kernels"].pop("k")
    elif field in KERNEL_FIELDS:
        count = field.split()[1]
        site["kernels"]["k"][count] = value
        if is_whole(value):
            site[count] = value
    else:
        site[field] = value
    return document


@pytest.mark.parametrize(
    ("schema", "field"),
    [(PROFILE_SCHEMA, field) for field in (*SITE_FIELDS[PROFILE_SCHEMA], *KERNEL_FIELDS)]
    + [(CENSUS_SCHEMA, field) for field in SITE_FIELDS[CENSUS_SCHEMA]],
)
def test_each_value_at_or_past_a_bound_gets_the_verdict_of_the_site_by_site_checks(schema, field):
    if field == "kernel name":
        values = [text for text in TEXTS if isinstance(text, str)]  # JSON's keys are strings
    else:
        values = BOUNDARY.get(field, COUNTS)
    for value in values:
        document = with_value(schema, field, value)
        assert fault_of(document) == site_by_site_fault_of(document), value
