"""Tests for kname.config: every KNAME_* variable, its default, its accepted and its bad values."""

from __future__ import annotations

import io
import itertools
import re
import tokenize
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kname.config import (
    DEFAULT_DOMAIN,
    DEFAULT_FORMAT,
    DEFAULT_TRACE_MAX,
    FORMAT_FIELDS,
    KNOWN_VARIABLES,
    MAX_DEPTH,
    MAX_RANK,
    MODES,
    PROFILE_OUTPUTS,
    PROFILE_SETTINGS,
    Config,
    ConfigError,
    backward_lines_wanted,
    driver_hook_wanted,
    format_ranks,
    merge_rank_spans,
    read_config,
    sources_kept,
    torch_tracker_wanted,
    unknown_variables,
)

BUILTINS = ("numba",)
VARIABLES = (
    "KNAME_TARGETS",
    "KNAME_SKIP",
    "KNAME_USER",
    "KNAME_FORMAT",
    "KNAME_DEPTH",
    "KNAME_MODE",
    "KNAME_REPORT",
    "KNAME_DOMAIN",
    "KNAME_STRICT",
    "KNAME_NATIVE",
    "KNAME_RANKS",
    "KNAME_SOURCES",
    "KNAME_DRIVER_HOOK",
    "KNAME_PROFILE_TRIGGER",
)
DEFAULTS = Config()


def config(**variables: str) -> Config:
    """read_config of exactly `variables` (KNAME_ prefix added), with numba as a built-in."""
    return read_config({f"KNAME_{k.upper()}": v for k, v in variables.items()}, BUILTINS)


def the_problem(cfg: Config) -> str:
    assert len(cfg.problems) == 1, cfg.problems
    return cfg.problems[0]


# --------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------


def test_an_empty_environment_gives_every_default_and_no_problem() -> None:
    cfg = read_config({}, BUILTINS)
    assert cfg.targets is None  # every built-in target
    assert cfg.skip == ()
    assert cfg.format == DEFAULT_FORMAT == "{function} {path}:{line}"
    assert cfg.depth == 1
    assert cfg.mode == "nvtx"
    assert cfg.report is None
    assert cfg.domain == DEFAULT_DOMAIN == "kname"
    assert cfg.strict is False
    assert cfg.native is True  # the C hot path, where it is built
    assert cfg.sources is True  # saved documents keep the source around their lines
    assert cfg.ranks is None  # every rank profiles
    assert cfg.flush is None  # a profile is written at exit only
    assert cfg.problems == ()


@pytest.mark.parametrize("variable", VARIABLES)
@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_a_blank_variable_means_its_default(variable: str, blank: str) -> None:
    cfg = read_config({variable: blank}, BUILTINS)
    assert cfg == DEFAULTS
    assert cfg.problems == ()


def test_read_config_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KNAME_DEPTH", "3")
    monkeypatch.setenv("KNAME_MODE", "census")
    cfg = read_config()
    assert (cfg.depth, cfg.mode) == (3, "census")


# --------------------------------------------------------------------------
# Accepted values
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("numba", ("numba",)),
        ("fakegpu:launch", ("fakegpu:launch",)),
        ("numba, my.pkg.gpu:Launcher.__call__ ,fakegpu:launch", (
            "numba", "my.pkg.gpu:Launcher.__call__", "fakegpu:launch"
        )),
        (",,numba,,", ("numba",)),
    ],
)  # fmt: skip
def test_kname_targets_accepts_built_in_names_and_module_qualname_entries(value, expected):
    cfg = config(targets=value)
    assert cfg.targets == expected
    assert cfg.problems == ()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("mylib", ("mylib",)), (" a.b , c_d.e2 ", ("a.b", "c_d.e2")), ("x,,y", ("x", "y"))],
)
def test_kname_skip_accepts_dotted_module_prefixes(value: str, expected: tuple) -> None:
    cfg = config(skip=value)
    assert cfg.skip == expected
    assert cfg.problems == ()


@pytest.mark.parametrize(
    "template",
    [
        "{kernel}",
        "{kernel} @ {path}:{line}",
        "{function} {module} {file} {lib}",
        "{line:>5} {kernel}",
        "{kernel!r}:{line:04d}",
        "L{line}",
        "{{literal}} {kernel}",
    ],
)
def test_kname_format_accepts_templates_of_known_fields(template: str) -> None:
    cfg = config(format=template)
    assert cfg.format == template
    assert cfg.problems == ()


