"""overlap_pytest_test: one pytest suite of a Python adapter run on `np` ranks by overlaprun."""

def overlap_pytest_test(name, framework, np, suite, data = [], env = {}, timeout_s = 600, tags = [],
                        resume = False):
    """A suite of tests/torch or tests/tensorflow on `np` ranks (tests/python_util/run_pytest.sh).

    framework: "torch" (a missing torch fails the test) or "tensorflow" (a missing tensorflow
    passes with a SKIPPED line). suite: the test_*.py file, in the calling package. data: its
    conftest.py and helpers. env: runtime settings for the suite. tags: more tags, e.g.
    "extended" for a run that repeats another on more ranks (tools/test.sh leaves those out
    unless OVERLAP_EXTENDED=1). resume: run the suite twice, `-k test_save` then `-k test_resume`
    in fresh processes, sharing $OVERLAP_RESUME_DIR (tests/python_util/resume_test.sh).
    """
    # Suites that set a plan test hook load the test build of the library, which has the hooks
    # installed (runtime/plan/plan_test_hooks.h); the shipped liboverlap.so reads no OVERLAP_TEST_*.
    hooked = [k for k in env if k in ("OVERLAP_TEST_PLAN_SCHEDULE", "OVERLAP_TEST_CORRUPT_PLAN",
                                      "OVERLAP_TEST_REPLAN_DIFFERS")]
    library = "//tests/runtime:liboverlap_testing.so" if hooked else "//runtime:liboverlap.so"
    runner = "//tests/python_util:run_pytest.sh"
    native.sh_test(
        name = name,
        size = "large",
        srcs = ["//tests/python_util:resume_test.sh"] if resume else [runner],
        args = (["$(rootpath %s)" % runner] if resume else []) + [
            framework,
            "$(rootpath //tests/python_util:overlap_pytest.py)",
            "$(rootpath //launcher:overlaprun)",
            str(np),
            str(timeout_s),
            "$(rootpath %s)" % library,
            "python",
            "$(rootpath %s)" % suite,
        ],
        data = data + [
            suite,
            "//tests/python_util:overlap_pytest.py",
            "//python:overlap_sources",
            runner,
            "//launcher:overlaprun",
            library,
        ],
        env = env,
        # Ranks of two tests at once would share two cores eight ways: run them one at a time.
        tags = [
            "exclusive",
            "mpi",
            framework,
        ] + tags,
    )
