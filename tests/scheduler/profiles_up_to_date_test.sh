#!/bin/bash
# The bundled scheduler/profiles/*.json must be exactly what make_profiles generates from the
# PipeDream graphs and the transformer shapes, so the documented calibration stays true.
set -euo pipefail
root="$TEST_SRCDIR/$TEST_WORKSPACE"
work="$TEST_TMPDIR/profiles"
mkdir -p "$work/pipedream"
cp "$root"/scheduler/profiles/pipedream/*.txt "$work/pipedream/"
"$root/scheduler/make_profiles" "$work" > "$work/summary.txt"
for f in "$root"/scheduler/profiles/*.json; do
  cmp "$f" "$work/$(basename "$f")" || { echo "FAIL: $(basename "$f") is stale; rerun make_profiles"; exit 1; }
done
grep -q "matmul forward 16.639 TFLOP/s" "$work/summary.txt" || { cat "$work/summary.txt"; echo "FAIL: calibration changed; update scheduler/profiles/README.md"; exit 1; }
echo PASS