@pytest.mark.parametrize("depth", [1, 2, 7, MAX_DEPTH])
def test_kname_depth_accepts_whole_numbers_from_1_to_max(depth: int) -> None:
    assert config(depth=f" {depth} ").depth == depth
    assert config(depth=str(depth)).problems == ()


@pytest.mark.parametrize("mode", [*MODES, "CENSUS", " Nvtx "])
def test_kname_mode_accepts_each_mode_in_any_case(mode: str) -> None:
    cfg = config(mode=mode)
    assert cfg.mode == mode.strip().lower()
    assert cfg.problems == ()


@pytest.mark.parametrize(
    ("value", "expected"), [("-", "-"), (" /tmp/census.json ", "/tmp/census.json")]
)
def test_kname_report_takes_dash_or_a_path(value: str, expected: str) -> None:
    assert config(report=value).report == expected


def test_kname_domain_names_the_nvtx_domain() -> None:
    assert config(domain=" mine ").domain == "mine"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("TRUE", True), ("yes", True), ("On", True), ("0", False), ("off", False)],
)
def test_kname_strict_accepts_switch_values(value: str, expected: bool) -> None:
    cfg = config(strict=value)
    assert cfg.strict is expected
    assert cfg.problems == ()


# --------------------------------------------------------------------------
# Bad values: one problem naming the variable and what is accepted; the default is used
# --------------------------------------------------------------------------

ACCEPTED_FIELDS = " ".join("{" + name + "}" for name in FORMAT_FIELDS)
RANKS_ACCEPTED = ["a rank (3)", "a range of ranks (0-7)", f"from 0 to {MAX_RANK}"]


@pytest.mark.parametrize(
    ("variable", "value", "accepted", "attribute"),
    [
        ("KNAME_TARGETS", "not a target", ["numba", "module:qualname"], "targets"),
        ("KNAME_TARGETS", "fakegpu:", ["numba", "module:qualname"], "targets"),
        ("KNAME_TARGETS", "fakegpu:launch:x", ["numba", "module:qualname"], "targets"),
        ("KNAME_TARGETS", "1gpu:launch", ["numba", "module:qualname"], "targets"),
        ("KNAME_SKIP", "my-lib", ["dotted module name"], "skip"),
        ("KNAME_SKIP", "a..b", ["dotted module name"], "skip"),
        ("KNAME_USER", "torch/_inductor", ["dotted module name", "'torch._inductor'"], "user"),
        ("KNAME_USER", "-torch", ["dotted module name"], "user"),
        ("KNAME_FORMAT", "{colour}", [ACCEPTED_FIELDS], "format"),
        ("KNAME_DEPTH", "0", ["1 to 16"], "depth"),
        ("KNAME_DEPTH", "17", ["1 to 16"], "depth"),
        ("KNAME_DEPTH", "-1", ["1 to 16"], "depth"),
        ("KNAME_DEPTH", "two", ["1 to 16"], "depth"),
        ("KNAME_DEPTH", "1.5", ["1 to 16"], "depth"),
        ("KNAME_DEPTH", "٣", ["1 to 16"], "depth"),  # a non-ASCII digit
        ("KNAME_DEPTH", "1" * 5000, ["1 to 16"], "depth"),  # past int()'s digit limit
        ("KNAME_MODE", "loud", ["nvtx", "rename", "census"], "mode"),
        ("KNAME_STRICT", "maybe", ["1/true/yes/on", "0/false/no/off"], "strict"),
        ("KNAME_NATIVE", "maybe", ["1/true/yes/on", "0/false/no/off", "default"], "native"),
        ("KNAME_SOURCES", "none", ["1/true/yes/on", "0/false/no/off", "default"], "sources"),
        ("KNAME_DRIVER_HOOK", "2", ["1/true/yes/on", "0/false/no/off", "default"], "driver_hook"),
        ("KNAME_RANKS", "x", RANKS_ACCEPTED, "ranks"),
        ("KNAME_RANKS", "5-2", RANKS_ACCEPTED, "ranks"),
        ("KNAME_RANKS", "-1", RANKS_ACCEPTED, "ranks"),
        ("KNAME_RANKS", "1.5", RANKS_ACCEPTED, "ranks"),
        ("KNAME_RANKS", "0-", RANKS_ACCEPTED, "ranks"),
        ("KNAME_RANKS", "0-3-5", RANKS_ACCEPTED, "ranks"),
        ("KNAME_RANKS", "٣", RANKS_ACCEPTED, "ranks"),  # a non-ASCII digit
        ("KNAME_RANKS", "0-1000000000", RANKS_ACCEPTED, "ranks"),  # past MAX_RANK
        ("KNAME_RANKS", "1" * 5000, RANKS_ACCEPTED, "ranks"),  # past int()'s digit limit
    ],
)
def test_a_bad_value_gives_one_problem_naming_it_and_the_default_is_used(
    variable: str, value: str, accepted: list[str], attribute: str
) -> None:
    cfg = read_config({variable: value}, BUILTINS)
    problem = the_problem(cfg)
    assert problem.startswith(variable)
    assert repr(value)[:40] in problem
    for text in accepted:
        assert text in problem
    assert len(problem.splitlines()) == 1
    assert getattr(cfg, attribute) == getattr(DEFAULTS, attribute)


