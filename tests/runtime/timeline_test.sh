#!/usr/bin/env bash
# The timeline is valid Chrome-trace JSON with each tensor's phases and the channel tracks.
set -euo pipefail
binary=$1
out=${TEST_TMPDIR:-$(mktemp -d)}/trace.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HOME=${HOME:-/tmp}
OVERLAP_TIMELINE=$out timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 -x OVERLAP_TIMELINE \
  "$binary" "[order]" >/dev/null
python3 - "$out" <<'PY'
import json, sys
for path in (sys.argv[1], sys.argv[1] + ".rank1"):
    events = json.load(open(path))
    spans = [e for e in events if e.get("ph") == "X"]
    names = {e["name"] for e in spans}
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    for phase in ("NEGOTIATE", "QUEUE", "COLLECTIVE", "COPY_OUT", "ROUND"):
        assert phase in names, f"{path}: no {phase} span in {sorted(names)}"
    for track in ("order.7", "channel 0", "negotiation rounds"):
        assert track in tracks, f"{path}: no track {track} in {sorted(tracks)[:5]}"
    assert all(e["dur"] >= 0 for e in spans), f"{path}: negative duration"
    print(f"{path}: {len(spans)} spans on {len(tracks)} tracks")
PY
