"""Declaring GPU targets only where the CUDA toolkit was found (see cuda_configure.bzl)."""

load(
    "@cuda//:defs.bzl",
    _CUDA_AVAILABLE = "CUDA_AVAILABLE",
    _CUDA_HOME = "CUDA_HOME",
    _CUDA_SKIP_REASON = "CUDA_SKIP_REASON",
    _NVCC = "NVCC",
)

CUDA_AVAILABLE = _CUDA_AVAILABLE
CUDA_HOME = _CUDA_HOME
NVCC = _NVCC
CUDA_SKIP_REASON = _CUDA_SKIP_REASON

def cuda_only(rule, **kwargs):
    """Declares `rule(**kwargs)` where the CUDA toolkit was found, and nothing elsewhere."""
    if CUDA_AVAILABLE:
        rule(**kwargs)

def cuda_skipped_test(name):
    """Where there is no CUDA toolkit, a test that stands in for the absent GPU targets: it prints
    why they are absent and passes. Loading its package prints the same line once per Bazel
    command (a DEBUG line, replayed even when cached), so `bazel build //...` and
    `bazel test //...` show it. Where the toolkit was found, nothing."""
    if not CUDA_AVAILABLE:
        print(CUDA_SKIP_REASON)
        native.sh_test(
            name = name,
            size = "small",
            srcs = ["//third_party/cuda:skipped_test.sh"],
            env = {"OVERLAP_CUDA_SKIP_REASON": CUDA_SKIP_REASON},
        )

def if_cuda(if_true, if_false = []):
    """`if_true` where the CUDA toolkit was found, `if_false` elsewhere (for srcs and deps)."""
    return if_true if CUDA_AVAILABLE else if_false
