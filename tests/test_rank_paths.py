"""kname.rank_paths: each rank's own output path, from placeholders (`{rank}`, `{host}`, `{pid}`)
and the automatic `.rank<N>`; the directory part never changes, and a bad template is one line.
"""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kname.rank_paths import (
    ACCEPTED,
    PLACEHOLDERS,
    PathTemplateError,
    expand,
    implied_folder,
    tagged,
    template_problem,
)
from kname.ranks import LONE, Rank

RANK3 = Rank(rank=3, local_rank=1, world_size=8, launcher="torchrun")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("prof.json", "prof.rank3.json"),
        ("out/prof", "out/prof.rank3"),
        ("a.b/prof.tar.gz", "a.b/prof.rank3.tar.gz"),  # every suffix kept after the rank
        ("/abs/dir.d/census.v2.json", "/abs/dir.d/census.rank3.v2.json"),
        (".kname.json", ".kname.rank3.json"),  # a leading dot is not a suffix
        ("..hidden", "..hidden.rank3"),
        ("out/", "out/.rank3"),  # a directory's path: a file in it, the directory kept
        ("prof.{rank}.json", "prof.3.json"),
        ("r{rank}/prof.json", "r3/prof.json"),
        ("{host}-{pid}.json", "node1-77.rank3.json"),  # {host} and {pid} may repeat across ranks
        ("out/{host}/prof.json", "out/node1/prof.rank3.json"),
        ("{{rank}}.json", "{rank}.rank3.json"),  # a literal brace is no placeholder
        ("{{{rank}}}.json", "{3}.json"),
    ],
)
def test_each_rank_gets_its_own_path(path: str, expected: str) -> None:
    assert expand(path, RANK3, host="node1", pid=77) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [("prof.json", "prof.json"), ("p.{rank}.{host}.{pid}", "p.0.node1.77"), ("{{x}}", "{x}")],
)
def test_a_lone_process_keeps_its_path_but_for_its_placeholders(path: str, expected: str) -> None:
    assert expand(path, LONE, host="node1", pid=77) == expected


def test_host_and_pid_default_to_this_machine_and_this_process() -> None:
    expected = f"{socket.gethostname().replace(os.sep, '_')}.{os.getpid()}.json"
    assert expand("{host}.{pid}.json", LONE) == expected


def test_a_host_name_cannot_add_a_directory() -> None:
    assert expand("out/{host}.json", LONE, host="a/b") == "out/a_b.json"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("..", "out/__/p.json"),
        (".", "out/_/p.json"),
        ("", "out/_/p.json"),
        ("../..", "out/.._../p.json"),
    ],
)
def test_a_host_name_cannot_leave_the_folder(host: str, expected: str) -> None:
    expanded = expand("out/{host}/p.json", LONE, host=host)
    assert expanded == expected
    assert os.path.normpath(expanded).startswith("out" + os.sep)


@pytest.mark.parametrize(
    ("path", "what"),
    [
        ("prof.{rnak}.json", "an unknown placeholder '{rnak}'"),
        ("prof.{}.json", "an unknown placeholder '{}'"),
        ("prof.{rank:03}.json", "an unknown placeholder '{rank:03}'"),
        ("prof.{RANK}.json", "an unknown placeholder '{RANK}'"),
        ("prof{.json", "a lone '{'"),
        ("prof}.json", "a lone '}'"),
        ("{rank}}", "a lone '}'"),
    ],
)
def test_an_unknown_placeholder_is_one_line_naming_the_variable_and_the_accepted_ones(
    path: str, what: str
) -> None:
    problem = template_problem("KNAME_REPORT", path)
    assert problem == f"KNAME_REPORT={path!r} has {what}; accepted: {ACCEPTED}"
    assert "{rank} {host} {pid}" in problem and "{{ and }}" in problem
    with pytest.raises(PathTemplateError) as raised:
        expand(path, RANK3, variable="KNAME_REPORT")
    assert str(raised.value) == problem
    assert isinstance(raised.value, ValueError)


