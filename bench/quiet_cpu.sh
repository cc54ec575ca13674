# Sourced by the bench drivers that share this 2-core machine (torch_side_by_side.sh,
# time_to_accuracy.sh): a run that starts while something else computes is slower for reasons that
# are not the system's. The caller sets max_busy (fraction) and quiet_wait (seconds) and defines
# note().
cpu_busy() {  # fraction of the last 2 s the CPUs were busy, from /proc/stat
  local a b
  a=$(head -1 /proc/stat); sleep 2; b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x); split(b, y); t = 0
    for (i = 2; i <= n; i++) t += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6]); printf "%.2f", (t > 0 ? 1 - idle / t : 0) }'
}
# Waits until the CPU has been mostly idle for 2 s, at most quiet_wait seconds; prints the busy
# fraction found last.
wait_quiet() {
  local waited=0 busy
  busy=$(cpu_busy)
  while awk -v b="$busy" -v m="$max_busy" 'BEGIN { exit !(b > m) }' && ((waited < quiet_wait)); do
    ((waited > 0)) || note "the CPU is ${busy} busy with other work; waiting up to ${quiet_wait} s for it to quiet down"
    sleep 8; waited=$((waited + 10))
    busy=$(cpu_busy)
  done
  echo "$busy"
}
