"""The training suite under a scheduling planner: BUILD runs this file with
TEST_OVERLAP_INIT="planner=deft,staleness=0", so hvd.init() gets those options (with staleness
above 0 deft may delay a bucket, depending on the measured step; test_tf_delayed.py checks
delayed updates under a pinned schedule instead).

The first test trains a tf.function step with DistributedGradientTape until the runtime has
profiled the marked steps and adopted the planner's plan (it must be first: the runtime plans
the first steps it sees repeat). The training suite's tests follow, collected here too; under
deft they check that ranks agree and training converges rather than exact synchronous values."""

import json
import os

import tensorflow as tf

from test_tf_training import data, make_variables


def test_planner_took_effect(hvd):
    wanted = dict(i.split("=", 1) for i in os.environ.get("TEST_OVERLAP_INIT", "").split(",")
                  if i).get("planner")
    variables = make_variables()

    @tf.function
    def step(x, y):
        with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(0.05 * g)
        return loss

    # The runtime profiles a few steps, then rank 0 plans on a thread of its own while training
    # goes on, so on a loaded machine adoption can take more steps. Every ten steps the ranks
    # agree (a Min allreduce) on whether all of them have the plan, so they stop together.
    losses = []
    for _ in range(15):
        losses += [float(step(*data(hvd.rank()))) for _ in range(10)]
        mine = int(not wanted or wanted in hvd.stats().get("planner", ""))
        if len(losses) >= 30 and int(hvd.allreduce(tf.constant([mine]), op=hvd.Min)[0]):
            break
    stats = hvd.stats()
    if wanted:
        assert wanted in stats.get("planner", ""), json.dumps(stats)
        assert stats["plans_scheduled"] >= 1, json.dumps(stats)
    assert losses[-1] < losses[0], losses


from test_tf_training import *  # noqa: E402,F401,F403 (the same tests, collected here too)
