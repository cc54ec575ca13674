"""Keras updates at forward (overlap/tensorflow/layerwise.py): the Keras DistributedOptimizer's
apply() submits the allreduces and each variable's update is applied just before its layer's
next forward.

Each test trains two copies of one model side by side on every rank, with the same data: one
under update_at_forward=True, one under update_at_forward=False (the synchronous optimizer, whose
values test_tf_training.py checks against references). After every step the deferred copy's
variables, once its next forward (or apply_pending_updates()) has applied them, must equal the
synchronous copy's; apply() itself must move no variable; the optimizer's iteration count must
match once applied; and a checkpoint saved right after a step must hold the applied values.
Eagerly, inside tf.function and in model.fit (also with steps_per_execution > 1), with SGD with
momentum, AdamW (weight decay, bias correction by iterations) and a learning-rate schedule.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

STEPS = 6


def close(actual, expected, what, tol=1e-5):
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert np.allclose(a, e, rtol=tol, atol=tol), f"{what}: max diff {np.abs(a - e).max()}"


def batches(rank, steps=STEPS, rows=8):
    rng = np.random.default_rng(7 + rank)
    x = rng.uniform(-1, 1, (steps + 1, rows, 6)).astype(np.float32)
    y = np.tanh(x @ rng.uniform(-1, 1, (6, 2)).astype(np.float32))
    return x, y.astype(np.float32)


def make_model(seed=3):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="tanh"),
                              keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)])
    return model


OPTIMIZERS = {
    "sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "adamw": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1),
    "sgd_schedule": lambda: keras.optimizers.SGD(
        keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=1, decay_rate=0.7)),
}


def pair(khvd, name):
    deferred_model, sync_model = make_model(), make_model()
    deferred = khvd.DistributedOptimizer(OPTIMIZERS[name](), update_at_forward=True)
    sync = khvd.DistributedOptimizer(OPTIMIZERS[name](), update_at_forward=False)
    assert deferred._overlap_deferred is not None and sync._overlap_deferred is None
    return deferred_model, deferred, sync_model, sync


def values(model):
    # The variables' raw values: neither get_weights() nor a forward, so nothing is applied.
    return [v.numpy() for v in model.trainable_variables]


def train_step_fn(model, optimizer, compiled):
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return tf.function(step) if compiled else step


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_custom_loop_equals_synchronous(khvd, mode, name):
    x, y = batches(khvd.rank())
    deferred_model, deferred, sync_model, sync = pair(khvd, name)
    deferred_step = train_step_fn(deferred_model, deferred, mode == "function")
    sync_step = train_step_fn(sync_model, sync, mode == "function")
    for step in range(STEPS):
        previous = values(sync_model)
        deferred_loss = deferred_step(x[step], y[step])
        sync_loss = sync_step(x[step], y[step])
        # The forward saw the variables after the previous step's update: same loss.
        close(deferred_loss, sync_loss, f"step {step}: loss")
        # This step's forward applied the previous step's updates, and apply() moved nothing.
        for i, (a, b) in enumerate(zip(values(deferred_model), previous)):
            close(a, b, f"step {step}: variable {i} after apply()")
    # The last step's updates are still pending; the next forward applies them.
    assert any(not np.array_equal(a, b) for a, b in
               zip(values(deferred_model), values(sync_model))), "nothing was deferred"
    # Inside a tf.function, on an eager tensor the function captures (not an argument).
    last = tf.constant(x[STEPS])
    forward = tf.function(lambda: deferred_model(last)) if mode == "function" else (
        lambda: deferred_model(last))
    close(forward(), sync_model(x[STEPS]), "forward after the last step")
    for i, (a, b) in enumerate(zip(values(deferred_model), values(sync_model))):
        close(a, b, f"variable {i} after the last forward")
    deferred.apply_pending_updates()
    assert int(deferred.iterations.numpy()) == int(sync.iterations.numpy()) == STEPS


def test_learning_rate_set_between_steps(khvd, mode):
    """A callback that sets the learning rate before each batch (Horovod's warmup) acts from the
    next step on: the pending update keeps the rate its apply() saw."""
    x, y = batches(khvd.rank())
    deferred_model, deferred, sync_model, sync = pair(khvd, "sgd_momentum")
    deferred_step = train_step_fn(deferred_model, deferred, mode == "function")
    sync_step = train_step_fn(sync_model, sync, mode == "function")
    for step in range(STEPS):
        for optimizer in (deferred, sync):
            optimizer.learning_rate.assign(0.1 * 0.5 ** step)
        close(deferred_step(x[step], y[step]), sync_step(x[step], y[step]), f"step {step}: loss")
    deferred.apply_pending_updates()
    for i, (a, b) in enumerate(zip(values(deferred_model), values(sync_model))):
        close(a, b, f"variable {i}")


def test_apply_pending_and_checkpoint(khvd, mode, tmp_path):
    x, y = batches(khvd.rank())
    deferred_model, deferred, sync_model, sync = pair(khvd, "adamw")
    deferred_step = train_step_fn(deferred_model, deferred, mode == "function")
    sync_step = train_step_fn(sync_model, sync, mode == "function")
    for step in range(3):
        deferred_step(x[step], y[step])
        sync_step(x[step], y[step])
    # save_weights applies what is pending: the file holds the synchronous values.
    path = os.path.join(str(tmp_path), "rank%d.weights.h5" % khvd.rank())
    deferred_model.save_weights(path)
    restored = make_model(seed=11)
    restored.load_weights(path)
    for i, (a, b) in enumerate(zip(values(restored), values(sync_model))):
        close(a, b, f"checkpoint variable {i}")
    assert int(deferred.iterations.numpy()) == 3
    # Nothing is left parked, and a second application is a no-op.
    from overlap.tensorflow import op_library
    assert op_library.parked_reductions() == 0
    deferred.apply_pending_updates()
    for i, (a, b) in enumerate(zip(values(deferred_model), values(sync_model))):
        close(a, b, f"variable {i} after a second application")
    assert int(deferred.iterations.numpy()) == 3


@pytest.mark.parametrize("steps_per_execution", [1, 2])
def test_model_fit_equals_synchronous(khvd, steps_per_execution):
    x, y = batches(khvd.rank(), steps=8)
    x, y = x[:8].reshape(-1, 6), y[:8].reshape(-1, 2)
    models = {}
    for deferral in (True, False):
        model = make_model()
        optimizer = khvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9),
                                              update_at_forward=deferral)
        model.compile(optimizer=optimizer, loss="mse", steps_per_execution=steps_per_execution)
        history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        models[deferral] = (model, optimizer, history.history["loss"])
    (deferred_model, deferred, losses), (sync_model, sync, sync_losses) = models[True], models[False]
    close(losses, sync_losses, "epoch losses", tol=1e-5)
    # fit's end applied the last step.
    for i, (a, b) in enumerate(zip(values(deferred_model), values(sync_model))):
        close(a, b, f"variable {i} after fit", tol=1e-5)
    assert int(deferred.iterations.numpy()) == int(sync.iterations.numpy()) == 16
    close(deferred_model.evaluate(x, y, verbose=0), sync_model.evaluate(x, y, verbose=0),
          "evaluate", tol=1e-5)


def test_default_and_refusals(khvd):
    # On by default under this suite's bytescheduler (a planner with next-forward windows), as
    # in overlap.torch; off when asked.
    optimizer = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    assert optimizer._overlap_deferred is not None
    assert khvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                     update_at_forward=False)._overlap_deferred is None
    with pytest.raises(ValueError, match="rank %d: update_at_forward=True cannot be used with "
                       "use_ema" % khvd.rank()):
        khvd.DistributedOptimizer(keras.optimizers.SGD(0.1, use_ema=True), update_at_forward=True)
    with pytest.raises(ValueError, match="global_clipnorm"):
        khvd.DistributedOptimizer(keras.optimizers.SGD(0.1, global_clipnorm=1.0),
                                  update_at_forward=True)
    # Ruled out and not asked for: synchronous, no error.
    plain = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1, use_ema=True))
    assert plain._overlap_deferred is None


def test_deferred_updates_that_outlive_their_optimizer_leave_forwards_alone(khvd):
    # A traced function can keep an optimizer's deferred updates alive after the optimizer is
    # collected; when the forward hook held those, it met the dead optimizer in a later test's
    # model.fit (AttributeError: 'NoneType' object has no attribute '_var_key').
    import gc

    from overlap.tensorflow import layerwise
    x, y = batches(khvd.rank(), steps=2)
    x, y = x[:2].reshape(-1, 6), y[:2].reshape(-1, 2)
    model = make_model()
    optimizer = khvd.DistributedOptimizer(keras.optimizers.SGD(0.05), update_at_forward=True)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    orphan = optimizer._overlap_deferred  # held, as a traced function's closure would
    del model, optimizer
    gc.collect()
    assert orphan._optimizer() is None, "the optimizer was not collected; the test checks nothing"
    other = make_model(seed=4)
    other.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.05),
                                                      update_at_forward=True), loss="mse")
    history = other.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    # The forward hook asks the live optimizer, and nothing of the collected one.
    assert other.optimizer in layerwise._deferring
    assert all(o._overlap_deferred is not orphan for o in layerwise._deferring)
    other.optimizer.apply_pending_updates()
    layerwise.apply_all_pending_updates()


def test_an_optimizer_collected_with_updates_parked_gives_them_up(khvd):
    # A custom loop that lets its optimizer go right after a step leaves that step's allreduces
    # parked. They must not keep their names: a later optimizer whose gradients are named alike
    # (layers named alike here; keras.utils.clear_session() does the same) failed at its first
    # apply() with "submitted again while the update of its previous submission was never
    # applied". The dropped updates are announced.
    import gc

    from overlap.tensorflow import op_library

    def named_model(name="dropped"):
        keras.utils.set_random_seed(5)
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, name=name + "_a"),
                                 keras.layers.Dense(2, name=name + "_b")], name=name)

    x, y = batches(khvd.rank(), steps=3)
    before = op_library.parked_reductions()
    model = named_model()
    optimizer = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), update_at_forward=True)
    train_step_fn(model, optimizer, compiled=False)(x[0], y[0])
    assert op_library.parked_reductions() == before + 4  # two kernels, two biases
    with pytest.warns(RuntimeWarning, match=r"rank %d: a Keras DistributedOptimizer was "
                      r"collected with 4 update\(s\) it had not applied" % khvd.rank()):
        del optimizer
        gc.collect()
    assert op_library.parked_reductions() == before

    # The same names again: two steps, applied at the next forward and at the end, with the
    # values of the synchronous optimizer on a copy of the same model (the same seed).
    again = named_model()
    deferred = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), update_at_forward=True)
    sync_model = named_model("kept")  # other names: only the deferred copy parks allreduces
    sync = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), update_at_forward=False)
    for s in range(2):
        train_step_fn(again, deferred, compiled=False)(x[s], y[s])
        train_step_fn(sync_model, sync, compiled=False)(x[s], y[s])
    deferred.apply_pending_updates()
    for a, e in zip(values(again), values(sync_model)):
        close(a, e, "after the dropped optimizer's names were reused")
    assert op_library.parked_reductions() == before