def test_a_placeholder_with_a_newline_is_still_one_line() -> None:
    problem = template_problem("--json", "p.{a\nb}.json")
    assert problem is not None and len(problem.splitlines()) == 1
    assert problem.startswith("--json=")


# Paths from the domain: directories with dots, names with several suffixes, placeholders,
# literal braces, and any text at all.
NAME_PARTS = ["prof", "a", "out", "census", ".", "..", "json", "tar", "gz", "-", "_", "7", "rank3"]
PLACEHOLDER_PARTS = [f"{{{name}}}" for name in PLACEHOLDERS] + ["{{", "}}"]
domain_paths = st.lists(st.sampled_from([*NAME_PARTS, "/"]), max_size=12).map("".join)
plain_paths = domain_paths | st.text(st.characters(blacklist_characters="{}"), max_size=20)
template_parts = st.sampled_from([*NAME_PARTS, "/", *PLACEHOLDER_PARTS])
templates = st.lists(template_parts, max_size=12).map("".join)
hosts = st.from_regex(r"[a-z][a-z0-9-]{0,8}(\.[a-z0-9-]{1,6}){0,2}", fullmatch=True)
pids = st.integers(1, 4_194_304)
world_ranks = st.integers(2, 4096).flatmap(
    lambda size: st.tuples(st.just(size), st.integers(0, size - 1), st.integers(0, size - 1))
)


@settings(max_examples=500, deadline=None)
@given(templates, world_ranks, hosts, pids)
def test_two_ranks_on_one_host_never_get_the_same_path(path, world, host, pid) -> None:
    size, a, b = world
    first = expand(path, Rank(rank=a, world_size=size, launcher="slurm"), host=host, pid=pid)
    second = expand(path, Rank(rank=b, world_size=size, launcher="slurm"), host=host, pid=pid)
    assert (first == second) is (a == b)


@settings(max_examples=500, deadline=None)
@given(plain_paths, world_ranks, hosts, hosts, pids, pids)
def test_two_ranks_never_get_the_same_path_without_placeholders_wherever_they_run(
    path, world, host_a, host_b, pid_a, pid_b
) -> None:
    size, a, b = world
    first = expand(path, Rank(rank=a, world_size=size, launcher="pmi"), host=host_a, pid=pid_a)
    second = expand(path, Rank(rank=b, world_size=size, launcher="pmi"), host=host_b, pid=pid_b)
    assert (first == second) is (a == b)


@settings(max_examples=500, deadline=None)
@given(plain_paths, hosts, pids)
def test_a_path_without_placeholders_in_a_world_of_one_is_unchanged(path, host, pid) -> None:
    assert expand(path, LONE, host=host, pid=pid) == path
    assert expand(path, Rank(launcher="torchrun"), host=host, pid=pid) == path


@settings(max_examples=500, deadline=None)
@given(plain_paths, world_ranks)
def test_expansion_never_changes_the_directory_of_a_path_without_placeholders(path, world) -> None:
    size, rank, _ = world
    expanded = expand(path, Rank(rank=rank, world_size=size, launcher="slurm"))
    assert os.path.dirname(expanded) == os.path.dirname(path)
    # The file name only gains .rank<N>, somewhere in it.
    name, tag = os.path.basename(path), f".rank{rank}"
    inserted = {name[:i] + tag + name[i:] for i in range(len(name) + 1)}
    assert os.path.basename(expanded) in inserted


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=20) | templates, world_ranks)
def test_expand_raises_exactly_when_template_problem_says_why(path, world) -> None:
    size, rank, _ = world
    problem = template_problem("KNAME_REPORT", path)
    try:
        expand(path, Rank(rank=rank, world_size=size, launcher="slurm"), variable="KNAME_REPORT")
    except PathTemplateError as raised:
        assert str(raised) == problem
    else:
        assert problem is None
    if problem is not None:
        assert problem.startswith("KNAME_REPORT=") and len(problem.splitlines()) == 1


# --- tagged(): the one rule for a path named beside another (a rank's, a process's) -------------