@pytest.mark.parametrize(("value", "kept"), [("0", False), ("off", False), ("1", True), ("", True)])
def test_kname_sources_switches_source_keeping(value: str, kept: bool) -> None:
    assert config(sources=value).sources is kept
    assert sources_kept({"KNAME_SOURCES": value}) is kept


@pytest.mark.parametrize(("value", "on"), [("0", False), ("off", False), ("1", True), ("", True)])
def test_kname_driver_hook_switches_the_hook(value: str, on: bool) -> None:
    assert config(driver_hook=value).driver_hook is on
    assert driver_hook_wanted({"KNAME_DRIVER_HOOK": value}) is on


def test_a_bad_targets_entry_is_dropped_and_the_good_ones_kept() -> None:
    cfg = config(targets="numba, bad entry ,fakegpu:launch,also:bad:one")
    assert cfg.targets == ("numba", "fakegpu:launch")
    assert len(cfg.problems) == 2
    assert all(p.startswith("KNAME_TARGETS entry") for p in cfg.problems)
    assert "'bad entry'" in cfg.problems[0] and "'also:bad:one'" in cfg.problems[1]


def test_a_built_in_name_that_is_not_built_in_is_reported() -> None:
    cfg = read_config({"KNAME_TARGETS": "cupy,numba"}, builtin_targets=("numba",))
    assert cfg.targets == ("numba",)
    assert "'cupy'" in the_problem(cfg)


def test_a_bad_skip_entry_is_dropped_and_the_good_ones_kept() -> None:
    cfg = config(skip="good.mod, bad/path, other")
    assert cfg.skip == ("good.mod", "other")
    assert "'bad/path'" in the_problem(cfg)


def test_kname_user_is_a_comma_list_of_module_prefixes_and_a_bad_entry_is_dropped() -> None:
    cfg = config(user=" torch._inductor ,torch fx, triton")
    assert cfg.user == ("torch._inductor", "triton")
    assert the_problem(cfg).startswith("KNAME_USER entry 'torch fx'")
    assert config(user="").user == ()


def test_a_targets_path_without_its_colon_suggests_module_colon_qualname() -> None:
    problem = the_problem(config(targets="mypkg.launch.launch_1d"))
    assert problem.startswith("KNAME_TARGETS entry 'mypkg.launch.launch_1d'")
    assert "module:qualname" in problem and "did you mean 'mypkg.launch:launch_1d'?" in problem
    assert len(problem.splitlines()) == 1


@pytest.mark.parametrize("value", ["not a target", "cupy", "a:b:c", "a.b:c.d:e", "x.1y"])
def test_a_targets_entry_that_is_no_dotted_path_gets_no_suggestion(value: str) -> None:
    assert "did you mean" not in the_problem(config(targets=value))


IDENTIFIERS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
DOTTED_PATHS = st.lists(IDENTIFIERS, min_size=2, max_size=5).map(".".join)


@settings(max_examples=200, deadline=None)
@given(DOTTED_PATHS)
def test_a_dotted_path_without_a_colon_is_suggested_as_a_target_kname_accepts(path: str) -> None:
    suggestion = re.search(r"did you mean '([^']*)'\?", the_problem(config(targets=path)))
    assert suggestion, path
    assert suggestion.group(1).replace(":", ".") == path
    assert config(targets=suggestion.group(1)).targets == (suggestion.group(1),)


