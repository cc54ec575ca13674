"""pip install . : builds the core library and the launcher with Bazel and installs them inside
the Python package `overlap` (overlap.torch, overlap.tensorflow), with an `overlaprun` command.

Needs what tools/setup.sh installs (Bazel, Open MPI, Abseil, spdlog); run it first on a fresh
machine. The build reuses Bazel's cache, so a second install takes seconds.

overlap.tensorflow's op library must be compiled against the TensorFlow it runs with. When
TensorFlow is importable while the package builds (`pip install --no-build-isolation .`), it is
compiled here, into the package; otherwise (pip's default isolated build cannot see the user's
TensorFlow) the first `import overlap.tensorflow` compiles it into a cache
(python/overlap/tensorflow/build_ops.py). The sources and runtime/c_api.h ship with the package
for that.
"""

import importlib.util
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
TARGETS = {"//runtime:liboverlap.so": "liboverlap.so", "//launcher:overlaprun": "bin/overlaprun"}


def built_files():
    """target -> built file. OVERLAP_PREBUILT_DIR (holding liboverlap.so and overlaprun) skips
    Bazel: the packaging test uses it, since it runs inside a Bazel build already."""
    prebuilt = os.environ.get("OVERLAP_PREBUILT_DIR")
    if prebuilt:
        return {t: os.path.join(prebuilt, os.path.basename(d)) for t, d in TARGETS.items()}
    if shutil.which("bazel") is None:
        raise SystemExit("overlap: bazel not found; run tools/setup.sh first (installs Bazel, "
                         "Open MPI and the libraries overlap builds against)")
    subprocess.check_call(["bazel", "build"] + list(TARGETS), cwd=ROOT)
    bazel_bin = subprocess.check_output(["bazel", "info", "bazel-bin"], cwd=ROOT,
                                        text=True).strip()
    return {t: os.path.join(bazel_bin, *t[2:].split(":")) for t in TARGETS}


def build_tf_ops(package_dir):
    """Compiles overlap.tensorflow's op library into the built package when TensorFlow is
    importable here; says why not otherwise."""
    if importlib.util.find_spec("tensorflow") is None:
        print("overlap: TensorFlow is not importable in this build environment; "
              "overlap.tensorflow compiles its op library on first import instead",
              file=sys.stderr)
        return
    path = os.path.join(ROOT, "python", "overlap", "tensorflow", "build_ops.py")
    spec = importlib.util.spec_from_file_location("overlap_build_ops", path)
    build_ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_ops)
    print("overlap: compiling the TensorFlow op library: %s" %
          build_ops.build(os.path.join(package_dir, "tensorflow")), file=sys.stderr)


class BuildWithBazel(build_py):
    def run(self):
        super().run()
        include = os.path.join(self.build_lib, "overlap", "include")
        os.makedirs(include, exist_ok=True)
        shutil.copyfile(os.path.join(ROOT, "runtime", "c_api.h"), os.path.join(include, "c_api.h"))
        build_tf_ops(os.path.join(self.build_lib, "overlap"))
        for target, built in built_files().items():
            dest = TARGETS[target]
            target_path = os.path.join(self.build_lib, "overlap", dest)
            os.makedirs(os.path.dirname(target_path), exist_ok=True)
            if os.path.exists(target_path):
                os.chmod(target_path, 0o755)
                os.remove(target_path)
            shutil.copyfile(built, target_path)
            os.chmod(target_path, 0o755)


class BinaryDistribution(Distribution):
    """The package carries native binaries: its wheel is platform-specific."""

    def has_ext_modules(self):
        return True


setup(
    name="overlap",
    distclass=BinaryDistribution,
    version="0.3.0",
    description="Data-parallel training runtime with Horovod's API (overlap.torch, "
                "overlap.tensorflow)",
    package_dir={"": "python"},
    packages=["overlap", "overlap._horovod_common", "overlap.torch", "overlap.torch.elastic",
              "overlap.tensorflow", "overlap.tensorflow.keras"],
    package_data={"overlap.tensorflow": ["native/*.cc", "native/*.h"]},
    python_requires=">=3.8",
    cmdclass={"build_py": BuildWithBazel},
    entry_points={"console_scripts": ["overlaprun = overlap.launcher:main"]},
    zip_safe=False,
)
