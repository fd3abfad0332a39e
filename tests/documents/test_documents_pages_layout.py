"""The page's pieces (kname.documents.pages.layout): the one way text reaches a page, and the heat
of a share. The views, laid out by a browser, are test_documents_pages_browser.py's."""

from __future__ import annotations

import ast
from html import unescape

from hypothesis import given
from hypothesis import strategies as st
from support import REPO
from support.html_pages import ParsedPage
from support.profile_streams import TERMINAL_HOSTILE

from kname.documents.pages.layout import HEAT_FROM, Html, code, heat, html, joined, site_name, text
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


# --- escaping is the default -----------------------------------------------------------------

values = st.one_of(hostile, st.integers(), st.floats(allow_nan=False), st.none())


@given(values, values)
def test_html_writes_every_value_escaped_as_text_does_and_markup_made_here_as_it_is(one, two):
    made = html("<b>{one}</b>", one=one)
    page = html('<td title="{one}">{made}{two}</td>', one=one, made=made, two=two)
    assert page == f'<td title="{text(one)}"><b>{text(one)}</b>{text(two)}</td>'
    parsed = ParsedPage(f"<table><tr>{page}</tr></table>")
    assert parsed.tags == ["table", "tr", "td", "b"]
    assert parsed.rows[0].titles == [printable(one)]
    assert parsed.rows[0].text(0) == printable(one) + printable(two)


@given(st.lists(st.one_of(hostile, hostile.map(lambda v: html("<i>{v}</i>", v=v)))))
def test_joined_escapes_each_part_that_is_not_markup_made_here(parts):
    assert joined(parts, "\n") == "\n".join(p if isinstance(p, Html) else text(p) for p in parts)


def test_no_page_module_writes_markup_but_through_html():
    """Escaping is the default: markup is written only in `html` templates (whose fields are
    escaped unless they hold Html), never in an f-string, `%` or str.format, which would write
    their values as they are. The outside trial's script got in through an f-string field."""
    found = []
    for path in sorted((REPO / "kname" / "documents" / "pages").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                template = "".join(
                    part.value for part in node.values if isinstance(part, ast.Constant)
                )
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                template = node.left.value if isinstance(node.left, ast.Constant) else ""
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "format":
                template = getattr(node.func.value, "value", "")
            else:
                continue
            if "<" in str(template) or '="' in str(template):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []
