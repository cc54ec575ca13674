#!/usr/bin/env bash
# overlaprun end to end on this machine: refusals are one line with status 2, --dry-run prints
# the command, a clean job exits 0, a failed rank's status and name come back, and the rank
# wrapper reports exits, signals, exec failures and forwarded SIGTERM. Needs mpirun.
set -uo pipefail
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-overlap}
O=$R/launcher/overlaprun
T=${TEST_TMPDIR:-/tmp}
export HOME=${HOME:-$T}
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect STATUS "EXACT STDERR" -- ARGS...: overlaprun's status and its whole stderr.
expect() {
  local want_rc=$1 want_err=$2
  shift 3
  timeout 30 "$O" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ "$rc" -eq "$want_rc" ] || fail "overlaprun $*: status $rc, expected $want_rc"
  [ "$(cat "$T/err")" = "$want_err" ] || fail "overlaprun $*: stderr '$(cat "$T/err")', expected '$want_err'"
}

# Refusals.
expect 2 "overlaprun: -np N is required: how many ranks to start" -- true
expect 2 "overlaprun: -np must be at least 1, got 0" -- -np 0 true
expect 2 "overlaprun: no program given; usage: overlaprun -np N [options] [--] program [args...]" -- -np 2
expect 2 "overlaprun: program 'no-such-program-xyz' is not found in PATH" -- -np 2 no-such-program-xyz
expect 2 "overlaprun: -np 3 needs 3 slots but -H a:1,b:1 has 2; add hosts or slots, or pass --oversubscribe" -- -np 3 -H a,b true
printf 'node1 slots=2\nnode2 slots=x\n' >"$T/hosts"
expect 2 "overlaprun: hostfile $T/hosts line 2: slot count 'x' is not a positive integer" -- -np 2 --hostfile "$T/hosts" true
expect 2 "overlaprun: host node9 is not reachable through '/bin/false': exit status 1" -- -np 2 -H node9:2 --rsh-agent /bin/false true
expect 2 "overlaprun: mpirun 'no-mpirun' is not found or not executable; install Open MPI (openmpi-bin) or pass --mpirun PATH" -- -np 1 --mpirun no-mpirun true
expect 2 "overlaprun: unknown option '--np' (overlaprun --help lists them)" -- --np 2 true
expect 2 "overlaprun: --planner 'foo' is not valid: expected one of observed, wfbp, fusion, mgwfbp, bytescheduler, usbyte, dear, deft, auto" -- -np 2 --planner foo true
expect 2 "overlaprun: --staleness '17' is not valid: expected an integer in 0..16" -- -np 2 --staleness 17 true
expect 2 "overlaprun: --budget '-2' is not valid: expected -1 or a number in [0, 1e6] (-1: max(staleness, (max_period - 1) / 2))" -- -np 2 --budget -2 true

# More refusals, as the user sees them (docs/bad-inputs.md quotes these lines).
expect 2 "overlaprun: -np 'four' is not an integer" -- -np four true
expect 2 "overlaprun: -x '1BAD=2' is not NAME or NAME=VALUE with a valid variable name" -- -np 1 -x 1BAD=2 true
expect 2 "overlaprun: --stall-timeout 10 is below --stall-warning 30; the warning must come first" -- -np 1 --stall-warning 30 --stall-timeout 10 true
expect 2 "overlaprun: give hosts once: with -H or with --hostfile, not both or twice" -- -np 2 -H a --hostfile "$T/hosts" true
expect 2 "overlaprun: -H 'a:0': slot count '0' is not a positive integer" -- -np 2 -H a:0 true
expect 2 "overlaprun: hostfile /nonexistent/hosts cannot be read" -- -np 2 --hostfile /nonexistent/hosts true
printf 'node1\nnode2 slots=2\nnode1\n' >"$T/hosts"
expect 2 "overlaprun: hostfile $T/hosts: host 'node1' is listed twice; give it once with all its slots" -- -np 2 --hostfile "$T/hosts" true
printf 'node1,node2 slots=2\n' >"$T/hosts"
expect 2 "overlaprun: hostfile $T/hosts line 1: host name 'node1,node2' may only have letters, digits, '.', '-' and '_'" -- -np 2 --hostfile "$T/hosts" true
printf '# no hosts yet\n\n' >"$T/hosts"
expect 2 "overlaprun: hostfile $T/hosts lists no hosts" -- -np 2 --hostfile "$T/hosts" true