@pytest.mark.parametrize(
    ("variable", "value", "module"),
    [
        ("KNAME_SKIP", "demo_launchers.py", "demo_launchers"),
        ("KNAME_SKIP", "mypkg.launchers.py", "mypkg.launchers"),
        ("KNAME_USER", "my_kernels.py", "my_kernels"),
    ],
)
def test_a_file_name_for_a_module_is_refused_and_the_module_suggested(
    variable: str, value: str, module: str
) -> None:
    cfg = read_config({variable: value}, BUILTINS)
    problem = the_problem(cfg)
    assert problem.startswith(f"{variable} entry {value!r}")
    assert "dotted module name" in problem and f"did you mean {module!r}" in problem
    assert len(problem.splitlines()) == 1
    assert read_config({variable: module}, BUILTINS).problems == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(IDENTIFIERS, min_size=1, max_size=4).map(".".join))
def test_any_module_written_as_a_file_name_suggests_that_module(module: str) -> None:
    assert f"did you mean {module!r}" in the_problem(config(skip=module + ".py"))


def test_several_bad_variables_give_one_problem_each() -> None:
    cfg = config(depth="x", mode="y", format="{z}", strict="w")
    assert sorted(p.split("=")[0] for p in cfg.problems) == [
        "KNAME_DEPTH", "KNAME_FORMAT", "KNAME_MODE", "KNAME_STRICT"
    ]  # fmt: skip


# --------------------------------------------------------------------------
# KNAME_STRICT
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KNAME_DEPTH", "0"),
        ("KNAME_MODE", "loud"),
        ("KNAME_FORMAT", "{"),
        ("KNAME_TARGETS", "x y"),
        ("KNAME_SKIP", "a/b"),
        ("KNAME_USER", "a/b"),
        ("KNAME_RANKS", "0-x"),
    ],
)
def test_kname_strict_turns_a_bad_value_into_config_error(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        read_config({variable: value, "KNAME_STRICT": "1"}, BUILTINS)
    lenient = read_config({variable: value, "KNAME_STRICT": "0"}, BUILTINS)
    assert len(lenient.problems) == 1


def test_kname_strict_with_good_values_does_not_raise() -> None:
    cfg = config(strict="1", depth="2", mode="census", targets="numba")
    assert cfg.strict and cfg.problems == ()


def test_a_bad_kname_strict_value_means_off_so_it_does_not_raise() -> None:
    cfg = config(strict="perhaps", depth="0")
    assert cfg.strict is False
    assert len(cfg.problems) == 2


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# --------------------------------------------------------------------------
# KNAME_FORMAT templates
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{colour}", "unknown field {colour}"),
        ("{kernel} {0}", "unknown field {0}"),
        ("{kernel} {}", "unknown field {}"),
        ("{kernel.name}", "unknown field {kernel.name}"),
        ("{kernel[0]}", "unknown field {kernel[0]}"),
        ("{kernel", "not a valid template"),
        ("kernel}", "not a valid template"),
        ("{kernel}}", "not a valid template"),
        ("{{kernel}", "not a valid template"),
        ("{kernel:d}", "cannot be rendered"),
        ("{kernel!z}", "cannot be rendered"),
        ("{line:{kernel}}", "nests a field"),
        ("{kernel:9999999999999}", "over 999"),
        ("{kernel:.0}", "renders an empty name"),
        ("{kernel:.0}   {function:.0}", "renders an empty name"),
    ],
)
def test_a_bad_template_is_reported_with_the_accepted_fields(template: str, why: str) -> None:
    cfg = config(format=template)
    problem = the_problem(cfg)
    assert problem.startswith(f"KNAME_FORMAT={template!r}")
    assert why in problem
    assert f"accepted fields: {ACCEPTED_FIELDS}" in problem
    assert cfg.format == DEFAULT_FORMAT


def test_a_template_with_a_newline_in_a_field_gives_a_problem_on_one_line() -> None:
    problem = the_problem(config(format="{a\nb} {kernel:\n\n}"))
    assert len(problem.splitlines()) == 1


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

# Text from the domain (braces, colons, commas, dots, digits, field names) and any text at all.
TEMPLATE_ALPHABET = "{}:!.,<>^=0123456789 _-/\n" + "".join(FORMAT_FIELDS)
values = st.one_of(
    st.text(),
    st.text(alphabet=TEMPLATE_ALPHABET, max_size=30),
    st.lists(st.sampled_from([*FORMAT_FIELDS, "numba", "x:y", "{", "}", ":", ",", "."])).map(
        "".join
    ),
    st.integers(-(10**30), 10**30).map(str),
    st.text(alphabet="0123456789", min_size=1, max_size=20),
    st.integers(4000, 6000).map(lambda n: "1" * n),  # around int()'s 4300-digit limit
)
environments = st.dictionaries(
    st.sampled_from([v for v in VARIABLES if v != "KNAME_STRICT"]), values, max_size=8
)


