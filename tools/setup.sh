#!/usr/bin/env bash
# Installs what overlap needs to build and test on Debian 12, skipping what is already there.
set -euo pipefail
PKGS=(bazel-bootstrap bazel-rules-java openmpi-bin libopenmpi-dev libabsl-dev libspdlog-dev
      libfmt-dev catch2 libeigen3-dev nlohmann-json3-dev zlib1g-dev dataset-fashion-mnist iproute2 nftables
      python3 python3-pip python3-dev clang clang-tidy libclang-rt-dev
      python3-numpy python3-matplotlib)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "overlap setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python side: torch, numpy, pytest and wheel for overlap.torch and its tests (cloudpickle for
# overlap.run's tests of lambdas), tensorflow-cpu for
# overlap.tensorflow (the newest release; the adapter supports 2.16 and later) and mpi4py, into the
# python3 on PATH (or OVERLAP_PYTHON). Debian's own python3 refuses pip without
# --break-system-packages. Already installed packages are found by a quick metadata lookup, not by
# importing them (importing tensorflow takes seconds).
PY=${OVERLAP_PYTHON:-python3}
pip_install() {
  "$PY" -m pip install -q "$@" 2>/dev/null || "$PY" -m pip install -q --break-system-packages "$@"
}
if ! "$PY" -c "import torch, numpy, pytest, wheel, cloudpickle" 2>/dev/null; then
  echo "overlap setup: installing torch, numpy, pytest, wheel and cloudpickle for $PY (pip)" >&2
  pip_install torch numpy pytest wheel cloudpickle
fi
has_tensorflow='
import importlib.metadata as m
def installed(name):
    try:
        return bool(m.version(name))
    except m.PackageNotFoundError:
        return False
raise SystemExit(0 if installed("tensorflow-cpu") or installed("tensorflow") else 1)'
if ! "$PY" -c "$has_tensorflow" 2>/dev/null; then
  echo "overlap setup: installing tensorflow-cpu for $PY (pip)" >&2
  pip_install tensorflow-cpu
fi
# mpi4py, for process sets made from MPI communicators (hvd.ProcessSet(comm)). Its binary wheel
# (4.x) bundles no MPI: it loads the system's libmpi.so.40, the Open MPI liboverlap.so uses, and
# installs in seconds where a source build takes 5-10 minutes of CI. Checked: the library it
# loaded must be Open MPI.
if ! "$PY" -c 'import importlib.metadata as m; m.version("mpi4py")' 2>/dev/null; then
  echo "overlap setup: installing mpi4py for $PY (pip)" >&2
  pip_install mpi4py
fi
if ! "$PY" -c 'from mpi4py import MPI; assert "Open MPI" in MPI.Get_library_version()' 2>/dev/null; then
  echo "overlap setup: warning: mpi4py does not load the system Open MPI; the mpi4py process-set" \
    "tests will fail (pip uninstall mpi4py; pip install --no-binary=mpi4py mpi4py)" >&2
fi
