"""Tests of the NVTX capture itself, driven by the real ``nvtx`` package in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.nvtx_capture import (
    GLOBAL_DOMAIN,
    Capture,
    compile_c,
    null_env,
    parse_lines,
    run_captured,
)

# A C program calling NVTX through its own copy of the header-only NVTX code, printing what the
# tool returns: the push/pop levels, and whether domain and string handles are distinct.
NVTX_PROGRAM = r"""
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>

static void *nest(void *label)
{
    int a = nvtxRangePushA("a"), b = nvtxRangePushA("b");
    int end_b = nvtxRangePop(), end_a = nvtxRangePop(), extra = nvtxRangePop();
    printf("%s %d %d %d %d %d\n", (const char *)label, a, b, end_b, end_a, extra);
    return NULL;
}

int main(void)
{
    pthread_t thread;
    nvtxDomainHandle_t d = nvtxDomainCreateA("null");
    nvtxStringHandle_t s1 = nvtxDomainRegisterStringA(d, "x");
    nvtxStringHandle_t s2 = nvtxDomainRegisterStringA(d, "y");
    nvtxEventAttributes_t attrs = {0};
    attrs.version = NVTX_VERSION;
    attrs.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attrs.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attrs.message.registered = s1;
    printf("handles %d %d\n", d != NULL && s1 != NULL && s2 != NULL, s1 != s2);
    printf("outer %d\n", nvtxDomainRangePushEx(d, &attrs));
    pthread_create(&thread, NULL, nest, "thread");
    pthread_join(thread, NULL);
    printf("outer %d\n", nvtxDomainRangePop(d));
    return 0;
}
"""


def run_py(
    code: str, lib: Path, tmp_path: Path, env: dict[str, str | None] | None = None
) -> tuple[subprocess.CompletedProcess, Capture]:
    """Run Python ``code`` under capture; fail the test if it does not exit cleanly."""
    args = [sys.executable, "-c", textwrap.dedent(code)]
    done, capture = run_captured(args, lib, tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done, capture


def test_domain_push_pop_records_text_category_and_colour(inject_lib, tmp_path):
    _, cap = run_py(
        """
        import nvtx
        d = nvtx.get_domain("kname-test")
        a = d.get_event_attributes(message="launch k", color=0xFF123456, category=3)
        d.push_range(a)
        d.pop_range()
        d.mark(d.get_event_attributes(message="here", color=0x80ABCDEF, category="kernels"))
        """,
        inject_lib,
        tmp_path,
    )
    push, pop = cap.of("push"), cap.of("pop")
    assert cap.domains() == ["kname-test"]
    assert [(e.domain, e.message, e.category, e.color) for e in push] == [
        ("kname-test", "launch k", 3, 0xFF123456)
    ]
    assert [(e.domain, e.tid) for e in pop] == [("kname-test", push[0].tid)]
    assert cap.categories("kname-test") == {1: "kernels"}
    [mark] = cap.of("mark")
    assert (mark.message, mark.category, mark.color) == ("here", 1, 0x80ABCDEF)
    assert cap.balanced()
    assert cap.max_depth("kname-test") == 1


def test_registered_strings_are_recorded_and_resolved(inject_lib, tmp_path):
    _, cap = run_py(
        """
        import nvtx
        d = nvtx.get_domain("strings")
        text = "tab\\there\\nnew \\\\ line"
        d.get_registered_string(text)
        d.push_range(message=text)  # reuses the registration: nvtx caches it
        d.pop_range()
        """,
        inject_lib,
        tmp_path,
    )
    text = "tab\there\nnew \\ line"
    assert cap.registered_strings("strings") == [text]
    assert cap.ranges("strings") == [text]


def test_global_annotate_and_mark_use_the_global_domain(inject_lib, tmp_path):
    _, cap = run_py(
        """
        import nvtx
        with nvtx.annotate("outer"):
            with nvtx.annotate("inner", color="red"):
                nvtx.mark("m")
        """,
        inject_lib,
        tmp_path,
    )
    assert cap.ranges(GLOBAL_DOMAIN) == ["outer", "inner"]
    assert cap.marks(GLOBAL_DOMAIN) == ["m"]
    assert cap.max_depth(GLOBAL_DOMAIN) == 2
    assert cap.balanced()


def test_domain_destroy_is_recorded(inject_lib, tmp_path):
    _, cap = run_py(
        """
        from nvtx._lib.lib import DomainHandle
        h = DomainHandle("short-lived")
        del h
        """,
        inject_lib,
        tmp_path,
    )
    assert [(e.domain, e.message) for e in cap.of("domain")] == [
        ("short-lived", "create"),
        ("short-lived", "destroy"),
    ]


def test_pushes_from_four_threads_balance_per_thread(inject_lib, tmp_path):
    _, cap = run_py(
        """
        import threading, nvtx
        d = nvtx.get_domain("threads")
        barrier = threading.Barrier(4)  # all alive at once, so thread ids differ

        def work(i):
            barrier.wait()
            for j in range(50):
                d.push_range(message=f"t{i}-{j}")
                d.push_range(message="inner")
                d.pop_range()
                d.pop_range()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        """,
        inject_lib,
        tmp_path,
    )
    pushes = cap.of("push", "threads")
    assert len(pushes) == 400
    assert len({e.tid for e in pushes}) == 4
    assert cap.balanced(), cap.stack_errors()
    assert cap.max_depth("threads") == 2


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("d.push_range(message='left open')", "open ranges ['left open']"),
        ("d.pop_range()", "pop without push"),
    ],
)
def test_unbalanced_program_is_reported(inject_lib, tmp_path, body, problem):
    _, cap = run_py(f"import nvtx\nd = nvtx.get_domain('bad')\n{body}\n", inject_lib, tmp_path)
    assert not cap.balanced()
    [error] = cap.stack_errors()
    assert problem in error


def test_library_makes_domains_real(inject_lib, tmp_path):
    code = "import nvtx, nvtx._lib.lib as lib; print(type(nvtx.get_domain('x')) is lib.Domain)"
    done, _ = run_py(code, inject_lib, tmp_path)
    assert done.stdout.split() == ["True"]


def test_without_injection_domain_is_dummy_and_no_log(inject_lib, tmp_path):
    done, cap = run_py(
        """
        import nvtx
        d = nvtx.get_domain("x")
        d.push_range(message="nobody sees this")
        d.pop_range()
        print(type(d).__name__)
        """,
        inject_lib,
        tmp_path,
        env={"NVTX_INJECTION64_PATH": None},
    )
    assert done.stdout.split() == ["DummyDomain"]
    assert cap.events == []
    assert not list(tmp_path.glob("nvtx-*.log"))


def test_forked_child_appends_to_the_same_log(inject_lib, tmp_path):
    _, cap = run_py(
        """
        import os, nvtx
        d = nvtx.get_domain("fork")
        d.push_range(message="parent")
        pid = os.fork()
        if pid == 0:
            d.push_range(message="child")
            d.pop_range()
            os._exit(0)
        os.waitpid(pid, 0)
        d.pop_range()
        """,
        inject_lib,
        tmp_path,
    )
    assert cap.ranges("fork") == ["parent", "child"]
    assert cap.balanced(), cap.stack_errors()


def test_analysis_keeps_domains_and_threads_apart():
    cap = parse_lines(
        [
            "push\ta\t1\tx\t0\t0x00000000",
            "push\tb\t1\ty\t0\t0x00000000",
            "push\ta\t2\tz\t0\t0x00000000",
            "push\ta\t1\tw\\\\v\t2\t0xFF000001",
            "pop\ta\t1",
            "pop\ta\t1",
            "pop\tb\t1",
            "pop\ta\t2",
            "",
        ]
    )
    assert cap.ranges("a") == ["x", "z", "w\\v"]
    assert cap.of("push")[-1].color == 0xFF000001
    assert cap.max_depth("a") == 2
    assert cap.max_depth("b") == 1
    assert cap.balanced()
    # Popping another thread's range does not balance this one.
    assert not parse_lines(["push\ta\t1\tx\t0\t0x0", "pop\ta\t2"]).balanced()


@pytest.fixture(scope="module")
def nvtx_program(tmp_path_factory: pytest.TempPathFactory, inject_lib: Path) -> Path:
    """NVTX_PROGRAM built (inject_lib first: it skips where no library can be built)."""
    source = tmp_path_factory.mktemp("nvtx_program") / "nvtx_program.c"
    source.write_text(NVTX_PROGRAM)
    return compile_c(source, source.with_suffix(""), "-lpthread", "-ldl")


def test_null_mode_counts_levels_per_thread_and_hands_out_handles(
    inject_lib, nvtx_program, tmp_path
):
    env = {**os.environ, **null_env(inject_lib)}
    env = {k: v for k, v in env.items() if v is not None}
    done = subprocess.run(
        [str(nvtx_program)], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    # Levels from 0 on each thread, -1 for a pop with nothing pushed: the null tool's counter.
    assert done.stdout.splitlines() == [
        "handles 1 1",
        "outer 0",
        "thread 0 1 1 0 -1",
        "outer 0",
    ]
    assert done.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_log_mode_logs_the_same_program_and_tracks_no_levels(inject_lib, nvtx_program, tmp_path):
    done, cap = run_captured([str(nvtx_program)], inject_lib, tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["handles 1 1", "outer 0", "thread 0 0 0 0 0", "outer 0"]
    assert cap.registered_strings("null") == ["x", "y"]
    assert cap.ranges("null") == ["x"]
    assert cap.ranges(GLOBAL_DOMAIN) == ["a", "b"]
    # The thread's third pop has no push: the log shows it, as a profiler would.
    thread = cap.of("push", GLOBAL_DOMAIN)[0].tid
    assert cap.stack_errors() == [f"pop without push in domain {GLOBAL_DOMAIN!r}, thread {thread}"]


def test_null_mode_gives_python_a_real_domain_and_writes_no_log(inject_lib, tmp_path):
    done, cap = run_py(
        """
        import nvtx
        d = nvtx.get_domain("x")
        d.push_range(d.get_event_attributes(message="seen by the tool only"))
        d.pop_range()
        print(type(d).__name__)
        """,
        inject_lib,
        tmp_path,
        env=null_env(inject_lib),
    )
    assert done.stdout.split() == ["Domain"]
    assert cap.events == []
    assert not list(tmp_path.glob("nvtx-*.log"))
