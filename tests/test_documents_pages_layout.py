"""The page's pieces (kname.documents.pages.layout): the one way text reaches a page, and the heat
of a share. The views, laid out by a browser, are test_documents_pages_browser.py's."""

from __future__ import annotations

from html import unescape

from hypothesis import given
from hypothesis import strategies as st
from profile_streams import TERMINAL_HOSTILE

from kname.documents.pages.layout import HEAT_FROM, code, heat, site_name, text
from kname.documents.text import printable
from kname.naming import CALLER_SEPARATOR

hostile = st.text(st.one_of(st.sampled_from("<>&\"'\t" + TERMINAL_HOSTILE), st.characters()))


@given(hostile)
def test_text_reads_back_as_the_printable_value_with_nothing_html_would_take_for_markup(value):
    shown = text(value)
    assert not set("<>\"'") & set(shown) and "\t" not in shown
    assert "&" not in shown.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "").replace(
        "&quot;", ""
    ).replace("&#x27;", "")
    assert unescape(shown) == printable(value)
    shown.encode("utf-8")  # no lone surrogate


@given(hostile)
def test_code_keeps_tabs_and_escapes_the_rest_as_text_does(line):
    assert code(line).split("\t") == [text(part) for part in line.split("\t")]


@given(st.lists(hostile, min_size=1, max_size=4))
def test_a_site_name_shows_each_frame_of_its_chain_in_its_own_span(frames):
    name = CALLER_SEPARATOR.join(frames)
    spans = site_name(name).split(f" {text(CALLER_SEPARATOR.strip())} ")
    assert spans == [
        f'<span class="call">{text(part)}</span>' for part in name.split(CALLER_SEPARATOR)
    ]


@given(st.lists(st.floats(0, 1), min_size=2))
def test_heat_grows_with_share(shares):
    shares = sorted(shares)
    levels = [int(heat(share)[1:] or 0) for share in shares]
    assert levels == sorted(levels)
    assert all((level == 0) == (share == 0) for level, share in zip(levels, shares, strict=True))


def test_each_heat_level_starts_at_its_share():
    assert [heat(share) for share in HEAT_FROM[1:]] == ["h2", "h3", "h4", "h5", "h6"]
    assert heat(1e-9) == "h1" and heat(1.0) == "h6"