@settings(max_examples=300, deadline=None)
@given(environments)
def test_read_config_never_raises_and_every_problem_line_names_its_variable(env) -> None:
    cfg = read_config(env, BUILTINS)
    assert cfg.depth in range(1, MAX_DEPTH + 1)
    assert cfg.mode in MODES
    for problem in cfg.problems:
        assert len(problem.splitlines()) == 1, problem
        named = [v for v in env if problem.startswith(v)]
        assert named, problem
        # Each problem is about a variable that was set (and not blank).
        assert env[named[0]].strip()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([v for v in VARIABLES if v != "KNAME_STRICT"]), values)
def test_one_variable_gives_problems_naming_only_that_variable(variable: str, value: str) -> None:
    cfg = read_config({variable: value}, BUILTINS)
    assert all(p.startswith(variable) for p in cfg.problems), cfg.problems
    if variable not in ("KNAME_TARGETS", "KNAME_SKIP", "KNAME_USER", "KNAME_RANKS"):  # per entry
        assert len(cfg.problems) <= 1
    if cfg.problems:
        with pytest.raises(ConfigError, match=variable):
            read_config({variable: value, "KNAME_STRICT": "yes"}, BUILTINS)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=TEMPLATE_ALPHABET, max_size=30))
def test_an_accepted_template_renders_any_real_site(template: str) -> None:
    cfg = config(format=template)
    real = {"kernel": "axpy", "function": "step", "path": "my/solver.py", "module": "my.solver",
            "file": "solver.py", "line": 4242, "lib": "numba"}  # fmt: skip
    assert cfg.format.format(**real).strip()


# --------------------------------------------------------------------------
# Unknown KNAME_* variables (issue 16 item 22)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("KNAME_MDOE", "KNAME_MODE"), ("KNAME_TARGET", "KNAME_TARGETS"), ("KNAME_FMT", "KNAME_FORMAT"),
     ("KNAME_REPROT", "KNAME_REPORT"), ("KNAME_STRICTT", "KNAME_STRICT")],
)  # fmt: skip
def test_a_misspelled_variable_is_one_problem_naming_the_nearest_one(typo: str, meant: str):
    cfg = read_config({typo: "census"}, BUILTINS)
    assert cfg == DEFAULTS
    problem = f"{typo} is not a kname variable (did you mean {meant}?); ignoring it"
    assert the_problem(cfg) == problem
    with pytest.raises(ConfigError, match=typo):
        read_config({typo: "census", "KNAME_STRICT": "1"}, BUILTINS)


def test_unknown_variables_lists_every_kname_name_that_is_not_one_with_its_nearest() -> None:
    env = {"KNAME": "1", "KNAME_MODE": "census", "KNAME_MDOE": "x", "KNAME_NVTX_LOG": "l",
           "_KNAME_REPORT_PID": "1", "MY_KNAME_THING": "1", "KNAME_ON": "1"}  # fmt: skip
    assert unknown_variables(env) == [
        ("KNAME_MDOE", "KNAME_MODE"),
        ("KNAME_NVTX_LOG", "KNAME_NATIVE"),  # alike enough for doctor's hint, not a problem
        ("KNAME_ON", "KNAME_DOMAIN"),
    ]
    # Only a near miss is a problem at start-up: another tool's KNAME_* variable is not kname's.
    assert read_config(env, BUILTINS).problems == (
        "KNAME_MDOE is not a kname variable (did you mean KNAME_MODE?); ignoring it",
    )


def test_every_variable_read_config_reads_is_known() -> None:
    profile = {*PROFILE_OUTPUTS, *PROFILE_SETTINGS}
    assert set(VARIABLES) | {"KNAME"} | profile == set(KNOWN_VARIABLES)
    assert unknown_variables(dict.fromkeys(KNOWN_VARIABLES, "")) == []


# --------------------------------------------------------------------------
# KNAME_RANKS (issue 30): which ranks profile
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0,3", ((0, 0), (3, 3))),
        ("0-7", ((0, 7),)),
        ("0,2-5", ((0, 0), (2, 5))),
        (" 5 , 1 - 2 ", ((1, 2), (5, 5))),
        ("3,1-4", ((1, 4),)),  # overlapping spans are joined
        ("0,1,2,4", ((0, 2), (4, 4))),  # adjacent ranks too
        ("7,7", ((7, 7),)),
        (",,2,,", ((2, 2),)),
        (f"0-{MAX_RANK}", ((0, MAX_RANK),)),
    ],
)
def test_kname_ranks_accepts_ranks_and_ranges_in_any_order(value: str, expected: tuple) -> None:
    cfg = config(ranks=value)
    assert cfg.ranks == expected
    assert cfg.problems == ()


