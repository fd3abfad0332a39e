"""The HTML pages of saved documents: one self-contained file each.

layout.py    the page: its views, navigation, style and escaping
source.py    the source views: each file's lines with their numbers beside them
tree.py      the call tree (KNAME_DEPTH above 1), as an icicle
ranks.py     a line's spread across a job's ranks, two cells of a ranking
titles.py    a page's title: the run it is of
profile.py   a GPU profile's page: ranking, source views, tree
census.py    a launch census's page, by launches
diff.py      two profiles (or censuses) compared, line by line
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kname.documents.pages.census import render_census_page
from kname.documents.pages.profile import render_profile_page
from kname.documents.schema import PROFILE_SCHEMA


def render_page(document: Mapping[str, Any]) -> str:
    """The page of a saved document of either schema."""
    if document["schema"] == PROFILE_SCHEMA:
        return render_profile_page(document)
    return render_census_page(document)
