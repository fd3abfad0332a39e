"""On a GPU: backward per forward line (issue 40). A small transformer's training steps
(tests/gpu/backward_demo.py) under `kname profile`: each backward kernel stays under the
`loss.backward()` line and is also charged to the forward line whose op it differentiates.

Marked `gpu`, skipped without a CUDA driver, cupti-python or a CUDA build of torch. Runs
`kname profile --json profile.json -- python backward_demo.py` from kname's checkout, once per
launch callback (native, Python), and checks: the attention line and the MLP line each show
backward time; the forward lines' backward times add up to the backward() line's GPU time
within 2% (what the pass launches outside any node, the seed gradient and AccumulateGrad's
copies, is the rest); no backward time is charged to a line that is not one of the demo's
forward lines; the table has the backward column.
"""

from __future__ import annotations

import pytest
from support import REPO, torch_profile_missing_reason
from support.gpu_programs import SITE, marked_lines, profiled_run

from kname.documents.backward_lines import BACKWARD_LINES_NS, BACKWARD_NS, BACKWARD_UNKNOWN_NS

DEMO = REPO / "tests" / "gpu" / "backward_demo.py"
MARKED = marked_lines(DEMO)
LINE = {marker: number for number, marker in MARKED.items()}
# The lines whose ops autograd differentiates (the others launch no differentiable op).
FORWARD = ("qkv", "attention", "proj", "mlp", "attention-residual", "mlp-residual", "embed",
           "head", "loss", "forward", "block")  # fmt: skip

pytestmark = pytest.mark.gpu
MISSING = torch_profile_missing_reason()


def _site(sites: dict, marker: str) -> dict:
    (found,) = [site for name, site in sites.items() if name.endswith(f":{LINE[marker]}")]
    return found


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_each_forward_line_shows_the_backward_time_of_its_ops(tmp_path, callbacks) -> None:
    document, run = profiled_run(
        DEMO, tmp_path, callbacks, "BACKWARD DEMO DONE", KNAME_PROFILE_BACKWARD="1"
    )
    sites = {site["name"]: site for site in document["sites"]}
    for name in sites:
        match = SITE.fullmatch(name)
        assert match and match["path"] == "backward_demo.py", name
    assert _site(sites, "attention").get(BACKWARD_NS, 0) > 0, _site(sites, "attention")
    assert _site(sites, "mlp").get(BACKWARD_NS, 0) > 0, _site(sites, "mlp")
    charged = {
        MARKED[int(SITE.fullmatch(name)["line"])]: site[BACKWARD_NS]
        for name, site in sites.items()
        if BACKWARD_NS in site
    }
    assert set(charged) <= set(FORWARD), charged
    pass_row = _site(sites, "backward")
    assert pass_row[BACKWARD_LINES_NS] == sum(charged.values())
    assert pass_row.get(BACKWARD_UNKNOWN_NS, 0) == 0, pass_row
    assert abs(pass_row["gpu_ns"] - sum(charged.values())) <= 0.02 * pass_row["gpu_ns"], (
        pass_row,
        charged,
    )
    assert " backward " in run.stderr  # the table's column
