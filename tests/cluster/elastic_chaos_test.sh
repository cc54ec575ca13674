#!/usr/bin/env bash
# tools/chaos.sh --quick from the test's runfiles: an elastic job on 4 namespace hosts survives a
# killed rank, a host's link down for 20 s and a host leaving and rejoining discovery, with no
# committed step lost (tools/chaos.py checks it; docs/elastic.md has the numbers).
# Needs root, iproute2, and an interpreter with torch ($OVERLAP_PYTHON or python3).
set -euo pipefail
R=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-overlap}
export HOME=${HOME:-${TEST_TMPDIR:-/tmp}}
exec timeout -k 10 840 "$R/tools/chaos.sh" --root "$R" --bin "$R" --quick
