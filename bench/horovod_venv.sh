#!/usr/bin/env bash
# The Horovod the side-by-side compares against: horovod.torch 0.28.1 from PyPI, built against
# torch 2.0.1 with MPI, in its own virtual environment. Creates it on first use (about 2 minutes
# of build plus the torch download) and prints the venv's python on stdout.
#
#   bench/horovod_venv.sh [--venv DIR]     (default ~/.cache/overlap/horovod-venv)
#
# Why these pins: Horovod 0.28.1 (June 2023) is the last release and builds only against
# torch <= 2.0; torch 2.0.1's build hooks import pkg_resources, which setuptools >= 70 dropped, so
# the build runs with setuptools < 70 and --no-build-isolation (an isolated build would get the
# newest setuptools and no torch at all). numpy < 2 because torch 2.0.1 was compiled against 1.x.
# Python 3.11 is the newest Python torch 2.0.1 has wheels for. Only MPI and PyTorch are built:
# the comparison is against Horovod over MPI, which is also what overlap's CPU data path uses.
set -euo pipefail

die() { echo "horovod_venv.sh: $*" >&2; exit 1; }

venv=${HOME}/.cache/overlap/horovod-venv
while (($#)); do
  case $1 in
    --venv) venv=${2:-}; shift 2 || die "--venv needs a directory" ;;
    -h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

check() {
  "$venv/bin/python" - <<'EOF' >/dev/null 2>&1
import horovod, torch, horovod.torch as hvd
assert horovod.__version__ == "0.28.1" and torch.__version__.startswith("2.0.1"), (horovod.__version__, torch.__version__)
assert hvd.mpi_built(), "horovod was built without MPI"
EOF
}

if [ -x "$venv/bin/python" ] && check; then
  echo "$venv/bin/python"
  exit 0
fi

python311=""
for p in python3.11 /root/.pyenv/versions/3.11*/bin/python3.11; do
  if command -v "$p" >/dev/null 2>&1; then python311=$(command -v "$p"); break; fi
done
[ -n "$python311" ] || die "needs python3.11 (torch 2.0.1 has no wheels for newer Python); install it or pyenv install 3.11"
command -v mpicc >/dev/null || die "needs Open MPI's mpicc (apt-get install libopenmpi-dev openmpi-bin)"
command -v g++ >/dev/null || die "needs g++ (apt-get install g++)"

echo "horovod_venv.sh: creating $venv with $python311 (torch 2.0.1, horovod 0.28.1; a few minutes)" >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python311" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q "setuptools<70" wheel "numpy<2" "cmake>=3.13,<4" >&2
"${pip[@]}" install -q "torch==2.0.1" >&2
HOROVOD_WITH_MPI=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
  HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI \
  "${pip[@]}" install --no-build-isolation --no-cache-dir "horovod==0.28.1" >&2 ||
  die "building horovod 0.28.1 failed (the pip output above says why)"
check || die "$venv was built but 'import horovod.torch' with MPI fails: run $venv/bin/python -c 'import horovod.torch'"
echo "$venv/bin/python"