# Help documents every option with examples.
"$O" --help >"$T/help" || fail "--help status $?"
for opt in -np -H --hostfile --dry-run --network-interface -x --fusion-threshold-mb --timeline \
  --log-level --stall-warning --stall-timeout --collective-timeout --planner --compression \
  --cycle-time-ms --plan-after-steps --profile-steps --staleness --max-period --budget \
  --partition-mb --credit-mb --replan-drift StartForward \
  --start-timeout --oversubscribe --rsh-agent --tcp-only --kill-grace --peer-grace --mpi-args examples:; do
  grep -q -- "$opt" "$T/help" || fail "--help does not mention $opt"
done

# --dry-run prints exactly the command and launches nothing.
env -i PATH=/usr/bin:/bin OVERLAP_NUM_CHANNELS=3 "$O" --dry-run -np 2 -H localhost:2 \
  --fusion-threshold-mb 8 -x A=1 --mpirun mpirun prog arg >"$T/out" 2>&1
want="mpirun $([ "$(id -u)" -eq 0 ] && echo '--allow-run-as-root ')-np 2 -H localhost:2 --bind-to none --map-by slot -x OVERLAP_FUSION_THRESHOLD=8388608 -x OVERLAP_NUM_CHANNELS -x PATH -x A=1 $(readlink -f "$O") --rank-wrapper -- prog arg"
[ "$(cat "$T/out")" = "$want" ] || fail "--dry-run printed '$(cat "$T/out")', expected '$want'"
# Planner options reach every rank as OVERLAP_* variables in the runtime's units (sorted by name).
env -i PATH=/usr/bin:/bin "$O" --dry-run -np 2 -H localhost:2 --planner deft --profile-steps 7 \
  --staleness 2 --max-period 4 --budget -1 --partition-mb 2 --credit-mb 0.5 --replan-drift 0.1 \
  --mpirun mpirun prog >"$T/out" 2>&1
want="mpirun $([ "$(id -u)" -eq 0 ] && echo '--allow-run-as-root ')-np 2 -H localhost:2 --bind-to none --map-by slot -x OVERLAP_BUDGET=-1 -x OVERLAP_CREDIT_BYTES=524288 -x OVERLAP_MAX_PERIOD=4 -x OVERLAP_PARTITION_BYTES=2097152 -x OVERLAP_PLANNER=deft -x OVERLAP_PROFILE_STEPS=7 -x OVERLAP_REPLAN_DRIFT=0.1 -x OVERLAP_STALENESS=2 -x PATH $(readlink -f "$O") --rank-wrapper -- prog"
[ "$(cat "$T/out")" = "$want" ] || fail "--dry-run with planner options printed '$(cat "$T/out")', expected '$want'"

# A clean job: status 0, the program's output, nothing from overlaprun; forwarded variables arrive.
timeout 60 "$O" -np 3 -x GREETING=hi --log-level info sh -c 'echo "rank $OMPI_COMM_WORLD_RANK $GREETING $OVERLAP_LOG_LEVEL"' \
  >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 0 ] || fail "clean job status $rc: $(cat "$T/err")"
[ "$(sort "$T/out")" = $'rank 0 hi info\nrank 1 hi info\nrank 2 hi info' ] || fail "clean job output: $(cat "$T/out")"
! grep -q "overlaprun:" "$T/err" || fail "clean job printed: $(cat "$T/err")"

# A failed rank: its status comes back and it is named with its host.
timeout 60 "$O" -np 3 sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && exit 5; sleep 20' >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 5 ] || fail "failed job status $rc, expected 5"
grep -qx "overlaprun: rank 1 on host $(hostname) exited with status 5; stopping the job" "$T/err" || fail "no failure notice: $(cat "$T/err")"
grep -q "^overlaprun: job failed: rank 1 on host $(hostname) exited with status 5; " "$T/err" || fail "no summary: $(cat "$T/err")"
! grep -q "@@overlaprun-rank-end@@" "$T/err" || fail "raw rank reports leaked to the user"

# A daemon that never comes up: the job ends at --start-timeout, naming the ranks and hosts.
# The fake agent answers the reachability check, runs daemons for other hosts here, and hangs
# for "slow" (15 s, then it ends by itself).
printf '#!/bin/sh\nhost=$1; shift\n[ "$*" = true ] && exit 0\n[ "$host" = slow ] && exec sleep 15\nexec sh -c "$*"\n' >"$T/agent"
chmod +x "$T/agent"
start=$(date +%s%3N)
timeout 60 "$O" -np 2 -H fast,slow --rsh-agent "$T/agent" --start-timeout 3 true >"$T/out" 2>"$T/err"
rc=$?
took=$(( $(date +%s%3N) - start ))
[ "$rc" -eq 1 ] || fail "start timeout: status $rc, expected 1"
grep -qx "overlaprun: job failed: ranks 0 (fast), 1 (slow) did not start within 3 s (--start-timeout)" "$T/err" ||
  fail "start timeout message: $(cat "$T/err")"
