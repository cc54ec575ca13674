#!/usr/bin/env bash
# Under a scheduled plan the timeline has a compute track (forward, backward and update spans from
# the step markers) and, on rank 0, the simulator's prediction of each step as a second process
# whose spans start at that step's measured forward.
set -euo pipefail
binary=$1
out=${TEST_TMPDIR:-$(mktemp -d)}/trace.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HOME=${HOME:-/tmp}
export OVERLAP_TIMELINE=$out OVERLAP_PLANNER=dear OVERLAP_PROFILE_STEPS=3
timeout -k 5 180 mpirun --oversubscribe --bind-to none -np 2 -x OVERLAP_TIMELINE -x OVERLAP_PLANNER \
  -x OVERLAP_PROFILE_STEPS "$binary" >/dev/null
python3 - "$out" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))
spans = [e for e in events if e.get("ph") == "X"]
procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
compute = [e for e in spans if e["pid"] == 0 and tracks[(0, e["tid"])] == "compute"]
phases = {e["name"] for e in compute}
assert phases == {"forward", "backward", "update"}, f"compute track phases: {sorted(phases)}"
predicted_pid = [p for p, n in procs.items() if n == "rank 0 predicted (simulator)"]
assert predicted_pid, f"no predicted process in {procs}"
predicted = [e for e in spans if e["pid"] == predicted_pid[0]]
lanes = {tracks[(e["pid"], e["tid"])] for e in predicted}
names = {e["name"].split(" ")[0] for e in predicted}
assert "compute" in lanes and len(lanes) >= 2, f"predicted lanes: {sorted(lanes)}"
assert {"fwd", "bwd", "reduce_scatter", "allgather"} <= names, f"predicted spans: {sorted(names)}"
# Every predicted step begins at a measured forward: the earliest predicted span of a step
# starts at (or after) the forward marker it was drawn from.
forwards = sorted(e["ts"] for e in compute if e["name"] == "forward")
starts = sorted({round(e["ts"]) for e in predicted if e["name"].startswith("fwd")})
assert any(abs(s - f) < 1000 for s in starts for f in forwards), "predicted steps not aligned"
assert all(e["dur"] >= 0 for e in spans), "negative duration"
print(f"{len(compute)} compute spans, {len(predicted)} predicted spans on {sorted(lanes)}")
PY