def test_a_bad_ranks_entry_is_dropped_and_the_good_ones_kept() -> None:
    cfg = config(ranks="0, x ,2-3,7-5")
    assert cfg.ranks == ((0, 0), (2, 3))
    assert len(cfg.problems) == 2
    assert all(p.startswith("KNAME_RANKS entry") for p in cfg.problems)
    assert "'x'" in cfg.problems[0] and "'7-5'" in cfg.problems[1]


def test_kname_ranks_is_read_in_every_mode() -> None:
    # Not a profile-only setting: the census may count only some ranks too.
    for mode in MODES:
        assert config(mode=mode, ranks="1").ranks == ((1, 1),)


@pytest.mark.parametrize(("spans", "text"), [(((0, 0), (2, 5)), "0,2-5"), (((4, 4),), "4")])
def test_format_ranks_writes_single_ranks_bare_and_spans_with_a_dash(spans, text) -> None:
    assert format_ranks(spans) == text


rank_numbers = st.integers(0, MAX_RANK) | st.integers(0, 40)  # small ones meet and overlap
rank_spans = st.lists(st.tuples(rank_numbers, rank_numbers).map(sorted).map(tuple), max_size=8)


def written(span: tuple[int, int], spaced: bool) -> str:
    first, last = span
    if first == last and not spaced:
        return str(first)
    return f" {first} - {last} " if spaced else f"{first}-{last}"


@settings(max_examples=300, deadline=None)
@given(rank_spans, st.randoms(use_true_random=False), st.booleans())
def test_kname_ranks_holds_exactly_the_ranks_written_whatever_the_order_or_spacing(
    spans, random, spaced
) -> None:
    random.shuffle(spans)
    cfg = config(ranks=",".join(written(span, spaced) for span in spans))
    assert cfg.problems == ()
    if not spans:
        assert cfg.ranks is None
        return
    assert cfg.ranks == merge_rank_spans(spans)
    ends = {n + d for first, last in spans for n in (first, last) for d in (-1, 0, 1)}
    for rank in ends - {-1}:
        written_in = any(first <= rank <= last for first, last in spans)
        assert written_in == any(first <= rank <= last for first, last in cfg.ranks)


@settings(max_examples=300, deadline=None)
@given(rank_spans.filter(bool))
def test_the_canonical_form_of_kname_ranks_reads_back_as_itself(spans) -> None:
    canonical = merge_rank_spans(spans)
    text = format_ranks(canonical)
    assert config(ranks=text).ranks == canonical
    assert format_ranks(config(ranks=text).ranks) == text
    # Canonical: sorted, and no two spans touch.
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(canonical))


# --------------------------------------------------------------------------
# KNAME_PROFILE_FLUSH (issue 30): seconds between rewrites of a profile
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"), [("30", 30.0), (" 0.5 ", 0.5), (".25", 0.25), ("2.", 2.0), ("600", 600.0)]
)
def test_kname_profile_flush_accepts_a_positive_number_of_seconds(value, seconds) -> None:
    cfg = config(mode="profile", profile_flush=value)
    assert cfg.flush == seconds
    assert cfg.problems == ()


@pytest.mark.parametrize(
    "value", ["0", "0.0", "-1", "ten", "nan", "inf", "1e3", "1,5", "٣", "1" * 5000, "30s"]
)
def test_a_bad_flush_is_one_line_naming_it_and_the_profile_is_written_at_exit_only(value) -> None:
    cfg = config(mode="profile", profile_flush=value)
    problem = the_problem(cfg)
    assert problem.startswith(f"KNAME_PROFILE_FLUSH={value!r}")
    assert "a number of seconds above 0" in problem and "at exit only" in problem
    assert len(problem.splitlines()) == 1
    assert cfg.flush is None


def test_kname_profile_flush_outside_profile_mode_is_one_line_and_ignored() -> None:
    cfg = config(mode="census", profile_flush="30")
    assert the_problem(cfg) == (
        "KNAME_PROFILE_FLUSH='30' is only read with KNAME_MODE=profile (KNAME_MODE is census); "
        "ignoring it"
    )
    assert cfg.flush is None
    with pytest.raises(ConfigError, match="KNAME_PROFILE_FLUSH"):
        config(mode="census", profile_flush="30", strict="1")


