#!/usr/bin/env bash
# overlap.run on 4 namespace hosts: a plain Python process on the head node starts the ranks
# through overlaprun; each rank runs on its own host, fetches the function from the driver over
# the cluster network and sends back its result (tests/cluster/run_func.py checks the values).
# Needs root, iproute2, and an interpreter with torch ($OVERLAP_PYTHON or python3).
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-overlap}
CLUSTER=$R/tools/cluster/cluster.sh
python=${OVERLAP_PYTHON:-$(command -v python3)}
export OVERLAP_LAUNCHER=$R/launcher/overlaprun OVERLAP_LIBRARY=$R/runtime/liboverlap.so
export PYTHONPATH=$R/python HOME=${HOME:-${TEST_TMPDIR:-/tmp}} OMP_NUM_THREADS=1

exec 9>/tmp/overlap-cluster.lock
flock -w 300 9 || { echo "FAIL: another test held the cluster lock for 300 s" >&2; exit 1; }
trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT
timeout 60 "$CLUSTER" up 4
timeout -k 10 120 "$CLUSTER" exec "$python" "$R/tests/cluster/run_func.py" \
  "$("$CLUSTER" hostfile)" 4
