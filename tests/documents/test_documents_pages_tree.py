"""The call tree (kname.documents.pages.tree): frames summed from the sites' chains, drawn as an
icicle whose boxes are as wide as their share of their parent."""

from __future__ import annotations

import re

from hypothesis import given, settings
from support.html_pages import ParsedPage, sourced_profiles

from kname.documents.build import profile_document
from kname.documents.pages import tree
from kname.documents.pages.profile import render_profile_page
from kname.documents.pages.source import SourceFiles
from kname.profiling.join import KernelTotals, Profile, SiteTotals


def document_of(times: dict[str, int]) -> dict:
    sites = {
        name: SiteTotals(1, gpu_ns, rank, {"k": KernelTotals(1, gpu_ns)})
        for rank, (name, gpu_ns) in enumerate(times.items(), 1)
    }
    return profile_document(Profile(sites, SiteTotals()))


def walk(level: dict, path: tuple[str, ...] = ()):
    for label, node in level.items():
        yield (*path, label), node
        yield from walk(node.kids, (*path, label))


@settings(deadline=None)
@given(sourced_profiles())
def test_each_frame_holds_the_sum_of_the_sites_beneath_it(made):
    document, _ = made
    values = {site["name"]: site["gpu_ns"] for site in document["sites"]}
    files = SourceFiles(values, [document])
    chains = tree.grafted({name: files.chains[name] for name in values})
    for path, node in walk(tree.build(values, files)):
        outermost_first = {
            name: [frame.label for frame in reversed(chains[name])] for name in values
        }
        beneath = [n for n, labels in outermost_first.items() if tuple(labels[: len(path)]) == path]
        assert node.value == sum(values[name] for name in beneath)


@settings(deadline=None)
@given(sourced_profiles())
def test_each_box_is_as_wide_as_its_share_of_its_parent(made):
    document, _ = made
    page = ParsedPage(render_profile_page(document))
    roots = sum(site["gpu_ns"] for site in document["sites"])  # drawn or not
    for frame in page.frames:
        width = float(re.fullmatch(r"width:([\d.]+)%", frame["style"]).group(1))
        parent = int(frame["parent"] or roots)
        # Printed with 3 decimals: off by at most half the last digit. A tie (45.3125 printed
        # 45.312) is off by exactly that, which the floats' subtraction can overshoot by 1e-15.
        exact = 100 * int(frame["data-value"]) / parent
        assert abs(width - exact) <= 0.0005 + 1e-12, (width, exact)


def test_a_tree_reads_outermost_caller_first():
    page = ParsedPage(
        render_profile_page(
            document_of(
                {
                    "a app.py:1 < run app.py:10 < main app.py:20": 600,
                    "b app.py:2 < run app.py:10 < main app.py:20": 300,
                    "c app.py:3 < main app.py:21": 100,
                }
            )
        )
    )
    shown = [(f["a-title"].split(":")[0] + ":" + f["a-title"].split(":")[1], f["data-value"],
              f["parent"]) for f in page.frames]  # fmt: skip
    assert shown == [
        ("main app.py:20", "900", ""),
        ("run app.py:10", "900", "900"),
        ("a app.py:1", "600", "900"),
        ("b app.py:2", "300", "900"),
        ("main app.py:21", "100", ""),
        ("c app.py:3", "100", "100"),
    ]


@settings(deadline=None)
@given(sourced_profiles())
def test_a_grafted_chain_is_its_own_chain_then_callers_another_chain_shows(made):
    document, _ = made
    files = SourceFiles([site["name"] for site in document["sites"]], [document])
    chains = tree.grafted(files.chains)
    shown = {tuple(f.label for f in frames) for frames in files.chains.values()}
    for name, frames in chains.items():
        own = files.chains[name]
        assert frames[: len(own)] == own
        if len(frames) > len(own):  # its outermost frame, with the callers another shows it has
            labels = tuple(f.label for f in frames[len(own) - 1 :])
            assert any(chain[-len(labels) :] == labels for chain in shown)


def test_a_chain_cut_short_by_the_depth_hangs_under_its_callers_not_beside_them():
    """KNAME_DEPTH=3: `inner` is called from deeper down than `step`, so its name loses `main`;
    its outermost frame, `run app.py:10`, is the one `step`'s name shows `main` calling."""
    page = ParsedPage(
        render_profile_page(
            document_of(
                {
                    "step app.py:5 < run app.py:10 < main app.py:20": 600,
                    "inner app.py:2 < step app.py:6 < run app.py:10": 400,
                }
            )
        )
    )
    roots = [f["a-title"].split(":")[0] for f in page.frames if not f["parent"]]
    assert roots == ["main app.py"]
    assert [f["data-value"] for f in page.frames][:2] == ["1000", "1000"]


def test_frames_too_narrow_to_see_are_left_out_and_counted():
    tiny = int(tree.MIN_SHARE * 1_000_000) - 1
    page = render_profile_page(
        document_of(
            {
                "a app.py:1 < main app.py:20": 1_000_000 - tiny,
                "b app.py:2 < side app.py:30": tiny,
            }
        )
    )
    labels = [frame["a-title"] for frame in ParsedPage(page).frames]
    assert not [label for label in labels if "side" in label or "b app.py" in label]
    assert "2 frames under 0.2% of the total are not drawn" in page