# --------------------------------------------------------------------------
# KNAME_PROFILE_DELAY and KNAME_PROFILE_DURATION (issue 30): a window of a long run
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("variable", "field"), [("delay", "delay"), ("duration", "duration")])
def test_a_profile_window_is_read_in_seconds_and_a_bad_one_is_one_line(variable, field) -> None:
    assert getattr(config(mode="profile", **{f"profile_{variable}": "90"}), field) == 90.0
    bad = config(mode="profile", **{f"profile_{variable}": "5min"})
    problem = the_problem(bad)
    assert problem.startswith(f"KNAME_PROFILE_{variable.upper()}='5min' is not a number of seconds")
    assert getattr(bad, field) is None
    assert "profile" in the_problem(config(mode="nvtx", **{f"profile_{variable}": "90"}))


# --------------------------------------------------------------------------
# Output paths (issue 30): {rank}, {host}, {pid}, checked at start-up
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "field"),
    [({"report": "p.{rnak}.json"}, "report"),
     ({"mode": "profile", "profile_trace": "t{.json"}, "trace"),
     ({"mode": "profile", "profile_html": "out/{hostname}/p.html"}, "html")],
)  # fmt: skip
def test_an_output_path_with_an_unknown_placeholder_is_one_line_and_not_written(
    variables, field
) -> None:
    cfg = config(**variables)
    (variable,) = [f"KNAME_{k.upper()}" for k in variables if k != "mode"]
    problem = the_problem(cfg)
    assert problem.startswith(f"{variable}=") and "accepted: {rank} {host} {pid}" in problem
    assert problem.endswith("; nothing is written there") and "\n" not in problem
    assert getattr(cfg, field) is None


def test_output_paths_with_placeholders_are_kept_as_written() -> None:
    cfg = config(mode="profile", report="out/{host}/p.{rank}.json", profile_html="p{{x}}.html")
    assert (cfg.report, cfg.html, cfg.problems) == ("out/{host}/p.{rank}.json", "p{{x}}.html", ())
    assert config(report="-").report == "-"


# --------------------------------------------------------------------------
# KNAME_PROFILE_TRACE_MAX (issue 31): records a trace keeps at most
# --------------------------------------------------------------------------


def test_a_trace_keeps_at_most_the_default_unless_told() -> None:
    assert config(mode="profile").trace_max == DEFAULT_TRACE_MAX
    assert config(mode="profile").trace_max == Config().trace_max


@given(st.integers(1, 999_999_999), st.sampled_from(["", " ", "\t"]))
def test_any_whole_number_of_1_or_more_in_nine_digits_is_the_trace_cap(number, space) -> None:
    cfg = config(mode="profile", profile_trace_max=f"{space}{number}{space}")
    assert (cfg.trace_max, cfg.problems) == (number, ())


def ascii_digits(text: str) -> bool:
    return text.strip().isascii() and text.strip().isdigit()


@given(st.text(max_size=12).filter(lambda text: not ascii_digits(text)) | st.just("000"))
def test_anything_else_as_the_trace_cap_is_one_line_naming_it_and_the_default(value) -> None:
    cfg = config(mode="profile", profile_trace_max=value)
    if not value.strip():
        assert (cfg.trace_max, cfg.problems) == (DEFAULT_TRACE_MAX, ())  # unset
        return
    problem = the_problem(cfg)
    assert problem.startswith(f"KNAME_PROFILE_TRACE_MAX={value!r} is not a whole number of 1 ")
    assert problem.endswith(f"the trace keeps); using {DEFAULT_TRACE_MAX}")
    assert len(problem.splitlines()) == 1
    assert cfg.trace_max == DEFAULT_TRACE_MAX


def test_a_trace_cap_of_ten_digits_is_refused() -> None:
    problem = the_problem(config(mode="profile", profile_trace_max="1" * 10))
    assert problem.startswith("KNAME_PROFILE_TRACE_MAX='1111111111' is not a whole number")


def test_kname_profile_trace_max_outside_profile_mode_is_one_line_and_ignored() -> None:
    cfg = config(mode="census", profile_trace_max="5")
    assert the_problem(cfg) == (
        "KNAME_PROFILE_TRACE_MAX='5' is only read with KNAME_MODE=profile (KNAME_MODE is census); "
        "ignoring it"
    )
    assert cfg.trace_max == DEFAULT_TRACE_MAX


