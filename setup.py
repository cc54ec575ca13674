"""pip install . : builds the core library and the launcher with Bazel and installs them inside
the Python package `overlap` (overlap.torch), with an `overlaprun` command.

Needs what tools/setup.sh installs (Bazel, Open MPI, Abseil, spdlog); run it first on a fresh
machine. The build reuses Bazel's cache, so a second install takes seconds.
"""

import os
import shutil
import subprocess

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


class BuildWithBazel(build_py):
    def run(self):
        super().run()
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
    description="Data-parallel training runtime with Horovod's API (overlap.torch)",
    package_dir={"": "python"},
    packages=["overlap", "overlap.torch"],
    python_requires=">=3.8",
    cmdclass={"build_py": BuildWithBazel},
    entry_points={"console_scripts": ["overlaprun = overlap.launcher:main"]},
    zip_safe=False,
)