[ "$took" -lt 10000 ] || fail "start timeout took $took ms"

# Interrupted by the user (here timeout(1)): stops everything, says so, and blames no rank.
timeout 3 "$O" -np 2 sleep 29.5 >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 124 ] || fail "interrupted job: timeout(1) status $rc"
grep -qx "overlaprun: job stopped: overlaprun received SIGTERM and passed it to mpirun" "$T/err" ||
  fail "interrupted job message: $(cat "$T/err")"
! grep -q "job failed" "$T/err" || fail "interrupted job blamed a rank: $(cat "$T/err")"

# The rank wrapper on its own.
wrapper() { OMPI_COMM_WORLD_RANK=3 timeout 30 "$O" --rank-wrapper -- "$@" 2>"$T/err"; }
report_re() { echo "^@@overlaprun-rank-end@@ rank=3 host=$(hostname) pid=[0-9]* how=$1 code=$2 end_ms=[0-9]* stopped=$3$"; }
wrapper sh -c 'exit 0'; rc=$?
[ "$rc" -eq 0 ] && [ "$(cat "$T/err")" = "@@overlaprun-rank-start@@ rank=3" ] ||
  fail "wrapper success: status $rc, stderr '$(cat "$T/err")'"
start=$(date +%s%3N)
wrapper sh -c 'exit 9'; rc=$?
took=$(( $(date +%s%3N) - start ))
[ "$rc" -eq 9 ] && grep -q "$(report_re exit 9 0)" "$T/err" || fail "wrapper exit: status $rc, '$(cat "$T/err")'"
# After a failure the wrapper lingers for the peer grace (default 2 s) so that mpirun's abort
# does not cut off the other ranks' own errors; --peer-grace 0 ends at once.
[ "$took" -ge 1900 ] || fail "wrapper ended $took ms after its program failed, before the 2 s peer grace"
start=$(date +%s%3N)
OMPI_COMM_WORLD_RANK=3 timeout 30 "$O" --rank-wrapper --peer-grace 0 -- sh -c 'exit 9' 2>"$T/err"; rc=$?
took=$(( $(date +%s%3N) - start ))
[ "$rc" -eq 9 ] && [ "$took" -lt 1500 ] || fail "wrapper --peer-grace 0: status $rc after $took ms"
# The report is written before the grace, and mpirun's SIGTERM ends the grace at once.
OMPI_COMM_WORLD_RANK=3 "$O" --rank-wrapper --peer-grace 30 -- sh -c 'exit 9' 2>"$T/err" &
pid=$!
for _ in $(seq 50); do grep -q "how=exit" "$T/err" && break; sleep 0.1; done
grep -q "$(report_re exit 9 0)" "$T/err" || fail "no report before the peer grace: '$(cat "$T/err")'"
start=$(date +%s%3N)
kill -TERM $pid
wait $pid
rc=$?
took=$(( $(date +%s%3N) - start ))
[ "$rc" -eq 9 ] && [ "$took" -lt 1000 ] || fail "wrapper in its peer grace: status $rc $took ms after SIGTERM"
wrapper sh -c 'kill -9 $$'; rc=$?
[ "$rc" -eq 137 ] && grep -q "$(report_re signal 9 0)" "$T/err" || fail "wrapper SIGKILL: status $rc, '$(cat "$T/err")'"
wrapper /no/such/program; rc=$?
[ "$rc" -eq 127 ] && grep -q "$(report_re exec 2 0)" "$T/err" || fail "wrapper exec failure: status $rc, '$(cat "$T/err")'"
# SIGTERM from mpirun goes to the program, and the end is marked as stopped by the launcher.
OMPI_COMM_WORLD_RANK=3 "$O" --rank-wrapper -- sleep 30 2>"$T/err" &
pid=$!
sleep 0.5
start=$(date +%s%3N)
kill -TERM $pid
wait $pid
rc=$?
took=$(( $(date +%s%3N) - start ))
[ "$rc" -eq 143 ] && grep -q "$(report_re signal 15 1)" "$T/err" || fail "wrapper SIGTERM: status $rc, '$(cat "$T/err")'"
[ "$took" -lt 1000 ] || fail "wrapper took $took ms to stop after SIGTERM"

[ "$failures" -eq 0 ] || { echo "$failures failures" >&2; exit 1; }
echo PASS
