"""The runtime's stall messages as patterns, for the adapters' stall suites
(tests/torch/test_torch_stalls.py, tests/tensorflow/test_tf_stalls.py): one copy of the text the
negotiator writes (runtime/negotiation/negotiator.cc), and of the settings both suites run with
(OVERLAP_STALL_WARNING_S=1, OVERLAP_STALL_TIMEOUT_S=4 in their BUILD targets)."""

import re

WARNING_S = 1
TIMEOUT_S = 4
SLACK_S = 6  # a loaded two-core machine: the coordinator's round and the ranks' start may lag


def ranks(*numbers):
    """The text of a rank list with hosts, e.g. [0 (vm)], as a pattern."""
    return r"\[%s\]" % ", ".join(r"%d \([^)]*\)" % r for r in numbers)


def stall_error(rank, kind, name, have, missing, whole=False):
    """A waiting rank's error once the stall timeout passed. whole: the pattern must match the
    whole message (where the framework adds nothing to it)."""
    pattern = (r"rank %d: stalled: %s '%s': submitted by ranks %s but not by ranks %s for [\d.]+ s,"
               r" past OVERLAP_STALL_TIMEOUT_S=%d" % (rank, kind, re.escape(name), ranks(*have),
                                                      ranks(*missing), TIMEOUT_S))
    return "^%s$" % pattern if whole else pattern


def stall_warning(kind, name, have, missing):
    """Rank 0's warning once the stall warning time passed."""
    return (r"overlap: rank 0: stall: %s '%s': submitted by ranks %s but not by ranks %s for "
            r"[\d.]+ s \(fails after OVERLAP_STALL_TIMEOUT_S=%d\)" % (
                kind, re.escape(name), ranks(*have), ranks(*missing), TIMEOUT_S))


def runtime_log(capfd):
    """What the runtime logged during the test (its logger writes to the process's stdout)."""
    captured = capfd.readouterr()
    return captured.out + captured.err
