#!/usr/bin/env bash
# overlap.tensorflow's pytest suites (//tests/tensorflow/...) on TensorFlow 2.16, the oldest that
# docs/tensorflow.md claims (Keras 3 came with it), in a virtual environment of their own:
# tensorflow-cpu 2.16.2 and whatever Keras 3 pip picks for it, as a user installing that
# TensorFlow gets. The environment is made on first use (a 250 MB download) in
# ${OVERLAP_TF216_VENV:-$HOME/.cache/overlap/venv-tf216}. Not part of tools/test.sh, which tests
# the newest TensorFlow; docs/tensorflow.md records the last run.
#
#   tools/test_tf216.sh [extra bazel test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${OVERLAP_TF216_VENV:-$HOME/.cache/overlap/venv-tf216}
python=$venv/bin/python
if ! "$python" -c 'import tensorflow, pytest' 2>/dev/null; then
  echo "test_tf216.sh: creating $venv with tensorflow-cpu 2.16.2" >&2
  python3 -m venv "$venv"
  "$python" -m pip install -q --disable-pip-version-check "tensorflow-cpu==2.16.2" pytest >&2
fi
versions='import tensorflow as tf, keras, numpy
print("tensorflow", tf.__version__ + ", keras", keras.__version__ + ", numpy", numpy.__version__)'
echo "test_tf216.sh: $python ($("$python" -c "$versions" 2>/dev/null | tail -1))"
exec bazel test --test_env=OVERLAP_PYTHON="$python" //tests/tensorflow/... "$@"