# --------------------------------------------------------------------------
# KNAME_PROFILE_VERDICT (issue 40): launch calls timed for the launch-bound verdict
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "verdict"), [(None, False), ("1", True), ("on", True), ("0", False)]
)
def test_the_verdict_is_off_unless_switched_on(value, verdict) -> None:
    cfg = config(mode="profile", **({} if value is None else {"profile_verdict": value}))
    assert (cfg.verdict, cfg.problems) == (verdict, ())


def test_a_verdict_switch_that_is_no_switch_is_one_line_naming_it_and_what_is_accepted() -> None:
    cfg = config(mode="profile", profile_verdict="maybe")
    assert the_problem(cfg) == (
        "KNAME_PROFILE_VERDICT='maybe' is not a switch value; accepted: 1/true/yes/on (launch "
        "calls timed for the launch-bound verdict) or 0/false/no/off (not timed, the default); "
        "using the default"
    )
    assert cfg.verdict is False


def plain_variable_names(source: str) -> list[str]:
    """The string literals in Python `source` that are a KNAME_* variable's name, whole (the
    variable used as a key or a value, not named in a message)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [
        token.string
        for token in tokens
        if token.type == tokenize.STRING
        and re.fullmatch(r"['\"]KNAME(_[A-Z_]+)?['\"]", token.string)
    ]


def test_the_variables_names_are_spelled_in_config_alone() -> None:
    """Every other module imports a variable's name from kname.config; the start-up gates, which
    import nothing of kname, test KNAME cheaply (test_startup keeps them in step)."""
    package = Path(__file__).resolve().parent.parent / "kname"
    spelled = {
        str(path.relative_to(package)): names
        for path in sorted(package.rglob("*.py"))
        if path.name != "config.py" and path.parent.name != "_bootstrap"
        for names in [plain_variable_names(path.read_text())]
        if names
    }
    assert spelled == {}


def test_the_trigger_is_read_in_any_mode_and_made_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for mode in ("nvtx", "census", "profile"):
        cfg = config(profile_trigger=" kname.trigger ", mode=mode)
        assert (cfg.trigger, cfg.problems) == (str(tmp_path / "kname.trigger"), ())
    assert config().trigger is None


def test_a_trigger_that_is_no_path_is_one_line_naming_it_and_none_is_watched() -> None:
    cfg = config(profile_trigger="a\nb")
    assert cfg.trigger is None
    assert the_problem(cfg) == (
        "KNAME_PROFILE_TRIGGER='a\\nb' is not a file path (printable, at most 4096 characters); "
        "no trigger is watched"
    )


@pytest.mark.parametrize("value", ["1", "yes", "on", "true"])
def test_backward_per_forward_line_is_asked_for_in_profile_mode(value) -> None:
    cfg = config(mode="profile", profile_backward=value)
    assert cfg.backward_lines and not cfg.problems
    assert backward_lines_wanted({"KNAME_PROFILE_BACKWARD": value})


def test_backward_per_forward_line_is_off_by_default_and_a_bad_value_is_one_line() -> None:
    assert not config(mode="profile").backward_lines
    assert not backward_lines_wanted({})
    cfg = config(mode="profile", profile_backward="sometimes")
    (problem,) = cfg.problems
    assert not cfg.backward_lines and not backward_lines_wanted(
        {"KNAME_PROFILE_BACKWARD": "sometimes"}
    )
    assert problem.startswith("KNAME_PROFILE_BACKWARD='sometimes' is not one of 1, true, yes, on")
    assert problem.endswith("backward time stays on the backward() line")


def test_the_torch_tracker_is_on_by_default_off_when_asked_and_a_bad_value_is_one_line() -> None:
    assert config(mode="profile").torch_tracker and torch_tracker_wanted({})
    cfg = config(mode="profile", profile_torch_tracker="0")
    assert not cfg.torch_tracker and not cfg.problems
    assert not torch_tracker_wanted({"KNAME_PROFILE_TORCH_TRACKER": "off"})
    cfg = config(mode="profile", profile_torch_tracker="sometimes")
    assert cfg.torch_tracker
    assert torch_tracker_wanted({"KNAME_PROFILE_TORCH_TRACKER": "sometimes"})
    problem = the_problem(cfg)
    assert problem.startswith("KNAME_PROFILE_TORCH_TRACKER='sometimes' is not a switch value")
    assert "(torch's allocator tracker, the default)" in problem
    assert problem.endswith("(torch's GPU trace); using the default")