# Odd names from the domain: several dots, no suffix, dotfiles, kname's own tags, folders with
# dots, trailing slashes.
name_parts = st.sampled_from(
    ["prof", "p", "census", "tar", "gz", "json", "v2", "rank3", "pid7", "7"]
)
file_names = st.tuples(
    st.sampled_from(["", ".", ".."]), st.lists(name_parts, max_size=4).map(".".join)
).map("".join)
folders = st.lists(st.sampled_from(["out", "a.b", ".", "..", "{host}", ""]), max_size=3).map(
    lambda parts: "".join(part + "/" for part in parts)
)
tagged_paths = st.tuples(st.sampled_from(["", "/"]), folders, file_names).map("".join)
tags = st.builds(lambda kind, number: f"{kind}{number}", st.sampled_from(["rank", "pid"]), pids)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("p.tar.gz", "p.pid42.tar.gz"),  # every suffix kept, as for a rank
        ("out/prof", "out/prof.pid42"),  # no suffix is added
        ("prof.rank3.json", "prof.rank3.pid42.json"),  # after the rank: profile.rank*.json finds it
        (".kname.json", ".kname.pid42.json"),
        ("out/", "out/.pid42"),
    ],
)
def test_a_tag_goes_after_the_stem_and_the_tags_before_it(path: str, expected: str) -> None:
    assert tagged(path, "pid42") == expected


def _places(path: str, tag: str) -> set[int]:
    """Where in `path` a `.tag` inserted gives tagged(path, tag)."""
    result = tagged(path, tag)
    return {at for at in range(len(path) + 1) if path[:at] + f".{tag}" + path[at:] == result}


@settings(max_examples=500, deadline=None)
@given(tagged_paths, tags)
def test_a_tagged_path_stays_in_its_folder_and_only_gains_its_tag(path, tag) -> None:
    assert os.path.dirname(tagged(path, tag)) == os.path.dirname(path)
    assert _places(path, tag)  # taking the tag out gives the path back


@settings(max_examples=500, deadline=None)
@given(tagged_paths, tags, tags)
def test_every_tag_goes_to_one_place_so_each_tag_gives_its_own_path(path, one, other) -> None:
    assert (tagged(path, one) == tagged(path, other)) is (one == other)
    assert tagged(path, one) != path
    # One place for every tag: the same stem before it, the same suffixes after it.
    assert _places(path, one) & _places(path, other)


@settings(max_examples=500, deadline=None)
@given(
    folders,
    st.sampled_from(["profile", "census", ".kname", "p"]),
    st.sampled_from(["", ".json", ".tar.gz", ".v2.json"]),
    st.integers(0, 4095),
    pids,
)
def test_a_ranks_files_and_its_helpers_files_match_the_ranks_glob(
    folder, stem, suffixes, rank, pid
):
    import fnmatch

    rank_path = tagged(f"{folder}{stem}{suffixes}", f"rank{rank}")
    helper_path = tagged(rank_path, f"pid{pid}")
    pattern = f"{folder}{stem}.rank*{suffixes}"  # `kname report profile.rank*.json`
    assert fnmatch.fnmatchcase(rank_path, pattern) and fnmatch.fnmatchcase(helper_path, pattern)
    assert helper_path == f"{folder}{stem}.rank{rank}.pid{pid}{suffixes}"


@settings(max_examples=500, deadline=None)
@given(templates, world_ranks, hosts, pids)
def test_the_folder_a_placeholder_names_holds_the_file_and_comes_from_the_placeholder(
    path, world, host, pid
) -> None:
    size, rank, _ = world
    expanded = expand(path, Rank(rank=rank, world_size=size, launcher="slurm"), host=host, pid=pid)
    folder = implied_folder(path, expanded)
    folders = path.split("/")[:-1]
    if not any(
        f"{{{name}}}" in part.replace("{{", "") for part in folders for name in PLACEHOLDERS
    ):
        assert folder is None
    else:
        assert folder is not None and (expanded + "/").startswith(folder + "/")
        assert folder.count("/") < expanded.count("/")  # a folder, never the file itself
