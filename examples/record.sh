#!/usr/bin/env bash
# Records the example profiles of examples/cupy_demo.py on a GPU (kname[profile] installed) into
# the folder given (default: examples/): a profile, the same after a change (the matrix made
# larger), two Slurm ranks of which rank 1 has more work, the profile with call trees (depth 3).
set -u
into=${1:-examples}
demo="$(dirname "$0")/cupy_demo.py"
profile() { timeout 20 python3 -m kname profile --top 5 "$@"; }
profile --json "$into/profile.json" -- python3 "$demo"
profile --json "$into/after.json" -- python3 "$demo" --size 2560
for r in 0 1; do
    SLURM_PROCID=$r SLURM_STEP_NUM_TASKS=2 profile --json "$into/profile.json" \
        -- python3 "$demo" --size $((r == 0 ? 2048 : 2304))
done
profile --depth 3 --json "$into/tree.json" -- python3 "$demo"
