#!/usr/bin/env bash
# Trains the Fashion-MNIST demo on N ranks (default 4) once per compressor, with the same seed and
# epochs, and prints a markdown table of final test accuracy, its difference from uncompressed
# training, and time per step. Used for docs/compression.md.
#   tools/compression_accuracy.sh [ranks] [epochs]
# Each compressor runs twice: as is, and with the training recipe docs/compression.md describes
# (a warm-up epoch uncompressed; DGC momentum correction, with factor masking for the
# sparsifiers). OVERLAP_BIN=<bazel-bin directory> skips the build and uses binaries built there.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-4}
epochs=${2:-4}
bin=${OVERLAP_BIN:-}
if [ -z "$bin" ]; then
  bazel build //examples:mnist_mlp //launcher:overlaprun >/dev/null 2>&1
  bin=$(bazel info bazel-bin 2>/dev/null)
fi
warm="--warmup-epochs 1"
# "spec|demo flags"
runs=(
  "none|"
  "fp16|"
  "bf16|"
  "covap:R=4|"
  "randomk:ratio=0.25|"
  "topk:ratio=0.01|"
  "efsign|"
  "powersgd:rank=4|"
  "covap:R=4|$warm --momentum-correction masked"
  "randomk:ratio=0.25|$warm --momentum-correction masked"
  "topk:ratio=0.01|$warm --momentum-correction masked"
  "efsign|$warm --momentum-correction on"
  "powersgd:rank=4|$warm"
)
echo "| compressor | demo flags | test accuracy after ${epochs} epochs | vs none (points) | ms per step | seconds per epoch |"
echo "|---|---|---|---|---|---|"
base=""
for run in "${runs[@]}"; do
  spec=${run%%|*}
  flags=${run#*|}
  # shellcheck disable=SC2086  # flags are words
  out=$("$bin/launcher/overlaprun" -np "$ranks" -- "$bin/examples/mnist_mlp" --epochs "$epochs" \
        --compression "$spec" $flags 2>&1) || true
  last=$(grep '^epoch' <<<"$out" | tail -1)
  if [ -z "$last" ]; then
    echo "| $spec | ${flags:-(none)} | failed: $(tail -1 <<<"$out") | | | |"
    continue
  fi
  acc=$(sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/' <<<"$last")
  [ -z "$base" ] && base=$acc
  # A step is one global batch of 128 images. ms per step is the median over the compressed
  # epochs (warm-up epochs excluded), so one epoch slowed by other load does not skew it.
  skip=0
  [[ $flags == *--warmup-epochs* ]] && skip=$(sed -E 's/.*--warmup-epochs ([0-9]+).*/\1/' <<<"$flags")
  ms=$(grep '^epoch' <<<"$out" | sed -E 's/.* ([0-9]+) images\/s.*/\1/' | tail -n +"$((skip + 1))" |
       sort -n | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                                         printf "%.2f", 128 * 1000 / m}')
  # Every epoch's wall time, so that an epoch the median leaves out stays visible.
  secs=$(grep '^epoch' <<<"$out" | sed -E 's/.*\(([0-9.]+) s\).*/\1/' | paste -sd' ')
  awk -v s="$spec" -v f="${flags:-(none)}" -v a="$acc" -v b="$base" -v ms="$ms" -v e="$secs" \
    'BEGIN {printf "| %s | %s | %.2f%% | %+.2f | %s | %s |\n", s, f, a, a - b, ms, e}'
done
