"""A run under a delayed plan with the staleness correction looking ahead, checkpointed at step K
with tf.train.Checkpoint and hvd.save_compression_state() and resumed in fresh processes, repeats
the uninterrupted run bit for bit (overlap/tensorflow/staleness.py, "Checkpoints";
runtime/plan/plan_checkpoint.h).

tests/python_util/resume_test.sh runs this file twice on the same ranks, with the settings of
tests/tensorflow/BUILD (deft with staleness 1 and max_period 2; OVERLAP_TEST_PLAN_SCHEDULE=1,2:
every bucket has delay 1 and period 2, so every variable looks ahead 1 to 2 passes and an update
carrying two passes is applied as two):
  -k save    trains K steps (the plan runs the last of them) with test_tf_staleness.py's three
             models (one DistributedGradientTape, Keras SGD with momentum, Adam and AdamW),
             writes tf.train.Checkpoint(variables, optimizers) and the runtime's state, goes on to
             step K + AFTER and saves every rank's variables and optimizer iterations;
  -k resume  fresh processes restore both before their first step, run steps K .. K + AFTER - 1
             and must end with the same bits, every value of the checkpoint used (the
             correction's kept gradients and saved values included).
Between steps the variables hold their moved-ahead values; the checkpoint holds those and the
true values beside them, so nothing has to be put back before saving.
"""

import os

import numpy as np
import tensorflow as tf

from test_tf_staleness import Runs, batch

KINDS = ["sgd", "adam", "adamw"]
SAVE_STEP = 32  # the plan is adopted after about 12 steps (OVERLAP_PROFILE_STEPS=3)
AFTER = 6


def path(name, hvd):
    return os.path.join(os.environ["OVERLAP_RESUME_DIR"], f"{name}.{hvd.rank()}")


def checkpoint(runs):
    return tf.train.Checkpoint(variables=runs.variables, optimizers=runs.optimizers)


def train(hvd, runs, first, last):
    for n in range(first, last):
        x, y = (tf.constant(a) for a in batch(hvd.rank(), n))
        runs.step(n, x, y)


def state(runs):
    """Every variable as it is now (moved ahead), then each optimizer's iteration count."""
    values = [v.numpy().reshape(-1) for variables in runs.variables for v in variables]
    return np.concatenate(values + [np.array([float(o.iterations.numpy())
                                              for o in runs.optimizers])])


def test_save(hvd):
    runs = Runs(hvd, "tape", "auto", KINDS)
    train(hvd, runs, 0, SAVE_STEP)
    stats = hvd.stats()
    assert 0 <= stats["plan_adopted_step"] <= stats["steps"] - 4, \
        f"rank {hvd.rank()}: the plan has not run 4 steps in {SAVE_STEP}: {stats}"
    assert stats["delayed_bytes"] > 0, stats  # what the runtime's state must carry
    assert all(o.staleness_correction_bytes() > 0 for o in runs.optimizers)
    saved = checkpoint(runs).write(path("checkpoint", hvd))
    names = [name for name, _ in tf.train.list_variables(saved)]
    for i, kind in enumerate(KINDS):
        for what in ("saved", "shifted", "local", "kept", "head"):
            assert any(n.startswith(f"optimizers/{i}/_overlap_staleness_state/state/{what}_")
                       for n in names), f"rank {hvd.rank()}: no {what} state of {kind}: {names}"
    with open(path("runtime", hvd), "wb") as f:
        f.write(hvd.save_compression_state())
    train(hvd, runs, SAVE_STEP, SAVE_STEP + AFTER)
    np.save(path("expected", hvd) + ".npy", state(runs))
    assert hvd.stats()["plans_scheduled"] == 1, hvd.stats()


def test_resume(hvd):
    runs = Runs(hvd, "tape", "auto", KINDS)
    status = checkpoint(runs).read(path("checkpoint", hvd))
    with open(path("runtime", hvd), "rb") as f:
        hvd.restore_compression_state(f.read())
    negotiated = hvd.stats()["negotiated_operations"]
    train(hvd, runs, SAVE_STEP, SAVE_STEP + 1)
    # The correction's state is made at the first apply() and filled from the checkpoint then:
    # by now every value the checkpoint holds has found its variable.
    status.assert_consumed()
    train(hvd, runs, SAVE_STEP + 1, SAVE_STEP + AFTER)
    expected = np.load(path("expected", hvd) + ".npy")
    got = state(runs)
    differ = int((got != expected).sum())
    assert differ == 0, (f"rank {hvd.rank()}: {differ} of {got.size} values differ from the "
                         f"uninterrupted run (largest difference "
                         f"{np.abs(got - expected).max():g})")
    stats = hvd.stats()
    assert stats["planner"] == "deft", stats
    assert stats["plans_scheduled"] == 1, stats  # the restored plan, no other
    assert stats["negotiated_operations"] == negotiated, stats  # every gradient ran in it
