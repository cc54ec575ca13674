#!/usr/bin/env bash
# The namespace cluster: 4 hosts come up (twice: idempotent), ranks started by overlaprun land in
# 4 different network namespaces with their own hostnames and addresses and can allreduce over
# TCP; a downed link makes the host unreachable for the launcher's check; `down` leaves nothing;
# without root the script refuses. Needs root and iproute2.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-overlap}
CLUSTER=$R/tools/cluster/cluster.sh
OVERLAPRUN=$R/launcher/overlaprun
WHERE=$R/tests/cluster/where_am_i
LOG=${TEST_TMPDIR:-/tmp}/cluster_test.log

fail() { echo "FAIL: $*" >&2; exit 1; }

# One cluster per machine: tests that use it take this lock (see tests/cluster/BUILD).
exec 9>/tmp/overlap-cluster.lock
flock -w 300 9 || fail "another test held the cluster lock for 300 s"
trap '"$CLUSTER" down >/dev/null 2>&1 || true' EXIT

# Not root: one clear line, non-zero exit, nothing created.
# (A copy, since an unprivileged user cannot read Bazel's tree under /root.)
UNPRIV=$(mktemp -d /tmp/cluster_test.XXXXXX)
cp "$CLUSTER" "$UNPRIV/cluster.sh"
chmod -R a+rx "$UNPRIV"
if setpriv --reuid=65534 --regid=65534 --clear-groups "$UNPRIV/cluster.sh" up 2 2>"$LOG"; then
  fail "cluster.sh up succeeded without root"
fi
grep -qx "cluster.sh: up needs root (network namespaces, veth, tc); run it as root or with sudo" "$LOG" ||
  fail "no root message: $(cat "$LOG")"
rm -rf "$UNPRIV"

timeout 60 "$CLUSTER" up 4
timeout 60 "$CLUSTER" up 4 --rate 1gbit  # again, over the first: must replace, not fail
[ "$(ip netns list | grep -c '^ovl-')" -eq 6 ] || fail "expected 6 namespaces (sw, head, h1..h4): $(ip netns list)"
HOSTFILE=$("$CLUSTER" hostfile)
[ "$(cat "$HOSTFILE")" = $'h1 slots=1\nh2 slots=1\nh3 slots=1\nh4 slots=1' ] || fail "hostfile: $(cat "$HOSTFILE")"
ip netns exec ovl-h2 tc qdisc show dev eth0 | grep "tbf .*rate 1Gbit.* lat 100ms" >/dev/null ||
  fail "h2 has no 1gbit tbf with a 100 ms queue: $(ip netns exec ovl-h2 tc qdisc show dev eth0)"
# Private addresses only inside the namespaces: the machine's own namespace has none of them.
! ip -4 addr show | grep "10\.77\.0\." >/dev/null || fail "10.77.0.x leaked into the root namespace"

timeout 60 "$CLUSTER" exec "$OVERLAPRUN" -np 4 --hostfile "$HOSTFILE" --tcp-only \
  --network-interface 10.77.0.0/24 "$WHERE" >"$LOG"
cat "$LOG"
for i in 1 2 3 4; do
  grep -q "^rank=$((i - 1)) size=4 host=h$i ipv4=10.77.0.$i netns=[0-9]* allreduce=4$" "$LOG" ||
    fail "rank $((i - 1)) is not on h$i with 10.77.0.$i"
done
[ "$(grep -o 'netns=[0-9]*' "$LOG" | sort -u | wc -l)" -eq 4 ] || fail "ranks share a network namespace"
root_ns=$(stat -L -c %i /proc/self/ns/net)
! grep -q "netns=$root_ns " "$LOG" || fail "a rank ran in the machine's own namespace"

# A host whose link is down fails the launcher's reachability check in one line.
"$CLUSTER" link h3 down
if timeout 60 "$CLUSTER" exec "$OVERLAPRUN" -np 4 --hostfile "$HOSTFILE" "$WHERE" 2>"$LOG"; then
  fail "overlaprun launched onto a host with its link down"
fi
grep -qx "overlaprun: host h3 is not reachable through '.*cluster_rsh.sh': exit status 255: cluster_rsh.sh: host h3 is unreachable: its link is down" "$LOG" ||
  fail "unexpected message: $(cat "$LOG")"
"$CLUSTER" link h3 up

# Two slots per host: ranks fill h1 then h2, two to a namespace.
timeout 60 "$CLUSTER" up 2 --slots 2 >/dev/null 2>&1
[ "$(cat "$("$CLUSTER" hostfile)")" = $'h1 slots=2\nh2 slots=2' ] || fail "--slots 2 hostfile"
timeout 60 "$CLUSTER" exec "$OVERLAPRUN" -np 4 --hostfile "$("$CLUSTER" hostfile)" --tcp-only "$WHERE" >"$LOG"
for r in 0 1; do grep -q "^rank=$r size=4 host=h1 ipv4=10.77.0.1 " "$LOG" || fail "rank $r not on h1: $(cat "$LOG")"; done
for r in 2 3; do grep -q "^rank=$r size=4 host=h2 ipv4=10.77.0.2 " "$LOG" || fail "rank $r not on h2: $(cat "$LOG")"; done
# --queue-ms sets both ends' tbf latency; a bad value is refused in one line.
timeout 60 "$CLUSTER" up 2 --rate 250mbit --queue-ms 20 >/dev/null 2>&1
for q in "ovl-h1 eth0" "ovl-sw p1" "ovl-sw p2"; do
  ip netns exec ${q% *} tc qdisc show dev ${q#* } | grep "tbf .*rate 250Mbit.* lat 20ms" >/dev/null ||
    fail "$q: no 250mbit tbf with a 20 ms queue: $(ip netns exec ${q% *} tc qdisc show dev ${q#* })"
done
"$CLUSTER" up 2 --rate 250mbit --queue-ms 0 2>"$LOG" && fail "--queue-ms 0 accepted"
grep -qx "cluster.sh: --queue-ms needs milliseconds 1..10000, got '0'" "$LOG" || fail "--queue-ms 0 message: $(cat "$LOG")"
"$CLUSTER" up 2 --slots 0 2>"$LOG" && fail "--slots 0 accepted"
grep -qx "cluster.sh: --slots needs a positive integer, got '0'" "$LOG" || fail "--slots 0 message: $(cat "$LOG")"

timeout 60 "$CLUSTER" down
! ip netns list | grep '^ovl-' >/dev/null || fail "namespaces left after down: $(ip netns list)"
[ ! -e /etc/netns/ovl-h1 ] || fail "/etc/netns/ovl-h1 left after down"
"$CLUSTER" hostfile 2>/dev/null && fail "hostfile still reported after down"
echo PASS
