"""mpi_test: a multi-rank test, `binary` run on `np` ranks by overlaprun with a hard timeout."""

def mpi_test(name, binary, np, timeout_s = 240, args = [], env = {}, size = "large", tags = []):
    native.sh_test(
        name = name,
        srcs = ["//tests:mpirun_test.sh"],
        args = ["$(rootpath //launcher:overlaprun)", str(np), str(timeout_s), "$(rootpath %s)" % binary] + args,
        data = [binary, "//launcher:overlaprun"],
        env = env,
        size = size,
        # Ranks of two tests at once would share two cores eight ways: run them one at a time.
        tags = tags + ["exclusive", "mpi"],
    )
