#!/bin/bash
# Issue 44's multi-GPU run in one command, for the day a host of two GPUs is lent:
#
#     bash tests/gpu/multi_gpu.sh [OUT_DIR]        (default: $OUT_DIR, else /tmp/kname-multi-gpu)
#
# 1. pytest -m gpu tests/gpu/test_gpu_ranks.py: torchrun with two ranks, NCCL across two GPUs (the
#    slow rank named, the fast rank's waiting at its all_reduce told apart, a CUDA graph on each
#    rank, the trigger-file window on both ranks) and gloo on one GPU. With one GPU the NCCL
#    tests skip, and the summary says so.
# 2. benchmarks/merge_ranks.py --ranks 1024 --sites 5000: kname report's merge on this host,
#    with its CPUs, memory and peak resident memory (RANKS and SITES in the environment change
#    the size).
# Then the summary: each test's outcome, the report's waiting lines, the merge's numbers. Exit 0
# when both ran clean on two GPUs or more; 3 where they ran clean but the NCCL tests skipped
# (fewer GPUs: nothing proven of them). Needs torch with CUDA, cupti-python and kname's C built
# in this checkout.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-${OUT_DIR:-/tmp/kname-multi-gpu}}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
echo "host: nproc $(nproc); $(grep MemTotal /proc/meminfo)"
nvidia-smi -L 2>/dev/null
gpus=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
[ "${gpus:-0}" -ge 2 ] || echo "note: torch sees ${gpus:-0} GPU(s): the NCCL (two-GPU) tests skip"
$PY -m pytest -v -s -rs -n 0 -p no:cacheprovider -m gpu tests/gpu/test_gpu_ranks.py \
  > "$OUT/ranks_tests.txt" 2>&1
tests=$?
$PY benchmarks/merge_ranks.py --ranks "${RANKS:-1024}" --sites "${SITES:-5000}" \
  --json "$OUT/merge.json" > "$OUT/merge.txt" 2>&1
merge=$?
echo "== the rank tests (pytest exit $tests; log: $OUT/ranks_tests.txt)"
grep -oE "test_gpu_ranks.py::[^ ]+ (PASSED|FAILED|SKIPPED|ERROR)|SKIPPED \[.*|^=+ .*(passed|failed|skipped).* =+$" \
  "$OUT/ranks_tests.txt"
grep -E "is waiting in NCCL kernels|with a straggler" "$OUT/ranks_tests.txt" | sort -u | head -8
echo "== the merge (exit $merge; log: $OUT/merge.txt)"
$PY - "$OUT/merge.json" <<'PY' || tail -5 "$OUT/merge.txt"
import json, sys
result = json.load(open(sys.argv[1]))
keys = ("ranks", "sites", "files_megabytes", "cpus", "memory_gigabytes", "workers",
        "load_average", "merge_seconds", "merge_cpu_seconds", "table_seconds", "peak_megabytes",
        "merging_process_peak_megabytes", "budget")
print(", ".join(f"{key} {result[key]}" for key in keys))
PY
[ $tests -eq 0 ] && [ $merge -eq 0 ] || exit 1
[ "${gpus:-0}" -ge 2 ] || { echo "not proven: the NCCL tests need two GPUs"; exit 3; }
