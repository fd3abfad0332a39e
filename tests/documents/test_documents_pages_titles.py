"""A page's title (kname.documents.pages.titles): in its tab and at its top, which run it is of,
so that two pages open side by side are told apart."""

from __future__ import annotations

from support.profile_streams import census_of

from kname.documents.diff import Comparison
from kname.documents.merge import merge_documents
from kname.documents.pages import render_page
from kname.documents.pages.diff import render_diff_page
from kname.documents.pages.titles import page_title
from kname.documents.schema import RANKS
from kname.ranks import LONE, Rank, meta

WRITTEN = "2026-12-06T08:30:12Z"


def of_rank(rank: Rank, host: str = "node1", **facts: str) -> dict:
    record = meta(rank, host=host, pid=rank.rank) | facts
    return {**census_of({("step app.py:1", "axpy"): 2 + rank.rank}), RANKS: [record]}


def test_a_pages_title_says_the_program_the_host_and_the_time() -> None:
    document = of_rank(LONE, program="train.py", written=WRITTEN)
    assert page_title(document, "kname census") == (
        "kname census: train.py on node1, 2026-12-06 08:30 UTC"
    )
    page = render_page(document)
    assert "<title>kname census: train.py on node1, 2026-12-06 08:30 UTC</title>" in page
    assert "<h1>kname census: train.py on node1, 2026-12-06 08:30 UTC</h1>" in page


def test_a_merged_jobs_title_counts_its_ranks_and_hosts_and_says_the_last_time() -> None:
    ranks = [
        of_rank(Rank(r, 0, 4, "slurm"), host=f"node{r // 2}", program="train.py",
                written=f"2026-12-06T08:3{r}:00Z")
        for r in range(4)
    ]  # fmt: skip
    assert page_title(merge_documents(ranks), "kname profile") == (
        "kname profile: train.py, 4 ranks on 2 hosts, 2026-12-06 08:33 UTC"
    )


def test_a_file_written_before_the_facts_were_kept_is_titled_by_what_it_says() -> None:
    assert page_title(of_rank(LONE), "kname census") == "kname census: on node1"
    assert page_title(census_of({("f a.py:1", "k"): 1}), "kname census") == "kname census"


def test_a_title_is_escaped_like_any_value() -> None:
    page = render_page(of_rank(LONE, host="<b>", program="a&b.py"))
    assert "<title>kname census: a&amp;b.py on &lt;b&gt;</title>" in page


def test_a_diff_pages_title_names_the_two_files() -> None:
    before, after = of_rank(LONE), of_rank(LONE)
    page = render_diff_page(Comparison(before, after, ("before.json", "after.json")))
    assert "<title>kname diff: before.json -&gt; after.json</title>" in page
