"""Ways to give each backward kernel the forward line whose op it differentiates, timed on a GPU.

Run on a machine with a CUDA GPU and torch, from the repository root (no kname needed):

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 tests/gpu/backward_candidates.py OUT_DIR

It trains tests/gpu/backward_demo.py's transformer, one step per block, the candidates
interleaved in blocks (A/B/A...) in one process, and prints per candidate the CPU time of a
step (forward + backward + AdamW, synchronised) and the cost per forward op or per backward
node; then how each candidate's map from nodes to lines agrees with anomaly mode's traceback
(the sound, costly baseline), node by node; then what torch.compile does with a
TorchFunctionMode on the stack (graph breaks). docs/backward_lines.md keeps the numbers.
Results go to stdout and OUT_DIR/candidates.json.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import timeit
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parent))
import backward_demo as demo

DEMO_FILE = str(Path(demo.__file__).resolve())
seq_now = torch.autograd._get_sequence_nr
current_node = torch._C._current_autograd_node


def user_line(frame) -> int:
    """The innermost line of the demo above `frame` (0: none), as kname's naming would find."""
    while frame is not None:
        if frame.f_code.co_filename == DEMO_FILE:
            return frame.f_lineno
        frame = frame.f_back
    return 0


class RangeMode(TorchFunctionMode):
    """Candidate: each Python-level torch call's new sequence numbers -> its line."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges: dict[int, list[tuple[int, int, int]]] = {}
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        before = seq_now()
        out = func(*args, **(kwargs or {}))
        after = seq_now()
        self.calls += 1
        if after != before:
            line = user_line(sys._getframe(1))
            self.ranges.setdefault(threading.get_ident(), []).append((before, after, line))
        return out

    def line_of(self, seq: int) -> int | None:
        found = [line for ranges in self.ranges.values() for a, b, line in ranges if a <= seq < b]
        return found[0] if len(found) == 1 else None


class CompileAwareMode(RangeMode):
    """RangeMode that steps aside while dynamo traces it (torch.compiler.is_compiling)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if torch.compiler.is_compiling():
            return func(*args, **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


class HookMode(RangeMode):
    """Candidate: as RangeMode, plus a prehook on each output's node (its line at backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.hooked = 0
        self.seen: dict[int, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        node = getattr(out, "grad_fn", None)
        if node is not None:
            line = user_line(sys._getframe(1))
            seen = self.seen

            seq = node._sequence_nr()

            def prehook(grad_outputs, line=line, seq=seq):
                seen[seq] = line

            node.register_prehook(prehook)
            self.hooked += 1
        return out


class DispatchRangeMode(TorchDispatchMode):
    """Candidate: each aten op below autograd: the sequence numbers made so far -> its line."""

    def __init__(self) -> None:
        super().__init__()
        self.last = seq_now()
        self.ranges: list[tuple[int, int, int]] = []
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        now = seq_now()
        self.calls += 1
        if now != self.last:
            self.ranges.append((self.last, now, user_line(sys._getframe(1))))
            self.last = now
        return func(*args, **(kwargs or {}))


def graph_nodes(root) -> list:
    """Every node reachable from `root` (the graph a backward pass runs)."""
    seen, stack, nodes = set(), [root], []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return nodes


def timed_step(model, opt, tokens, context) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    with context():
        demo.step(model, opt, tokens)
    torch.cuda.synchronize()
    return time.perf_counter() - start


class Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def anomaly():
    return torch.autograd.detect_anomaly(check_nan=False)


def nvtx_seq():
    return torch.autograd.profiler.emit_nvtx(record_shapes=False)


def counts(model, opt, tokens) -> tuple[int, int, int]:
    """Python-level torch calls, aten ops and backward nodes of one step."""
    mode = RangeMode()
    with torch.autocast("cuda", dtype=torch.bfloat16), mode:
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    nodes = graph_nodes(loss.grad_fn)
    loss.backward()
    opt.zero_grad(set_to_none=True)
    dispatch = DispatchRangeMode()
    with torch.autocast("cuda", dtype=torch.bfloat16), dispatch:
        model(tokens[:, :-1])
    return mode.calls, dispatch.calls, len(nodes)


def candidates(model, opt, tokens) -> dict:
    modes = {
        "baseline": Nothing,
        "anomaly": anomaly,
        "torch_function_ranges": RangeMode,
        "torch_function_prehooks": HookMode,
        "torch_dispatch_ranges": DispatchRangeMode,
        "emit_nvtx_seq": nvtx_seq,
    }
    times: dict[str, list[float]] = {name: [] for name in modes}
    for name, context in list(modes.items()):
        try:
            for _ in range(3):
                timed_step(model, opt, tokens, context)  # warm
        except Exception as exc:
            print("CANDIDATE FAILED", name, repr(exc)[:300])
            del modes[name], times[name]
    for _ in range(int(os.environ.get("BLOCKS", "8"))):
        for name, context in modes.items():
            times[name].append(min(timed_step(model, opt, tokens, context) for _ in range(3)))
    return {name: sorted(values)[len(values) // 2] for name, values in times.items()}


def soundness(model, opt, tokens) -> dict:
    """Each candidate's line per node against anomaly mode's traceback (the demo's frame)."""
    ranges, hooks, dispatch = RangeMode(), HookMode(), DispatchRangeMode()
    anomalous = torch.autograd.detect_anomaly(check_nan=False)
    with anomalous, torch.autocast("cuda", dtype=torch.bfloat16), ranges:
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    nodes = graph_nodes(loss.grad_fn)
    truth, names = {}, {}
    for node in nodes:
        seq = node._sequence_nr()
        names[seq] = node.name()
        stack = node.metadata.get("traceback_") or ""
        lines = [int(part.split(", line ")[1].split(",")[0])
                 for part in str(stack).split("File ")[1:] if DEMO_FILE in part]  # fmt: skip
        truth[seq] = lines[-1] if lines else None
    loss.backward()
    opt.zero_grad(set_to_none=True)
    result = {"nodes": len(nodes), "candidates": {}}
    for name, line_of in (("torch_function_ranges", ranges.line_of),):
        agree, differ, unknown, examples = 0, 0, 0, []
        for seq, line in truth.items():
            got = line_of(seq)
            if got is None:
                unknown += 1
                examples.append(("unknown", names[seq], line))
            elif got == line:
                agree += 1
            else:
                differ += 1
                examples.append(("differ", names[seq], line, got))
        result["candidates"][name] = {
            "agree": agree, "differ": differ, "unknown": unknown, "examples": examples[:30],
        }  # fmt: skip
    del hooks, dispatch
    return result


def backward_thread_costs(tokens) -> dict:
    """What reading the running node costs on autograd's thread (from a hook: Python)."""
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    y = (x * 2).sum()
    found = {}

    def prehook(grad_outputs):
        node = current_node()
        found["node"] = None if node is None else (node.name(), node._sequence_nr())
        found["thread_is_main"] = threading.get_ident() == threading.main_thread().ident
        number = 20000
        found["current_node_us"] = timeit.timeit(current_node, number=number) / number * 1e6
        found["current_node_seq_us"] = (
            timeit.timeit(lambda: current_node()._sequence_nr(), number=number) / number * 1e6
        )

    y.grad_fn.register_prehook(prehook)
    y.backward()
    number = 200000
    found["get_sequence_nr_us"] = timeit.timeit(seq_now, number=number) / number * 1e6
    return found


def special_cases() -> dict:
    """Whether RangeMode sees a custom autograd.Function's node made, and checkpointing's."""
    import torch.utils.checkpoint

    result = {}

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    x = torch.randn(8, 8, device="cuda", requires_grad=True)
    for label, run in (
        ("custom_function", lambda: Double.apply(x)),
        ("checkpoint", lambda: torch.utils.checkpoint.checkpoint(
            lambda y: (y.sin() * 3).cos(), x, use_reentrant=False)),
        ("checkpoint_reentrant", lambda: torch.utils.checkpoint.checkpoint(
            lambda y: (y.sin() * 3).cos(), x, use_reentrant=True)),
    ):  # fmt: skip
        try:
            mode = RangeMode()
            with mode:
                out = run()
            node = out.grad_fn
            result[label] = {
                "node": node.name(),
                "line": mode.line_of(node._sequence_nr()),
                "calls": mode.calls,
            }
            out.sum().backward()
        except Exception as exc:
            result[label] = {"error": repr(exc)[:300]}
    return result


def compile_check() -> dict:
    """torch.compile of a small function (forward and backward), with and without a
    TorchFunctionMode on the stack: graph breaks, graphs, time."""
    from torch._dynamo.utils import counters

    result = {}
    try:
        import torch._dynamo.variables.torch_function as tf

        result["ignored_modes"] = [m.__name__ for m in getattr(tf, "IGNORED_MODES", ())]
    except Exception as exc:
        result["ignored_modes"] = repr(exc)

    def small(x, w1, w2):
        return torch.nn.functional.gelu(x @ w1).matmul(w2).square().mean()

    x = torch.randn(256, 256, device="cuda")
    w1 = torch.randn(256, 512, device="cuda", requires_grad=True)
    w2 = torch.randn(512, 256, device="cuda", requires_grad=True)
    for label in ("without_mode", "with_mode", "compile_aware", "with_mode_ignored"):
        if label == "with_mode_ignored":
            try:
                import torch._dynamo.variables.torch_function as tf

                tf.IGNORED_MODES.add(RangeMode)
            except Exception as exc:
                result[label] = {"error": repr(exc)[:300]}
                continue
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(small)
        mode = {"without_mode": Nothing, "compile_aware": CompileAwareMode}.get(label, RangeMode)()
        start = time.perf_counter()
        try:
            with mode:
                for _ in range(3):
                    compiled(x, w1, w2).backward()
            torch.cuda.synchronize()
            result[label] = {
                "seconds": round(time.perf_counter() - start, 2),
                "graph_breaks": sum(counters["graph_break"].values()),
                "break_reasons": [str(r)[:160] for r in list(counters["graph_break"])[:4]],
                "unique_graphs": counters["stats"]["unique_graphs"],
                "mode_calls": getattr(mode, "calls", 0),
                "mode_ranges": sum(len(r) for r in getattr(mode, "ranges", {}).values()),
            }
        except Exception as exc:
            result[label] = {"error": repr(exc)[:400]}
    return result


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    model, opt, tokens = demo.make("cuda")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    def save() -> None:
        (out / "candidates.json").write_text(json.dumps(report, indent=1, default=str))

    calls, ops, nodes = counts(model, opt, tokens)
    report["per_step"] = {"torch_calls": calls, "aten_ops": ops, "nodes": nodes}
    print("PER STEP", report["per_step"], flush=True)
    report["backward_thread"] = backward_thread_costs(tokens)
    print("BACKWARD THREAD", report["backward_thread"], flush=True)
    report["special"] = special_cases()
    print("SPECIAL", report["special"], flush=True)
    save()
    try:
        report["soundness"] = soundness(model, opt, tokens)
    except Exception as exc:
        print("SOUNDNESS FAILED", repr(exc)[:300])
        report["soundness"] = {"candidates": {}}
    for name, result in report["soundness"]["candidates"].items():
        print("SOUND", name, {k: v for k, v in result.items() if k != "examples"})
        for example in result["examples"][:12]:
            print("  ", example)
    save()
    report["step_ms"] = {k: v * 1e3 for k, v in candidates(model, opt, tokens).items()}
    base = report["step_ms"]["baseline"]
    for name, ms in report["step_ms"].items():
        per = {"torch_calls": calls, "aten_ops": ops, "nodes": nodes}
        extra = ", ".join(f"{(ms - base) * 1e3 / n:.2f} us/{k}" for k, n in per.items() if n)
        print(f"STEP {name}: {ms:.3f} ms (+{ms - base:.3f}) {extra}", flush=True)
    save()
    report["compile"] = compile_check()
    print("COMPILE", json.dumps(report["compile"])[:1500], flush=True)
    save()
    print("CANDIDATES DONE")


if __name__ == "__main__":
    main()
