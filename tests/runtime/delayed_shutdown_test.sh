#!/usr/bin/env bash
# Shutting down with delayed results still undelivered warns on that rank, naming the tensor and
# what it discards (runtime/planes/delay_line.h): nothing is dropped silently.
set -euo pipefail
binary=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HOME=${HOME:-/tmp}
# The Join case ends with delay 1, so each rank's last reduction is still undelivered.
log=$(timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 "$binary" "[join]" 2>&1)
echo "$log" | tail -5
for rank in 0 1; do
  want="overlap: rank $rank: shutdown discards the delayed updates of 'd.join': 1 reduced result(s) not yet delivered"
  if ! grep -qF "$want" <<<"$log"; then
    echo "FAIL: no warning: $want" >&2
    exit 1
  fi
done
echo PASS
