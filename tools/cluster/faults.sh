#!/usr/bin/env bash
# Network faults on one host's link of the namespace cluster (tools/cluster/cluster.sh).
#
#   faults.sh drop HOST PERCENT            drop PERCENT% (0.01..100) of the frames HOST sends and,
#                                          independently, of those it receives, at the switch
#   faults.sh flap HOST PERIOD_S [DOWN_S]  take HOST's link down now for DOWN_S seconds (default
#                                          half the period), and again every PERIOD_S seconds, in
#                                          the background, until cleared
#   faults.sh rate HOST RATE               cap HOST's link at RATE (tc tbf, both directions)
#   faults.sh clear [HOST]                 remove every fault from HOST (default: every host)
#   faults.sh list                         the faults in force, with the drop counters
#
# Drops are nftables rules in the switch namespace (a bridge-family table per host, one rule per
# direction, `numgen random mod 10000 < P*100`), so a dropped frame is lost on the wire: neither
# end is told, as with a lossy cable (a drop in the host's own output hook is reported to the
# local sender: EPERM from sendmsg for UDP and ping). Only the cluster's namespaces are touched;
# `cluster.sh down` removes the tables and qdiscs with the namespaces, and a flap loop stops by
# itself once its link is gone.
# Several faults may be combined on one host; adding one of a kind replaces the earlier one.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin  # ip, tc and nft live here; test runners often leave them out

PREFIX=ovl
DIR=${OVERLAP_CLUSTER_DIR:-/tmp/overlap-cluster}
STATE=$DIR/faults

die() { echo "faults.sh: $*" >&2; exit 1; }

need_cluster() {
  [ "$(id -u)" -eq 0 ] || die "needs root (nftables, tc and links inside the cluster's namespaces)"
  [ -f "$DIR/hostfile" ] || die "no cluster is up (no $DIR/hostfile); run: tools/cluster/cluster.sh up K"
}

# Checks HOST (hI) and prints I.
host_index() {
  local host=$1
  [[ $host =~ ^h[1-9][0-9]*$ ]] || die "a host name like h2 is needed, got '$host'"
  ip -n ${PREFIX}-sw link show "p${host#h}" >/dev/null 2>&1 || die "host $host is not in the cluster"
  echo "${host#h}"
}

table_of() { echo "ovl_fault_$1"; }

cmd_drop() {
  local host=${1:-} percent=${2:-} i bp table
  i=$(host_index "$host")
  [[ $percent =~ ^[0-9]+(\.[0-9]{1,2})?$ ]] || die "drop needs a percentage like 1 or 0.5, got '$percent'"
  bp=$(awk -v p="$percent" 'BEGIN { printf "%d", p * 100 + 0.5 }')
  ((bp >= 1 && bp <= 10000)) || die "drop needs a percentage in 0.01..100, got '$percent'"
  command -v nft >/dev/null || die "the 'nft' command is missing; install nftables"
  table=$(table_of "$host")
  # The bridge family's forward hook sees every frame crossing the switch, before the port's
  # qdisc, whatever the protocol (ARP included, as a bad cable would).
  ip netns exec ${PREFIX}-sw nft -f - <<EOF
table bridge $table
delete table bridge $table
table bridge $table {
  chain forward {
    type filter hook forward priority 0; policy accept;
    iifname "p$i" numgen random mod 10000 < $bp counter drop comment "from $host"
    oifname "p$i" numgen random mod 10000 < $bp counter drop comment "to $host"
  }
}
EOF
  mkdir -p "$STATE"
  echo "$percent" >"$STATE/$host.drop"
  segment_frames 1
}

# veth passes TCP's segmentation-offload frames (up to 64 KiB) as one frame, so a drop rule would
# lose 40 packets at a time. While a drop is in force every node sends one MSS per frame, as a
# real NIC puts it on the wire (open connections follow at once: 10 MB on a connection opened
# before the change arrived in 7,253 frames); 65535 is the kernel's default again.
segment_frames() {
  local ns
  for ns in ${PREFIX}-head $(ip netns list | awk '{print $1}' | grep -E "^${PREFIX}-h[0-9]+$"); do
    ip -n "$ns" link set eth0 gso_max_segs "$1"
  done
}

