#!/bin/bash
# Batch 1 only: the demo with kname's pool hooks (no CUPTI), under kname profile --memory, and
# the cost on a torch training step (bare, profile, profile --memory).
OUT=$1
echo "== kname session"
timeout -k 2 14 python3 tests/gpu/memory_record.py --session "$OUT" 2>&1 | cut -c1-400
echo "== kname profile --memory demo"
timeout -k 2 16 python3 -m kname profile --memory --json "$OUT/profile.json" \
  --html "$OUT/profile.html" -- python3 tests/gpu/memory_demo.py 2>&1 | cut -c1-300 | tail -40
echo "== cost"
timeout -k 1 7 python3 tests/gpu/memory_cost.py 2>&1 | tail -2
timeout -k 1 7 python3 -m kname profile -- python3 tests/gpu/memory_cost.py 2>&1 | grep -E "STEP|kname:" | head -5
timeout -k 1 8 python3 -m kname profile --memory --json "$OUT/cost.json" -- python3 tests/gpu/memory_cost.py 2>&1 | grep -E "STEP|kname:|memory peak" | head -8
