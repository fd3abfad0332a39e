"""Tests for kname.paths: example tests per rule, then Hypothesis properties."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kname.paths import UNKNOWN, normalise_components, short_path

PROPERTY = settings(max_examples=500, deadline=None)


# --------------------------------------------------------------------------
# Example-based tests, one group per rule
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "<stdin>",
        "<string>",
        "<frozen importlib._bootstrap>",
        "<ipython-input-3-abc123>",
        "<python-input-0>",
        "<>",
        "<a/b\\c>",
    ],
)
def test_pseudo_names_come_back_as_themselves(name: str) -> None:
    assert short_path(name) == name
    assert short_path(name, roots=["/"]) == name


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/tmp/ipykernel_12345/3.py", "<cell 3>"),
        ("/tmp/ipykernel_12345/1234567890.py", "<cell 1234567890>"),
        ("/tmp/ipykernel_7/a1b2c3.py", "<cell a1b2c3>"),
        ("/var/folders/xy/T/ipykernel_99/42.py", "<cell 42>"),
        ("C:\\Users\\u\\AppData\\Local\\Temp\\ipykernel_8\\5.py", "<cell 5>"),
        ("/tmp/ipykernel_12345/../ipykernel_1/2.py", "<cell 2>"),
        # Not cell files: wrong directory or not a .py file.
        ("/tmp/ipykernel_x/3.py", "ipykernel_x/3.py"),
        ("/tmp/ipykernel_1/3.txt", "ipykernel_1/3.txt"),
        ("/tmp/ipykernel_1/a-b.py", "ipykernel_1/a-b.py"),
    ],
)
def test_ipykernel_cell_files(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("C:\\proj\\src\\pkg\\m.py", "pkg/m.py"),
        ("c:/x/y.py", "x/y.py"),
        ("C:\\m.py", "m.py"),
        ("C:/Users/u/proj/.venv/Lib/site-packages/torch/nn/f.py", "torch/nn/f.py"),
        ("C:\\Python311\\Lib\\Site-Packages\\pkg\\m.py", "pkg/m.py"),
        ("C:\\a/b\\\\c//d.py", "c/d.py"),
        ("\\\\server\\share\\x.py", "x.py"),
        ("\\\\server\\share\\proj\\pkg\\x.py", "pkg/x.py"),
        ("\\\\?\\C:\\proj\\src\\pkg\\m.py", "pkg/m.py"),
        ("\\\\.\\C:\\a\\b\\m.py", "b/m.py"),
        ("\\\\?\\UNC\\server\\share\\a\\b\\m.py", "b/m.py"),
        # A bare drive component anywhere is dropped.
        ("/a/b/C:/m.py", "b/m.py"),
        # Drive-relative names are not anchored: kept whole.
        ("C:foo\\m.py", "C:foo/m.py"),
    ],
)
def test_windows_paths(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "components"),
    [
        ("/a/./b/../c/m.py", ["a", "c", "m.py"]),
        ("/../../a/m.py", ["a", "m.py"]),
        ("a/../../b.py", ["b.py"]),
        ("//a///b//m.py", ["a", "b", "m.py"]),
        ("/a/b/./", ["a", "b"]),
        ("C:\\a\\..\\..\\b\\m.py", ["b", "m.py"]),
        ("\\\\server\\share\\..\\x.py", ["x.py"]),
        ("", []),
        ("/", []),
        ("\\/\\//", []),
        ("../..", []),
    ],
)
def test_normalise_components_is_lexical(filename: str, components: list[str]) -> None:
    assert normalise_components(filename) == components


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/x/y/z/../../w/m.py", "w/m.py"),
        ("/x/site-packages/pkg/../other/m.py", "other/m.py"),
        ("/x/site-packages/../src/pkg/m.py", "pkg/m.py"),
        ("/../../../m.py", "m.py"),
    ],
)
def test_dot_dot_is_resolved_before_the_rules(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/x/app.zip/pkg/m.py", "pkg/m.py"),
        ("/x/app.zip/pkg/sub/deep/m.py", "pkg/sub/deep/m.py"),
        ("/home/u/dist/tool.pyz/tool/__main__.py", "tool/__main__.py"),
        ("/usr/lib/python3/site-packages/foo-1.0-py3.11.egg/foo/m.py", "foo/m.py"),
        ("/tmp/pip-24.0-py3-none-any.whl/pip/_internal/x.py", "pip/_internal/x.py"),
        ("C:\\x\\APP.ZIP\\pkg\\m.py", "pkg/m.py"),
        # Nested archives: the path inside the innermost one.
        ("/x/app.pex/.deps/req-2.0-py3-none-any.whl/req/api.py", "req/api.py"),
        ("/x/outer.zip/inner.zip/pkg/m.py", "pkg/m.py"),
        # The inside of an archive is shown whole, src and all.
        ("/x/app.zip/src/pkg/m.py", "src/pkg/m.py"),
        # An archive as the last component is just a file name.
        ("/x/y/app.zip", "y/app.zip"),
    ],
)
def test_archives_show_the_path_inside(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "roots", "expected"),
    [
        ("/work/proj/pkg/m.py", ["/work/proj"], "pkg/m.py"),
        ("/work/proj/pkg/m.py", ["/work", "/work/proj"], "pkg/m.py"),
        ("/work/proj/pkg/m.py", ["/work/proj", "/work"], "pkg/m.py"),
        ("/work/proj/pkg/m.py", ["/work/proj/pkg", "/work"], "m.py"),
        ("/work/proj/pkg/m.py", ["/work/proj/"], "pkg/m.py"),
        ("/work/proj/pkg/m.py", ["/work//proj/./x/.."], "pkg/m.py"),
        ("C:\\work\\proj\\pkg\\m.py", ["C:/work/proj"], "pkg/m.py"),
        ("/work/proj/pkg/m.py", "/work/proj", "pkg/m.py"),
        # Roots beat site-packages and src.
        ("/work/proj/src/pkg/m.py", ["/work/proj"], "src/pkg/m.py"),
        ("/e/lib/site-packages/pkg/m.py", ["/e/lib"], "site-packages/pkg/m.py"),
        # Component-wise, not string prefix: /a/bc is not inside /a/b.
        ("/a/bc/m.py", ["/a/b"], "bc/m.py"),
        ("/a/bc/d/e/m.py", ["/a/b", "/a"], "bc/d/e/m.py"),
        # A file equal to the root, or with nothing after it, does not count.
        ("/a/b/m.py", ["/a/b/m.py"], "b/m.py"),
        ("/a/b/m.py", ["/a/b/m.py/"], "b/m.py"),
        # Relative roots never match; "/" shows the whole path.
        ("/a/b/c/m.py", ["a/b"], "c/m.py"),
        ("/a/b/c/m.py", ["/"], "a/b/c/m.py"),
        # Roots do not apply to relative names or inside archives.
        ("a/b/c/m.py", ["/a"], "a/b/c/m.py"),
        ("/a/app.zip/pkg/m.py", ["/a/app.zip/pkg"], "pkg/m.py"),
    ],
)
def test_roots(filename: str, roots: list[str], expected: str) -> None:
    assert short_path(filename, roots) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/home/u/.venv/lib/python3.11/site-packages/torch/nn/f.py", "torch/nn/f.py"),
        ("/opt/conda/envs/e/lib/python3.10/site-packages/np/core/x.py", "np/core/x.py"),
        ("/root/.pyenv/versions/3.12.1/lib/python3.12/site-packages/a.py", "a.py"),
        ("/a/site-packages/b/site-packages/pkg/m.py", "pkg/m.py"),
        # site-packages wins over an earlier or a later src.
        ("/proj/src/.venv/lib/python3.11/site-packages/pkg/m.py", "pkg/m.py"),
        ("/venv/lib/python3.11/site-packages/pkg/src/m.py", "pkg/src/m.py"),
        # Nothing after site-packages: fall through.
        ("/a/src/b/site-packages", "b/site-packages"),
        ("/a/b/site-packages", "b/site-packages"),
    ],
)
def test_site_packages(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/usr/lib/python3/dist-packages/apt/cache.py", "apt/cache.py"),
        ("/usr/local/lib/python3.10/dist-packages/torch/x.py", "torch/x.py"),
    ],
)
def test_dist_packages(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/builds/ci/src/pkg/sub/m.py", "pkg/sub/m.py"),
        ("/home/u/proj/src/m.py", "m.py"),
        ("/a/src/b/src/pkg/m.py", "pkg/m.py"),
        ("/a/SRC/pkg/m.py", "pkg/m.py"),
        # Nothing after src: fall through.
        ("/a/b/src", "b/src"),
    ],
)
def test_src(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/usr/lib/python3.11/json/decoder.py", "json/decoder.py"),
        ("/home/u/proj/train.py", "proj/train.py"),
        ("/m.py", "m.py"),
        ("C:\\m.py", "m.py"),
        ("/a/b/", "a/b"),
    ],
)
def test_last_two_components_fallback(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("m.py", "m.py"),
        ("a/b/c/m.py", "a/b/c/m.py"),
        ("./a//b/../m.py", "a/m.py"),
        ("a\\b\\m.py", "a/b/m.py"),
        ("pkg/src/m.py", "pkg/src/m.py"),
        ("lib/site-packages/pkg/m.py", "lib/site-packages/pkg/m.py"),
    ],
)
def test_relative_names_come_back_normalised(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


@pytest.mark.parametrize(
    "filename",
    ["", " ", "\t\n", "/", "//", "\\", "\\\\", "C:", "C:\\", ".", "..", "/./../", "/ /"],
)
def test_names_with_nothing_usable_give_unknown(filename: str) -> None:
    assert short_path(filename) == UNKNOWN


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("/home/ü/проект/模块.py", "проект/模块.py"),
        ("/a/b\x00c/m.py", "b\x00c/m.py"),
        ("/a/\udcff/m.py", "\udcff/m.py"),
        ("/a/ /m.py", " /m.py"),
    ],
)
def test_odd_characters_are_kept(filename: str, expected: str) -> None:
    assert short_path(filename) == expected


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------

_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_REST = _FIRST + "0123456789"

#: Package and module names: identifier-like, never a marker component.
identifiers = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(_FIRST),
    st.text(alphabet=_REST, max_size=10),
).filter(lambda s: s.lower() != "src" and not s.startswith("ipykernel_"))
modules = st.one_of(
    identifiers.map(lambda s: s + ".py"),
    st.sampled_from(["__init__.py", "__main__.py", "_C.py"]),
)
#: A package-relative module path, as components (what follows site-packages).
package_paths = st.builds(
    lambda pkgs, mod: [*pkgs, mod],
    st.lists(identifiers, max_size=4),
    modules,
)
versions = st.integers(min_value=8, max_value=14)
#: Any separator between two components; all must normalise to one "/".
separators = st.sampled_from(["/", "\\", "//", "\\\\", "/./", "\\.\\", "/x/../"])


def _render(draw: st.DrawFn, comps: list[str]) -> str:
    """Join components with randomly chosen, mixed separators."""
    out = comps[0] if comps else ""
    for comp in comps[1:]:
        out += draw(separators) + comp
    return out


@st.composite
def install_prefixes(draw: st.DrawFn) -> tuple[str, str]:
    """(kind, prefix): a directory holding package paths on some machine."""
    u, e, app, proj = (draw(identifiers) for _ in range(4))
    x, y = draw(versions), draw(st.integers(0, 20))
    py = f"python3.{x}"
    posix = {
        "site": [
            f"/home/{u}/.venv/lib/{py}/site-packages",
            f"/home/{u}/{proj}/.venv/lib/{py}/site-packages",
            f"/opt/conda/envs/{e}/lib/{py}/site-packages",
            f"/opt/conda/lib/{py}/site-packages",
            f"/root/.pyenv/versions/3.{x}.{y}/lib/{py}/site-packages",
            f"/home/{u}/.local/pipx/venvs/{app}/lib/{py}/site-packages",
            f"/home/{u}/.local/lib/{py}/site-packages",
            f"/home/{u}/src/{proj}/.venv/lib/{py}/site-packages",
            "/usr/lib/python3/dist-packages",
            f"/usr/local/lib/{py}/dist-packages",
        ],
        "src": [f"/builds/{u}/{proj}/src", f"/home/{u}/{proj}/src"],
        "archive": [
            f"/x/{app}.zip",
            f"/home/{u}/dist/{app}.pyz",
            f"/usr/lib/{py}/site-packages/{app}-1.0-py3.{x}.egg",
            f"/tmp/{app}-1.0-py3-none-any.whl",
        ],
    }
    drive = draw(st.sampled_from("CDEcz"))
    windows = {
        "site": [
            f"{drive}:\\Users\\{u}\\{proj}\\.venv\\Lib\\site-packages",
            f"{drive}:\\Users\\{u}\\miniconda3\\envs\\{e}\\Lib\\site-packages",
            f"{drive}:/Python3{x}/Lib/site-packages",
            f"\\\\{u}\\{e}\\envs\\{e}\\Lib\\site-packages",
            f"\\\\?\\{drive}:\\{proj}\\.venv\\Lib\\site-packages",
        ],
        "src": [f"{drive}:\\Users\\{u}\\{proj}\\src"],
        "archive": [f"{drive}:\\dist\\{app}.zip"],
    }
    kind = draw(st.sampled_from(["site", "src", "archive"]))
    return kind, draw(st.sampled_from(posix[kind] + windows[kind]))


@st.composite
def realistic_filenames(draw: st.DrawFn) -> str:
    """A co_filename as seen on some machine: install prefix, project, or odd."""
    choice = draw(st.integers(0, 4))
    rel = draw(package_paths)
    if choice == 0:
        _, prefix = draw(install_prefixes())
        return prefix + draw(separators) + _render(draw, rel)
    if choice == 1:
        noise = draw(st.lists(st.sampled_from(["src", "site-packages", "..", "."])))
        comps = draw(st.permutations(rel + noise))
        start = draw(st.sampled_from(["/", "C:\\", "c:/", "\\\\srv\\sh\\", "", "./"]))
        return start + _render(draw, comps)
    if choice == 2:
        return f"/tmp/ipykernel_{draw(versions)}/{draw(identifiers)}.py"
    if choice == 3:
        return "<" + draw(st.text()) + ">"
    alphabet = st.sampled_from(["/", "\\", ".", "..", ":", "C:", "<", ">", "src", "a"])
    return "".join(draw(st.lists(alphabet, max_size=12)))


#: Any str at all: NUL, surrogates, every category; plus path-like text.
any_text = st.one_of(
    st.text(st.characters(exclude_categories=())),
    st.text(alphabet="/\\.:<>Cc \x00é\udc80~"),
    realistic_filenames(),
)
any_roots = st.lists(st.one_of(any_text, st.sampled_from(["/", "/a", "C:\\a", "a"])), max_size=4)


def _is_pseudo(name: str) -> bool:
    return name.startswith("<") and name.endswith(">")


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------


@PROPERTY
@given(any_text, any_roots)
def test_short_path_never_raises_and_is_never_empty(name: str, roots: list[str]) -> None:
    result = short_path(name, roots)
    assert isinstance(result, str)
    assert result.strip()


@PROPERTY
@given(any_text, any_roots)
def test_result_uses_forward_slashes_only(name: str, roots: list[str]) -> None:
    """Outside pseudo names returned as given: no backslash, no empty component."""
    assume(not _is_pseudo(name))
    result = short_path(name, roots)
    assert "\\" not in result
    assert "" not in result.split("/")


@PROPERTY
@given(any_text, any_roots)
def test_short_path_is_a_suffix_of_the_normalised_components(name: str, roots: list[str]) -> None:
    """Unless it is a label (pseudo name, cell, unknown), the result's components
    are a non-empty tail of normalise_components(name)."""
    result = short_path(name, roots)
    assume(not _is_pseudo(name) and result != UNKNOWN)
    assume(not (result.startswith("<cell ") and result not in name))
    kept = result.split("/")
    comps = normalise_components(name)
    assert 0 < len(kept) <= len(comps)
    assert comps[-len(kept) :] == kept


@PROPERTY
@given(any_text, any_roots)
def test_short_path_is_idempotent(name: str, roots: list[str]) -> None:
    """short_path(short_path(f, roots), roots) == short_path(f, roots) for every
    str f and any roots: results are relative names (kept whole) or labels."""
    once = short_path(name, roots)
    assert short_path(once, roots) == once
    assert short_path(once) == once


@PROPERTY
@given(st.data(), package_paths)
def test_same_relative_path_under_any_two_install_prefixes_gives_the_same_result(
    data: st.DataObject, rel: list[str]
) -> None:
    """Any venv/conda/pyenv/pipx/Debian/Windows site dir, CI src dir or archive,
    with any separators, shows a package path as the package path."""
    results = set()
    for _ in range(2):
        _, prefix = data.draw(install_prefixes())
        name = prefix + data.draw(separators) + _render(data.draw, rel)
        results.add(short_path(name))
    assert results == {"/".join(rel)}


@PROPERTY
@given(st.data(), package_paths, st.sampled_from(["src", "Src", "SRC"]))
def test_site_packages_beats_src_inside_the_package_path(
    data: st.DataObject, rel: list[str], marker: str
) -> None:
    """A src directory inside a package is kept: the cut is after the install
    directory (site-packages/dist-packages) only."""
    prefix = data.draw(
        st.sampled_from(["/v/lib/python3.11/site-packages", "/usr/lib/python3/dist-packages"])
    )
    at = data.draw(st.integers(0, len(rel) - 1))
    rel = [*rel[:at], marker, *rel[at:]]
    assert short_path(prefix + "/" + "/".join(rel)) == "/".join(rel)


@PROPERTY
@given(
    st.lists(st.one_of(identifiers, st.sampled_from(["src", "site-packages"])), max_size=5),
    package_paths,
    st.data(),
)
def test_roots_pick_the_longest_containing_root(
    base: list[str], rel: list[str], data: st.DataObject
) -> None:
    """Among roots that are component-wise prefixes of the file (and not the
    file itself), the longest decides; siblings like /a/bc for /a/b never match."""
    comps = base + rel
    roots, best = [], None
    for _ in range(data.draw(st.integers(1, 4))):
        k = data.draw(st.integers(0, len(comps)))
        if data.draw(st.booleans()) and 0 < k < len(comps):
            # A sibling sharing a string prefix: neither /a/b nor /a/bcx holds /a/bc/...
            last = comps[k - 1]
            cut = data.draw(st.integers(1, len(last)))
            sibling = data.draw(st.sampled_from([last[:-cut], last + "x"]))
            root = [*comps[: k - 1], sibling or "-"]
        else:
            root = comps[:k]
            if k < len(comps) and (best is None or k > best):
                best = k
        trailing = data.draw(st.sampled_from(["", "/", "\\", "/."]))
        roots.append("/" + _render(data.draw, root) + trailing)
    name = "/" + "/".join(comps)
    if best is None:
        assert short_path(name, roots) == short_path(name)
    else:
        assert short_path(name, roots) == "/".join(comps[best:])


@PROPERTY
@given(
    st.lists(st.one_of(identifiers, st.sampled_from(["src", "site-packages"])), max_size=6),
    modules,
    st.data(),
)
def test_windows_and_posix_spellings_give_the_same_result(
    dirs: list[str], mod: str, data: st.DataObject
) -> None:
    comps = [*dirs, mod]
    posix = "/" + "/".join(comps)
    start = data.draw(st.sampled_from(["C:\\", "c:/", "\\\\srv\\share\\", "\\\\?\\D:\\", "//"]))
    assert short_path(start + _render(data.draw, comps)) == short_path(posix)


_no_separator = st.characters(exclude_characters="/\\", exclude_categories=())


@PROPERTY
@given(
    st.one_of(st.text(_no_separator), st.sampled_from(["", "C:", "c:", "..", "a:b", "<x"])),
    st.sampled_from(["/", "\\"]),
    st.one_of(any_text, realistic_filenames()),
    st.lists(st.sampled_from(["/.", "/x/..", "\\.\\", "//"]), min_size=1),
)
def test_dot_components_and_repeated_separators_change_nothing(
    head: str, sep: str, tail: str, noise: list[str]
) -> None:
    """Inserting '.', 'x/..' or doubled separators after the first separator of a
    name (so that its anchor is unchanged) leaves the result alone."""
    name = head + sep + tail
    assume(not _is_pseudo(name) and not name.startswith("\\"))
    noisy = head + sep + "".join(noise) + "/" + tail
    assume(not noisy.startswith("\\\\"))
    assert normalise_components(noisy) == normalise_components(name)
    assert short_path(noisy) == short_path(name)


@PROPERTY
@given(package_paths, st.sampled_from(["app.zip", "x.EGG", "t.pyz", "p-1-py3-none-any.whl"]))
def test_archives_show_the_whole_path_inside(rel: list[str], archive: str) -> None:
    assert short_path(f"/opt/{archive}/" + "/".join(rel)) == "/".join(rel)


@PROPERTY
@given(st.text(st.characters(exclude_categories=())), any_roots)
def test_pseudo_names_are_returned_unchanged(inner: str, roots: list[str]) -> None:
    name = "<" + inner + ">"
    assert short_path(name, roots) == name


@PROPERTY
@given(
    st.sampled_from(["/tmp", "/var/folders/ab/T", "C:\\Users\\u\\AppData\\Local\\Temp"]),
    st.integers(0, 2**22),
    st.text(alphabet=_REST, min_size=1, max_size=12),
)
def test_cell_files_become_cell_labels(tmp: str, pid: int, cell: str) -> None:
    assert short_path(f"{tmp}/ipykernel_{pid}/{cell}.py") == f"<cell {cell}>"


@PROPERTY
@given(st.lists(st.one_of(identifiers, st.just("src"), st.just("site-packages")), min_size=1))
def test_relative_names_are_kept_whole(comps: list[str]) -> None:
    assume(not (len(comps) >= 2 and comps[-2].startswith("ipykernel_")))
    assert short_path("/".join(comps)) == "/".join(comps)
