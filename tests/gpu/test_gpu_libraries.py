"""On a GPU: numba-cuda, CuPy, Triton and cuda.core kernels under Nsight Compute's NVTX renaming.

Runs tests/gpu/libraries_demo.py under `ncu --nvtx --print-nvtx-rename kernel` and checks that
every marked launch line named its kernels, and that no kernel sits in more than one kname range.
That test is marked `gpu` and skipped unless a CUDA GPU (nvidia-smi) and ncu are there; the
parser of ncu's output is tested everywhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from support import REPO

DEMO = REPO / "tests" / "gpu" / "libraries_demo.py"
NCU = shutil.which("ncu") or next(
    (p for p in ("/usr/local/cuda/bin/ncu",) if os.access(p, os.X_OK)), None
)
KERNEL_LINE = re.compile(
    r"^  (?P<name>\S.*) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context \d+, Stream \d+, "
    r"Device \d+, CC [\d.]+$"
)
DOMAIN_LINE = re.compile(r"^      (?P<domain>\S.*)$")
RANGE_LINE = re.compile(r"^        <(?P<level>\d+),(?P<name>.*)>$")
SITE_LINE = re.compile(r"^SITE (?P<marker>\S+) (?P<line>\d+) (?P<name>.+) (?P<launches>\d+)$")


def _gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return done.returncode == 0 and "GPU" in done.stdout


@dataclass
class Kernel:
    """One profiled kernel: its (renamed) name and its kname NVTX ranges."""

    name: str
    kname_ranges: list[str] = field(default_factory=list)


def parse_ncu(text: str) -> list[Kernel]:
    """Kernels of `ncu --nvtx --print-nvtx-rename kernel` output, with their kname ranges."""
    kernels: list[Kernel] = []
    domain = None
    for line in text.splitlines():
        if match := KERNEL_LINE.match(line):
            kernels.append(Kernel(match["name"]))
            domain = None
        elif kernels and (match := DOMAIN_LINE.match(line)):
            domain = match["domain"]
        elif kernels and domain == "kname" and (match := RANGE_LINE.match(line)):
            kernels[-1].kname_ranges.append(match["name"])
    return kernels


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_present(), reason="no CUDA GPU")
@pytest.mark.skipif(NCU is None, reason="Nsight Compute (ncu) is not installed")
def test_each_kernel_is_named_after_its_line_and_in_one_kname_range(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [NCU, "--nvtx", "--print-nvtx-rename", "kernel", "--metrics", "gpu__time_duration.sum",
         sys.executable, str(DEMO)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "MISSING" not in output and "FAIL " not in output, output
    sites = [m.groupdict() for line in output.splitlines() if (m := SITE_LINE.match(line))]
    assert sites, output
    kernels = parse_ncu(output)
    assert kernels, output
    for site in sites:
        named = [k for k in kernels if k.name.startswith(site["name"] + "/")]
        assert named, f"no kernel renamed after {site['name']!r}\n{output}"
        assert all(k.kname_ranges == [site["name"]] for k in named), named
        if site["marker"].endswith("-repeated"):  # launches from one line: each one named
            assert len(named) == int(site["launches"]) == 3, named
    doubled = [k for k in kernels if len(k.kname_ranges) > 1]
    assert not doubled, doubled


def test_parse_ncu_reads_kernels_and_kname_ranges():
    text = (
        "  step app.py:3/axpy (16, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0\n"
        "    NVTX Push/Pop Stack for Thread 1003:\n"
        "      kname\n"
        "        <0,step app.py:3>\n"
        "          RGB: 0xfff28e2b\n"
        "      other\n"
        "        <0,outer>\n"
        "  cupy_fill (32, 1, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0\n"
    )
    kernels = parse_ncu(text)
    assert [(k.name, k.kname_ranges) for k in kernels] == [
        ("step app.py:3/axpy", ["step app.py:3"]),
        ("cupy_fill", []),
    ]
