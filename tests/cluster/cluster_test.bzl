"""cluster_mpi_test: a multi-rank test run by overlaprun across namespace hosts (needs root)."""

def cluster_mpi_test(name, binary, hosts = 4, timeout_s = 120, launcher_args = [], args = [], tags = []):
    """`binary` on `hosts` network-namespace hosts, one rank each, all traffic over TCP.

    Args:
      name: the test's name.
      binary: a cc_binary label in the calling package.
      hosts: how many namespace hosts (and ranks).
      timeout_s: hard limit for the run, enforced with timeout(1) inside the test.
      launcher_args: overlaprun options, e.g. ["--stall-warning", "1", "--stall-timeout", "3"].
      args: the program's arguments.
      tags: extra tags; "exclusive" and "requires-root" are always added.
    """
    native.sh_test(
        name = name,
        srcs = ["//tests/cluster:cluster_mpi_test.sh"],
        args = [str(hosts), str(timeout_s), "$(rootpath %s)" % binary] + launcher_args + ["--"] + args,
        data = [
            binary,
            "//launcher:overlaprun",
            "//tools/cluster:cluster.sh",
            "//tools/cluster:cluster_rsh.sh",
        ],
        size = "medium",
        # Bazel's limit stays above timeout_s (plus the cluster's setup), so the test's own
        # timeout, which names the ranks, is the one that fires.
        timeout = "short" if timeout_s <= 40 else ("moderate" if timeout_s <= 240 else "long"),
        # One namespace cluster per machine: these tests take a lock and run alone.
        tags = tags + ["exclusive", "requires-root", "cluster"],
    )
