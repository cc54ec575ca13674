"""The training suite under a scheduling planner with delayed updates: BUILD runs this file with
TEST_OVERLAP_INIT="planner=deft,staleness=1", so hvd.init() gets those options. Ranks must agree
and training must converge; a final test checks that the runtime took the planner."""

import os

import tensorflow as tf

from test_tf_training import *  # noqa: F401,F403 (the same tests, collected here too)
from test_tf_training import data, make_variables


def test_planner_took_effect(hvd):
    """After some marked steps the runtime names the planner from init() in its stats."""
    wanted = dict(i.split("=", 1) for i in os.environ.get("TEST_OVERLAP_INIT", "").split(",")
                  if i).get("planner")
    variables = make_variables()
    tape_step = tf.function(lambda x, y: _step(hvd, variables, x, y))
    for _ in range(40):
        tape_step(*data(hvd.rank()))
    stats = hvd.stats()
    if wanted:
        assert wanted in stats.get("planner", ""), stats


def _step(hvd, variables, x, y):
    with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
        loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
    for v, g in zip(variables, tape.gradient(loss, variables)):
        v.assign_sub(0.05 * g)
    return loss
