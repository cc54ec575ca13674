"""hvd.elastic of overlap.tensorflow and overlap.tensorflow.keras (overlap/elastic.py): Horovod's
elastic API on a fixed set of ranks. States are synchronised from rank 0 when the wrapped function
starts and rolled back to their last commit when a collective fails; the Keras callbacks keep the
state's batch and epoch, and commit, during fit. Every value is checked against rank 0's or the
test's own.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf


def _model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    return model


def _same_on_every_rank(hvd, values, name):
    gathered = hvd.allgather_object([np.asarray(v) for v in values], name=name)
    return all(all(np.array_equal(a, b) for a, b in zip(g, gathered[0])) for g in gathered)


def test_tensorflow_state_syncs_variables_and_attributes_from_rank_0(hvd):
    variables = [tf.Variable(tf.fill([3], float(hvd.rank()))), tf.Variable(float(hvd.rank()))]
    state = hvd.elastic.TensorFlowState(variables, epoch=hvd.rank(), note="r%d" % hvd.rank())
    seen = {}

    @hvd.elastic.run
    def train(state):
        seen.update(epoch=state.epoch, note=state.note)
        return [v.numpy() for v in variables]

    values = train(state)
    assert seen == {"epoch": 0, "note": "r0"}
    assert np.array_equal(values[0], np.zeros(3, np.float32)) and values[1] == 0.0

    # commit, change, restore: back to the commit.
    variables[0].assign([1.0, 2.0, 3.0])
    state.epoch = 5
    state.commit()
    variables[0].assign([9.0, 9.0, 9.0])
    state.epoch = 6
    state.restore()
    assert np.array_equal(variables[0].numpy(), [1.0, 2.0, 3.0]) and state.epoch == 5
    with pytest.raises(ValueError, match="TensorFlow 1"):
        hvd.elastic.TensorFlowState(variables, session=object())


def test_a_restore_right_after_sync_gives_rank_0s_values(hvd):
    # Horovod's test_tensorflow.py test_elastic_state: sync() makes rank 0's values every rank's
    # commit, so restore() must not bring back a rank's own values from before the sync.
    variables = [tf.Variable(tf.fill([2, 2], 1.0 if hvd.rank() == 0 else 2.0))]
    state = hvd.elastic.TensorFlowState(variables, batch=20 + hvd.rank())
    state.sync()
    variables[0].assign(tf.fill([2, 2], 7.0))
    state.batch = 21
    state.restore()
    assert np.array_equal(variables[0].numpy(), np.ones((2, 2), np.float32))
    assert state.batch == 20


def test_keras_state_syncs_the_model_and_optimizer_from_rank_0(khvd):
    hvd = khvd
    model = _model(seed=hvd.rank())
    optimizer = keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss="mse")
    x = np.full((4, 4), hvd.rank() + 1.0, np.float32)
    model.train_on_batch(x, np.ones((4, 1), np.float32))  # rank-dependent Adam moments
    state = hvd.elastic.KerasState(model, batch=3 * hvd.rank(), epoch=hvd.rank())

    @hvd.elastic.run
    def train(state):
        return state.batch, state.epoch

    assert train(state) == (0, 0)
    synced = [v.numpy() for v in model.variables]
    model.variables[0].assign(model.variables[0] + 100.0)
    state.restore()  # back to the synced values, not this rank's own from before the sync
    assert all(np.array_equal(v.numpy(), s) for v, s in zip(model.variables, synced))
    assert _same_on_every_rank(hvd, [v.numpy() for v in model.variables], "keras.model")
    assert _same_on_every_rank(hvd, [v.numpy() for v in optimizer.variables], "keras.opt")
    rank0 = hvd.broadcast_object([v.numpy() for v in model.variables], name="keras.rank0")
    assert all(np.array_equal(v.numpy(), r) for v, r in zip(model.variables, rank0))


def test_keras_state_restores_model_and_optimizer_to_the_commit(khvd):
    hvd = khvd
    model = _model(seed=1)
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    x, y = np.ones((4, 4), np.float32), np.zeros((4, 1), np.float32)
    state = hvd.elastic.KerasState(model, epoch=0)  # the optimizer is built before its first step
    model.train_on_batch(x, y)
    state.commit()
    committed = [v.numpy().copy() for v in model.variables + model.optimizer.variables]
    model.train_on_batch(x, y)
    state.restore()
    now = [v.numpy() for v in model.variables + model.optimizer.variables]
    assert all(np.array_equal(a, b) for a, b in zip(now, committed))


def test_a_failed_collective_rolls_back_and_is_raised(khvd):
    hvd = khvd
    state = hvd.elastic.KerasState(_model(seed=2), batch=0)

    @hvd.elastic.run
    def train(state):
        state.batch = 4
        state.commit()
        state.batch = 5
        raise hvd.HorovodInternalError("rank 1: allreduce 'x' failed: peer lost")

    with pytest.raises(hvd.HorovodInternalError, match="ranks are fixed"):
        train(state)
    assert state.batch == 4


def test_keras_fit_with_the_elastic_callbacks(khvd):
    hvd = khvd
    model = _model(seed=hvd.rank())
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
    rng = np.random.default_rng(hvd.rank())
    x = rng.uniform(-1, 1, (24, 4)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    commits = []
    original_commit = state.commit

    def counting_commit():
        commits.append((state.epoch, state.batch))
        original_commit()

    state.commit = counting_commit
    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=2),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(x, y, batch_size=4, epochs=3 - state.epoch, callbacks=callbacks,
                        verbose=0)

    train(state)
    assert state.epoch == 3 and state.batch == 0
    # 6 batches an epoch: commits after batches 2, 4 and 6 (index 1, 3, 5) and at the epoch's
    # end. Callbacks run in list order, as in Horovod's examples, so each commit sees the batch
    # index the batch callback recorded one batch earlier, and the epoch before its update.
    assert commits[:4] == [(0, 0), (0, 2), (0, 4), (0, 5)]
    assert commits[4] == (1, 0)
    assert len(commits) == 12
    assert _same_on_every_rank(hvd, [v.numpy() for v in model.variables], "fit.model")


def test_horovod_elastic_module_names(hvd):
    """hvd.elastic carries init, shutdown, HorovodInternalError and broadcast_object_fn, as
    horovod.tensorflow.elastic does."""
    from overlap.basics import init, shutdown
    assert hvd.elastic.init is init and hvd.elastic.shutdown is shutdown
    assert hvd.elastic.HorovodInternalError is hvd.HorovodInternalError
    hvd.elastic.init()  # a second init is a no-op
    assert hvd.elastic.broadcast_object_fn(root_rank=0, name="elastic_fn")(
        hvd.rank() + 5) == 5
