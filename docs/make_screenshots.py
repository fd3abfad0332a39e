"""Screenshots of kname's HTML pages, for the README: docs/page_*.png.

    python docs/make_screenshots.py [FOLDER]      (default: docs/; needs Chromium)

Each page is made from the profile recorded on the H200 (tests/support/recorded_pages.py: the
ranking
and the source view as recorded, the tree with the sites named as KNAME_DEPTH=3 names them, the
diff of the recording's first ten iterations against its last ten), written to a temporary
folder and laid out by headless Chromium in a window of a fixed size. Headless Chromium's
screenshot does not follow a link's scroll, so each shot shows its view as a link to it shows
it (the other views hidden), and the source view from a given line on.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.recorded_pages import h200_document, h200_halves  # noqa: E402

from kname.documents.diff import Comparison  # noqa: E402
from kname.documents.pages.diff import render_diff_page  # noqa: E402
from kname.documents.pages.profile import render_profile_page  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@dataclass(frozen=True)
class Shot:
    """One screenshot: its file, the page, the view shown, the window, the first line shown."""

    file: str
    page: str  # "profile", "profile at depth 3" or "diff"
    view: str
    size: tuple[int, int]
    from_line: int = 0


SHOTS = (
    Shot("page_ranking.png", "profile", "ranking", (1000, 640)),
    Shot("page_source.png", "profile", "f1", (1000, 640), from_line=86),
    Shot("page_tree.png", "profile at depth 3", "tree", (1000, 300)),
    Shot("page_diff.png", "diff", "changes", (1000, 500)),
)


def pages() -> dict[str, str]:
    """The pages the shots show, by name."""
    first, second = h200_halves()
    return {
        "profile": render_profile_page(h200_document()),
        "profile at depth 3": render_profile_page(h200_document(depth=3)),
        # As `kname report first.json --diff second.json --min-time 1us --html diff.html`.
        "diff": render_diff_page(
            Comparison(first, second, ("first.json", "second.json"), min_time_ns=1_000)
        ),
    }


def shown(page: str, shot: Shot) -> str:
    """`page` with only the shot's view shown, from its first line."""
    style = f".view {{ display: none !important; }} #{shot.view} {{ display: block !important; }}"
    hidden = [f"#{shot.view}-L{line}" for line in range(1, shot.from_line)]
    if hidden:
        style += ", ".join(hidden) + " { display: none; }"
    return page.replace("</style>", style + "</style>", 1)


def shoot(browser: str, page: str, shot: Shot, folder: Path, work: Path) -> Path:
    """Lay `page` out in headless Chromium and save the shot's PNG in `folder`."""
    html = work / (shot.file + ".html")
    html.write_text(shown(page, shot), encoding="utf-8")
    target = folder / shot.file
    width, height = shot.size
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={work / 'user'}",
         f"--window-size={width},{height}", f"--screenshot={target}", html.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return target


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else REPO / "docs"
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        print("make_screenshots: no Chromium found (chromium, chromium-browser, google-chrome)")
        return 2
    made = pages()
    with tempfile.TemporaryDirectory() as work:
        for shot in SHOTS:
            path = shoot(browser, made[shot.page], shot, folder, Path(work))
            print(f"{path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
