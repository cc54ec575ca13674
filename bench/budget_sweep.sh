#!/usr/bin/env bash
# deft's convergence budget, swept on real training (issue 33, "The convergence budget, checked"):
# the Fashion-MNIST CNN of bench/time_to_accuracy.sh on the 4-host namespace cluster, per seed
# once synchronously (ddp, the target's run, and overlap's observed plan) and once per budget under
# deft with staleness S and update periods up to 4 (OVERLAP_BUDGET=B; -1: the planner's bound
# max(S, 1.5); the runtime's default is 0),
# then the accuracy lost against the budget, averaged over the seeds, as a table and a plot. Needs
# root.
#
#   bench/budget_sweep.sh [--budgets 0,0.125,0.25,0.5,0.75,1,-1] [--seeds 42] [--staleness 1]
#       [--train-limit 30720] [--epochs 2] [--out FILE] [--no-build] [--quiet-wait SECONDS]
#
# Defaults: 2 epochs of 30,720 images (240 steps of 4 x 64), evaluated on all 10,000 test images;
# about a minute per row and seed here. Output: the raw runs in --out (default
# docs/data/budget_sweep_runs.jsonl), then bench/budget_sweep_report.py's table (stdout and, without
# --out, docs/time_to_accuracy.md's "Convergence budget") and plot (docs/img/budget_sweep.png).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "budget_sweep.sh: $*" >&2; exit 1; }
command_line="bench/budget_sweep.sh $*"
budgets=0,0.125,0.25,0.5,0.75,1,-1 seeds=42 staleness=1 limit=30720 epochs=2 out="" extra=() quiet=10
while (($#)); do
  case $1 in
    --budgets) budgets=${2:-}; shift 2 || die "--budgets needs a list" ;;
    --seeds) seeds=${2:-}; shift 2 || die "--seeds needs a list" ;;
    --staleness) staleness=${2:-}; shift 2 || die "--staleness needs a number" ;;
    --train-limit) limit=${2:-}; shift 2 || die "--train-limit needs a number" ;;
    --epochs) epochs=${2:-}; shift 2 || die "--epochs needs a number" ;;
    --out) out=${2:-}; shift 2 || die "--out needs a file" ;;
    --no-build) extra+=(--no-build); shift ;;
    --quiet-wait) quiet=${2:-}; shift 2 || die "--quiet-wait needs seconds" ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $staleness =~ ^[1-9]$ ]] || die "--staleness must be 1..9, got '$staleness'"
rows=ddp,overlap:observed
for b in ${budgets//,/ }; do
  [[ $b =~ ^(-1|[0-9]+(\.[0-9]+)?)$ ]] || die "--budgets: '$b' is not a number >= 0 or -1"
  if [ "$b" = -1 ]; then rows+=",overlap:deft-s$staleness"; else rows+=",overlap:deft-s$staleness@$b"; fi
done
for s in ${seeds//,/ }; do [[ $s =~ ^[0-9]+$ ]] || die "--seeds: '$s' is not a whole number"; done
doc_args=()
if [ -z "$out" ]; then
  out=$ROOT/docs/data/budget_sweep_runs.jsonl
  doc_args=(--doc "$ROOT/docs/time_to_accuracy.md" --plot "$ROOT/docs/img/budget_sweep.png")
else
  doc_args=(--plot "${out%.jsonl}.png")
fi
: >"$out"
for s in ${seeds//,/ }; do
  "$ROOT/bench/time_to_accuracy.sh" --quick --tasks fmnist --rows "$rows" --epochs "$epochs" \
    --fmnist-limit "$limit" --test-limit 10000 --quiet-wait "$quiet" --seed "$s" \
    --out "$out.seed$s" "${extra[@]}" >&2
  cat "$out.seed$s" >>"$out" && rm -f "$out.seed$s" "$out.seed$s.lines.jsonl" "$out.seed$s.png"
  extra=(--no-build)  # built once
done
REPORT_PY=python3  # matplotlib for the plot: the Debian one where the default python lacks it
if ! python3 -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  REPORT_PY=/usr/bin/python3
fi
"$REPORT_PY" "$ROOT/bench/budget_sweep_report.py" "$out" "${doc_args[@]}" --command "$command_line"
