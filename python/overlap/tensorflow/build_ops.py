"""Compiles overlap's TensorFlow op library against the TensorFlow that is installed.

The op library is the thin framework layer of overlap.tensorflow: asynchronous kernels
(native/*.cc) that call the one core library, liboverlap.so, through its C ABI
(runtime/c_api.h). It has no copy of the core: its references to the C ABI stay undefined
and resolve, when TensorFlow loads it, to the liboverlap.so that overlap._core has already
loaded with RTLD_GLOBAL.

It must match the TensorFlow it is loaded into (headers, C++ ABI flags), so it is compiled on the
user's machine: by ``pip install .`` when TensorFlow is importable while the package builds (see
setup.py), otherwise on the first ``import overlap.tensorflow``, into a cache directory. Either
way the library is keyed by key(): a hash of the sources, the TensorFlow version and its compile
and link flags, and the compiler; a library whose key differs is never loaded.

This module imports nothing from overlap, so setup.py can load it from the source tree.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

LIBRARY_NAME = "liboverlap_tf_ops.so"
KEY_NAME = LIBRARY_NAME + ".key"
NATIVE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")
SOURCES = ["ops.cc", "kernels.cc", "pending.cc", "step_markers.cc", "waiter.cc"]
HEADERS = ["core_tensor.h", "pending.h", "waiter.h"]


def c_api_header_dir():
    """The folder holding c_api.h: the copy pip installs in the package (overlap/include), or
    runtime/ of the source tree this package sits in (python/overlap/tensorflow)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = [os.path.join(package, "include"),
                  os.path.join(os.path.dirname(os.path.dirname(package)), "runtime")]
    for folder in candidates:
        if os.path.exists(os.path.join(folder, "c_api.h")):
            return folder
    raise RuntimeError("overlap: runtime/c_api.h not found (looked in %s); reinstall the package"
                       % ", ".join(candidates))


def compiler():
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise RuntimeError("overlap: no C++ compiler found (set CXX, or install g++) to compile "
                       "overlap's TensorFlow op library")


def _tf_flags():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.__version__, tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def key():
    """What the library must be rebuilt for: sources, c_api.h, TensorFlow, flags, compiler."""
    version, cflags, lflags = _tf_flags()
    digest = hashlib.sha256()
    for name in SOURCES + HEADERS:
        with open(os.path.join(NATIVE_DIR, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    with open(os.path.join(c_api_header_dir(), "c_api.h"), "rb") as f:
        digest.update(f.read())
    cxx = compiler()
    cxx_version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    digest.update("\0".join([version, " ".join(cflags), " ".join(lflags), cxx,
                             cxx_version.splitlines()[0] if cxx_version else ""]).encode())
    return "tf%s-%s" % (version, digest.hexdigest()[:16])


def build(out_dir, library_key=None):
    """Compiles the library into out_dir (LIBRARY_NAME, with KEY_NAME beside it) and returns its
    path. Writes through a temporary file and renames, so a concurrent reader never sees half a
    library. Raises RuntimeError with the compiler's output on failure."""
    library_key = library_key or key()
    _, cflags, lflags = _tf_flags()
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, LIBRARY_NAME)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=out_dir)
    os.close(fd)
    command = ([compiler(), "-O2", "-shared", "-fPIC", "-w", "-I" + NATIVE_DIR,
                "-I" + c_api_header_dir()] + [os.path.join(NATIVE_DIR, s) for s in SOURCES] +
               cflags + ["-o", tmp] + lflags)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError("overlap: compiling the TensorFlow op library failed:\n  %s\n%s" %
                           (" ".join(command), (result.stderr or result.stdout)[-4000:]))
    os.replace(tmp, target)
    with open(os.path.join(out_dir, KEY_NAME), "w") as f:
        f.write(library_key + "\n")
    return target


def main():
    """python build_ops.py OUT_DIR: compile into OUT_DIR (setup.py and tests use it)."""
    if len(sys.argv) != 2:
        raise SystemExit("usage: build_ops.py OUT_DIR")
    print(build(sys.argv[1]))


if __name__ == "__main__":
    main()
