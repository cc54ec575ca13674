#!/usr/bin/env bash
# Fashion-MNIST (examples/mnist_mlp.cc, 4 ranks) on the 4-host namespace cluster under the plan
# deft makes there with delayed updates (staleness 1, update periods up to 4), against the
# synchronous observed plan on the same cluster: issue 10's accuracy check with the planner's own
# plan instead of one uniform schedule. The links are capped (--rate, default 100mbit) so that
# communication dominates and deft has reason to delay. Needs root. Prints one markdown row per
# run with the plan the runtime adopted (buckets, delayed, with a period). With
# --staleness-correction on the example corrects momentum / beta1 for the adopted plan's mean
# staleness (Stats().plan_mean_staleness). --sync-steps N keeps deft's runs synchronous for their
# first N steps (OVERLAP_PLAN_AFTER_STEPS=N: negotiated, so no plan is made before step N), a
# synchronous warm-up before the delayed plan; 469 steps are one epoch at the default batch.
#
#   tools/deft_plan_accuracy.sh [--rate 100mbit] [--epochs 4] [--optimizers "sgd adam adamw"]
#                               [--runs "observed|off deft|off deft|on"] [--sync-steps N]
# The first run of each optimizer is the baseline of its "vs synchronous" column.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=$ROOT/tools/cluster/cluster.sh
die() { echo "deft_plan_accuracy.sh: $*" >&2; exit 1; }
rate=100mbit epochs=4 optimizers="sgd adam adamw" runs="observed|off deft|off deft|on" sync_steps=""
while (($#)); do
  case $1 in
    --rate) rate=${2:-}; shift 2 || die "--rate needs a value" ;;
    --epochs) epochs=${2:-}; shift 2 || die "--epochs needs a number" ;;
    --optimizers) optimizers=${2:-}; shift 2 || die "--optimizers needs a list" ;;
    --runs) runs=${2:-}; shift 2 || die "--runs needs a list" ;;
    --sync-steps) sync_steps=${2:-}; shift 2 || die "--sync-steps needs a number" ;;
    *) die "unknown option '$1'" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (it brings up the namespace cluster)"
(cd "$ROOT" && bazel build //examples:mnist_mlp //launcher:overlaprun >&2) || die "bazel build failed"
BAZEL_BIN=$(cd "$ROOT" && bazel info bazel-bin 2>/dev/null)
BIN=$(mktemp -d /tmp/deft_plan_accuracy.XXXXXX)
cp "$BAZEL_BIN/examples/mnist_mlp" "$BAZEL_BIN/launcher/overlaprun" "$BIN/"
chmod -R a+rx "$BIN"
# shellcheck source=cluster/session.sh
source "$ROOT/tools/cluster/session.sh"
cluster_session "$rate"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
declare -A flags=([sgd]="--optimizer sgd" [adam]="--optimizer adam --lr 0.001"
                  [adamw]="--optimizer adamw --lr 0.001 --weight-decay 0.01")
echo "| optimizer | plan | correction | test accuracy | vs synchronous | plan adopted |"
echo "|---|---|---|---:|---:|---|"
for o in $optimizers; do
  base=""
  for run in $runs; do
    planner=${run%%|*} correction=${run#*|}
    env_args=(OVERLAP_PLANNER="$planner" OVERLAP_LOG_LEVEL=info)
    [ "$planner" != deft ] || env_args+=(OVERLAP_STALENESS=1 OVERLAP_MAX_PERIOD=4 OVERLAP_BUDGET=-1)
    [ "$planner" != deft ] || [ -z "$sync_steps" ] || env_args+=(OVERLAP_PLAN_AFTER_STEPS="$sync_steps")
    # shellcheck disable=SC2086  # flags are words
    out=$(env "${env_args[@]}" timeout -k 10 1800 "$CLUSTER" exec "$BIN/overlaprun" -np 4 \
          --hostfile "$HOSTFILE" --tcp-only -- "$BIN/mnist_mlp" --epochs "$epochs" --seed 42 \
          ${flags[$o]} --staleness-correction "$correction" 2>&1) || true
    accuracy=$(grep '^epoch' <<<"$out" | tail -1 | grep -o 'test accuracy [0-9.]*%' | grep -o '[0-9.]*' || true)
    adopted=$(grep -o 'rank 0: step [0-9]*: adopted the [a-z:]* plan ([^)]*)' <<<"$out" | head -1 || true)
    [ -n "$accuracy" ] || { echo "| $o | $planner | $correction | FAILED: $(tail -1 <<<"$out") | | |"; continue; }
    [ -n "$base" ] || base=$accuracy
    delta=$(python3 -c "print(f'{$accuracy - $base:+.2f}')")
    echo "| $o | $planner | $correction | $accuracy% | $delta | ${adopted:-none} |"
  done
done
