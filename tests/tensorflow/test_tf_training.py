"""Training with overlap.tensorflow and overlap.tensorflow.keras, checked against references each
rank computes itself from every rank's data.

- DistributedGradientTape, eagerly and in tf.function: the gradients equal the average (or sum)
  of every rank's local gradients, with compression, groups, predivide and IndexedSlices.
- Keras 3 model.fit with DistributedOptimizer and the callbacks: every rank ends with the same
  weights, equal to one model trained on the global batch (synchronous planners), and the
  metrics are averaged over ranks; the warmup callback sets the learning rates Horovod's does.
Under the planner suite (test_tf_planner.py: deft) plans change when gradients travel, so
there the checks are that ranks agree and the loss falls.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

DELAYED = "deft" in os.environ.get("TEST_OVERLAP_INIT", "")


def data(rank, rows=16, seed=0):
    rng = np.random.default_rng(100 * seed + rank)
    x = rng.uniform(-1, 1, (rows, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.1).astype(np.float32)
    return x, y


def local_grads(variables, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
    return tape.gradient(loss, variables)


def make_variables():
    return [tf.Variable(tf.reshape(tf.range(4, dtype=tf.float32) / 10.0, [4, 1])),
            tf.Variable([0.2])]


def close(actual, expected, what, tol=1e-5):
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert np.allclose(a, e, rtol=tol, atol=tol), f"{what}: max diff {np.abs(a - e).max()}"


@pytest.mark.parametrize("options", [
    {}, {"op": "Sum"}, {"compression": "fp16"}, {"groups": 1}, {"gradient_predivide_factor": 2.0},
    {"compression": "fp16_ef"}],
    ids=lambda o: ",".join("%s=%s" % kv for kv in o.items()) or "plain")
def test_gradient_tape(hvd, mode, options):
    n, r = hvd.size(), hvd.rank()
    variables = make_variables()
    kwargs = dict(options)
    if "op" in kwargs:
        kwargs["op"] = getattr(hvd, kwargs["op"])
    if kwargs.get("compression") == "fp16":
        kwargs["compression"] = hvd.Compression.fp16
    elif kwargs.get("compression") == "fp16_ef":
        kwargs["compression"] = hvd.Compression.fp16_ef()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
        tape = hvd.DistributedGradientTape(tape, **kwargs)
        return tape.gradient(loss, variables)

    fn = step if mode == "eager" else tf.function(step)
    for repeat in range(2):  # a traced step repeats its names; eager ones are fixed too
        grads = fn(*data(r, seed=repeat))
        everyone = [local_grads(variables, *data(k, seed=repeat)) for k in range(n)]
        scale = 1.0 if kwargs.get("op") == hvd.Sum else 1.0 / n
        tol = 1e-2 if "compression" in options else 1e-5
        for i, g in enumerate(grads):
            close(g, scale * sum(e[i] for e in everyone), "gradient %d" % i, tol)


def test_gradient_tape_as_context_and_sparse(hvd, mode):
    n, r = hvd.size(), hvd.rank()
    table = tf.Variable(tf.ones([6, 2]))
    ids = tf.constant([r % 6, (r + 1) % 6])

    def step(sparse_as_dense):
        with hvd.DistributedGradientTape(tf.GradientTape(), sparse_as_dense=sparse_as_dense) \
                as tape:
            loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids))
        return tape.gradient(loss, [table])[0]

    expected = np.zeros([6, 2])
    for k in range(n):
        for row in (k % 6, (k + 1) % 6):
            expected[row] += 1.0 / n
    for sparse_as_dense in (False, True):
        fn = step if mode == "eager" else tf.function(step)
        grad = fn(sparse_as_dense)
        if isinstance(grad, tf.IndexedSlices):
            grad = tf.math.unsorted_segment_sum(grad.values, grad.indices, 6)
        close(grad, expected, "embedding gradient (sparse_as_dense=%s)" % sparse_as_dense)


def build_model(seed=1):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    return model


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["function", "eager"])
def test_keras_fit_matches_global_batch(khvd, run_eagerly):
    n, r = khvd.size(), khvd.rank()
    steps, batch = 4, 8
    x, y = data(r, rows=steps * batch, seed=3)
    model = build_model(seed=10 + r)  # different initial weights: the callback must align them
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    model.compile(optimizer=opt, loss="mse", run_eagerly=run_eagerly)
    history = model.fit(x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0,
                        callbacks=[khvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   khvd.callbacks.MetricAverageCallback()])
    weights = [w.numpy() for w in model.weights]
    for i, w in enumerate(weights):  # every rank holds the same weights
        gathered = khvd.allgather(tf.constant(w[None]), name="fit.%s.w%d" % (run_eagerly, i))
        for k in range(n):
            close(gathered[k], w, "weight %d of rank %d vs this rank" % (i, k), 1e-6)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses
    # The averaged metric is the same on every rank.
    gathered = khvd.allgather(tf.constant([losses[-1]]), name="fit.%s.loss" % run_eagerly)
    close(gathered, np.full([n], losses[-1]), "averaged loss", 1e-6)
    if DELAYED:
        return
    # Reference: rank 0's initial model trained on the global batch (rank order in each step).
    reference = build_model(seed=10)
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    everyone = [data(k, rows=steps * batch, seed=3) for k in range(n)]
    gx = np.concatenate([np.concatenate([e[0][s * batch:(s + 1) * batch] for e in everyone])
                         for s in range(steps)])
    gy = np.concatenate([np.concatenate([e[1][s * batch:(s + 1) * batch] for e in everyone])
                         for s in range(steps)])
    reference.fit(gx, gy, batch_size=batch * n, epochs=2, shuffle=False, verbose=0)
    for i, (w, ref) in enumerate(zip(weights, reference.weights)):
        close(w, ref.numpy(), "weight %d vs the global-batch reference" % i, 1e-4)


def test_keras_options_and_accumulation(khvd):
    n, r = khvd.size(), khvd.rank()
    x, y = data(r, rows=32, seed=4)
    model = build_model(seed=20)
    opt = khvd.DistributedOptimizer(keras.optimizers.Adam(0.01), backward_passes_per_step=2,
                                   compression=khvd.Compression.fp16, groups=2)
    assert isinstance(opt, keras.optimizers.Adam) and opt.gradient_accumulation_steps == 2
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
              callbacks=[khvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    w = model.weights[0].numpy()
    gathered = khvd.allgather(tf.constant(w[None]), name="accumulation.w")
    for k in range(n):
        close(gathered[k], w, "weights of rank %d" % k, 1e-3)
    # 8 batches, applied every 2. Keras counts the applied steps from 3.5 on and every batch
    # before (TensorFlow 2.16 and 2.17 came with Keras 3.0-3.4, whose variables also take no
    # int(): hence numpy).
    keras_version = tuple(int(part) for part in keras.__version__.split(".")[:2])
    assert int(np.asarray(opt.iterations)) == (4 if keras_version >= (3, 5) else 8)
    with pytest.raises(ValueError, match="already a DistributedOptimizer"):
        khvd.DistributedOptimizer(opt)


def test_learning_rate_warmup(khvd):
    n = khvd.size()
    model = build_model()
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(np.asarray(self.model.optimizer.learning_rate)))

    warmup = khvd.callbacks.LearningRateWarmupCallback(initial_lr=0.4, warmup_epochs=2)
    x, y = data(khvd.rank(), rows=16)
    model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False,
              callbacks=[warmup, Record()])
    expected = []
    for epoch in range(3):
        for batch in range(4):
            e = epoch + batch / 4.0
            m = 1.0 if e >= 2 else 1.0 / n * (1 - e / 2) + e / 2
            expected.append(0.4 * m)
    close(seen, expected, "warmup learning rates", 1e-6)


def test_step_markers_reach_the_runtime(hvd):
    """DistributedGradientTape in a tf.function marks forward, backward and update each step."""
    variables = make_variables()

    @tf.function
    def step(x, y):
        with hvd.DistributedGradientTape(tf.GradientTape()) as tape:
            loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(0.1 * g)
        return loss

    before = hvd.stats()["steps"]
    for _ in range(3):
        step(*data(hvd.rank()))
    assert hvd.stats()["steps"] >= before + 3, hvd.stats()


def test_from_config_and_a_saved_model_give_working_distributed_optimizers(khvd, tmp_path):
    """As in Horovod: the wrapped class's from_config rebuilds a DistributedOptimizer with the
    same options, and a model saved with one names the Keras optimizer, so that load_model
    finds it and wraps it again."""
    n, r = khvd.size(), khvd.rank()
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=khvd.Sum)
    for copy in [opt.__class__.from_config(opt.get_config()), opt.from_config(opt.get_config())]:
        assert type(copy).__name__ == "SGD" and isinstance(copy, keras.optimizers.SGD)
        assert copy.get_config() == opt.get_config()
        v = tf.Variable([1.0])
        copy.apply_gradients([(tf.constant([float(r + 1)]), v)])
        close(v.numpy(), [1.0 - 0.1 * sum(k + 1 for k in range(n))], "a from_config copy's step")

    x, y = data(r, rows=8, seed=5)
    model = build_model(seed=21)
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[khvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    path = str(tmp_path / ("model_rank%d.keras" % r))
    model.save(path)
    loaded = khvd.load_model(path)
    assert type(loaded.optimizer).__name__ == "Adam"
    assert type(loaded.optimizer).__module__ == keras.optimizers.Adam.__module__
    assert hasattr(loaded.optimizer, "_overlap_reducer"), "load_model did not wrap the optimizer"
    for a, b in zip(loaded.weights, model.weights):
        close(a.numpy(), b.numpy(), "a loaded weight")


def test_broadcast_callback_leaves_local_variables_alone(khvd):
    """BroadcastGlobalVariablesCallback(root_rank, local_variables=...) as in Horovod: the listed
    variables keep each rank's value, the others take the root's."""
    r = khvd.rank()
    x, y = data(r, rows=8, seed=6)
    model = build_model(seed=30 + r)  # different weights on every rank
    local = model.weights[2]  # the output layer's kernel: random, different on every rank
    mine = local.numpy().copy()
    if r != 0:
        assert not np.allclose(mine, build_model(seed=30).weights[2].numpy())
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[
        khvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])])
    close(local.numpy(), mine, "the local variable")
    root = build_model(seed=30)
    close(model.weights[0].numpy(), root.weights[0].numpy(), "a broadcast weight")


@pytest.mark.parametrize("staircase", [True, False])
def test_learning_rate_schedule(khvd, staircase):
    """Horovod's LearningRateScheduleCallback: initial_lr x multiplier(epoch) inside
    [start_epoch, end_epoch), per epoch (staircase) or per batch; a number as multiplier decays
    exponentially; consecutive schedules cover consecutive ranges."""
    # Named layers: Keras numbers unnamed ones per process, and earlier tests in this file build
    # different numbers of models on different ranks, so default names (and with them the
    # gradients' names) would differ between ranks.
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="schedule_hidden"),
                              keras.layers.Dense(1, name="schedule_out")],
                             name="schedule_%s" % staircase)
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.3)), loss="mse")
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(np.asarray(self.model.optimizer.learning_rate)))

    schedules = [
        khvd.callbacks.LearningRateScheduleCallback(0.2, 0.5, start_epoch=1, end_epoch=3,
                                                    staircase=staircase),
        khvd.callbacks.LearningRateScheduleCallback(0.2, lambda epoch: 0.01, start_epoch=3,
                                                    staircase=staircase),
    ]
    x, y = data(khvd.rank(), rows=16)
    history = model.fit(x, y, batch_size=4, epochs=4, verbose=0, shuffle=False,
                        callbacks=schedules + [Record()])
    expected = []
    for epoch in range(4):
        for batch in range(4):
            e = epoch if staircase else epoch + batch / 4.0
            expected.append(0.3 if epoch < 1 else 0.2 * 0.5 ** e if epoch < 3 else 0.2 * 0.01)
    close(seen, expected, "scheduled learning rates", 1e-6)
    assert history.history["lr"][-1] == pytest.approx(0.002)
    with pytest.raises(ValueError, match="initial_lr"):
        khvd.callbacks.LearningRateScheduleCallback(None, 0.5)
