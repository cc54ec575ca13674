#!/usr/bin/env bash
# A stranger on a fifth namespace host connects to rank 0's control port before the real ranks
# do (tests/cluster/control_stranger.py): a bare rank number, a replayed answer, silence. Each
# connection must be refused and logged once by rank 0 with its address, rank 0 must listen on the
# cluster address only, and the 4-host job must come up and reduce the right values
# (tests/cluster/control_stranger.cc). Needs root and iproute2.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-overlap}
CLUSTER=$R/tools/cluster/cluster.sh
OVERLAPRUN=$R/launcher/overlaprun
python=${OVERLAP_PYTHON:-$(command -v python3)}
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}

fail() { echo "FAIL: $*" >&2; exit 1; }

exec 9>/tmp/overlap-cluster.lock
flock -w 300 9 || fail "another test held the cluster lock for 300 s"
DIR=$(mktemp -d /tmp/overlap-stranger.XXXXXX)  # one file system for every namespace
LOG=$DIR/job.log
trap '"$CLUSTER" down >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
timeout 60 "$CLUSTER" up 5 >/dev/null
head -n 4 "$("$CLUSTER" hostfile)" >"$DIR/hostfile"  # h5 is no host of the job

ip netns exec ovl-h5 timeout 150 "$python" "$R/tests/cluster/control_stranger.py" "$DIR" &
stranger=$!
set +e
timeout -k 10 120 "$CLUSTER" exec "$OVERLAPRUN" -np 4 --hostfile "$DIR/hostfile" --tcp-only \
  -- "$R/tests/cluster/control_stranger" "$DIR" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
wait "$stranger"
stranger_rc=$?
set -e
[ "$rc" -eq 0 ] || fail "the job exited with status $rc"
[ "$stranger_rc" -eq 0 ] || fail "the stranger's check failed (status $stranger_rc)"
grep -qx "control_stranger: ok" "$LOG" || fail "rank 0 did not report success"
grep -Eqx "10\.77\.0\.1:[0-9]+" "$DIR/contact" ||
  fail "rank 0 listened on $(cat "$DIR/contact"), not on its cluster address alone"
[ "$(wc -l <"$DIR/names")" -eq 3 ] || fail "the stranger did not open 3 connections"
while read -r name; do
  case $name in 10.77.0.5:*) ;; *) fail "a stranger's connection came from $name, not h5" ;; esac
  n=$(grep -c "refused a control connection from $name:" "$LOG" || true)
  [ "$n" -eq 1 ] || fail "rank 0 logged $name $n times, not once"
done <"$DIR/names"
echo "control_stranger_test: 3 strangers from h5 refused and logged once each; the job completed"