cmd_flap() {
  local host=${1:-} period=${2:-} down=${3:-} i up_s
  i=$(host_index "$host")
  [[ $period =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "flap needs a period in seconds, got '$period'"
  [ -n "$down" ] || down=$(awk -v p="$period" 'BEGIN { print p / 2 }')
  [[ $down =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "flap needs a down time in seconds, got '$down'"
  up_s=$(awk -v p="$period" -v d="$down" 'BEGIN { if (d > 0 && d < p) print p - d }')
  [ -n "$up_s" ] || die "flap needs 0 < DOWN_S ($down) < PERIOD_S ($period)"
  stop_flap "$host"
  mkdir -p "$STATE"
  # The loop runs outside the cluster's namespaces; it ends when its link (or the whole cluster)
  # is gone, and on SIGTERM it leaves the link up.
  setsid bash -c '
    ns=$1 port=$2 up_s=$3 down_s=$4
    trap "ip -n $ns link set $port up 2>/dev/null; exit 0" TERM INT
    while ip -n "$ns" link set "$port" down 2>/dev/null; do
      echo "$(date +%s%3N) down" >>"$5"
      sleep "$down_s" & wait $!
      ip -n "$ns" link set "$port" up 2>/dev/null || exit 0
      echo "$(date +%s%3N) up" >>"$5"
      sleep "$up_s" & wait $!
    done' flap "${PREFIX}-sw" "p$i" "$up_s" "$down" "$STATE/$host.flap.log" </dev/null >/dev/null 2>&1 &
  echo "$!" >"$STATE/$host.flap.pid"
  echo "$period $down" >"$STATE/$host.flap"
}

stop_flap() {
  local host=$1 pid
  [ -f "$STATE/$host.flap.pid" ] || return 0
  pid=$(cat "$STATE/$host.flap.pid")
  # Only our own loop: the pid must still be a bash running the flap script.
  if [ -r "/proc/$pid/cmdline" ] && tr '\0\n' '  ' <"/proc/$pid/cmdline" | grep "^bash -c .* flap ${PREFIX}-sw p${host#h} " >/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  ip -n ${PREFIX}-sw link set "p${host#h}" up 2>/dev/null || true
  rm -f "$STATE/$host.flap.pid" "$STATE/$host.flap"
}

# tbf on the egress of both ends of the link, as cluster.sh up --rate does.
cap() {
  local ns=$1 dev=$2 rate=$3 bits burst
  bits=$(rate_bits "$rate")
  burst=$((bits / 8 / 100))
  ((burst >= 65536)) || burst=65536
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
}

rate_bits() {
  local r=${1,,} n unit
  n=${r%%[a-z]*}; unit=${r#"$n"}
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "rate '$1' is not a tc rate like 10mbit"
  case $unit in
    kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;; gbit) echo $((n * 1000000000)) ;;
    *) die "rate '$1': the unit must be kbit, mbit or gbit" ;;
  esac
}

cmd_rate() {
  local host=${1:-} rate=${2:-} i
  i=$(host_index "$host")
  rate_bits "$rate" >/dev/null
  cap "${PREFIX}-$host" eth0 "$rate"
  cap ${PREFIX}-sw "p$i" "$rate"
  mkdir -p "$STATE"
  echo "$rate" >"$STATE/$host.rate"
}

# Back to the cluster's own rate (cluster.sh up --rate), or no qdisc when it had none.
restore_rate() {
  local host=$1 i=${1#h} rate
  [ -f "$STATE/$host.rate" ] || return 0
  rate=$(cat "$DIR/rate" 2>/dev/null || echo uncapped)
  if [ "$rate" = uncapped ]; then
    ip netns exec "${PREFIX}-$host" tc qdisc del dev eth0 root 2>/dev/null || true
    ip netns exec ${PREFIX}-sw tc qdisc del dev "p$i" root 2>/dev/null || true
  else
    cap "${PREFIX}-$host" eth0 "$rate"
    cap ${PREFIX}-sw "p$i" "$rate"
  fi
  rm -f "$STATE/$host.rate"
}

clear_host() {
  local host=$1
  stop_flap "$host"
  if [ -f "$STATE/$host.drop" ]; then
    ip netns exec ${PREFIX}-sw nft delete table bridge "$(table_of "$host")" 2>/dev/null || true
    rm -f "$STATE/$host.drop"
    compgen -G "$STATE/*.drop" >/dev/null || segment_frames 65535
  fi
  restore_rate "$host"
}

cmd_clear() {
  local host=${1:-} h
  if [ -n "$host" ]; then
    host_index "$host" >/dev/null
    clear_host "$host"
    return
  fi
  for h in $(awk '{print $1}' "$DIR/hostfile"); do clear_host "$h"; done
}

cmd_list() {
  local h f
  for h in $(awk '{print $1}' "$DIR/hostfile"); do
    for f in drop flap rate; do
      [ -f "$STATE/$h.$f" ] && echo "$h $f $(cat "$STATE/$h.$f")"
    done
    if ip netns exec ${PREFIX}-sw nft list table bridge "$(table_of "$h")" >/dev/null 2>&1; then
      ip netns exec ${PREFIX}-sw nft list table bridge "$(table_of "$h")" |
        grep -o 'counter packets [0-9]* bytes [0-9]* drop comment "[^"]*"' |
        sed "s/^counter packets \([0-9]*\) bytes [0-9]* drop comment \"\(.*\)\"/$h dropped \1 frames \2/"
    fi
  done
  return 0
}

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    drop | flap | rate | clear | list) need_cluster; "cmd_$cmd" "$@" ;;
    *) die "usage: faults.sh drop HOST PERCENT | flap HOST PERIOD_S [DOWN_S] | rate HOST RATE | clear [HOST] | list" ;;
  esac
}

main "$@"
