"""op=hvd.Adasum in overlap.tensorflow: allreduce, grouped_allreduce, DistributedGradientTape and
the Keras DistributedOptimizer, eagerly and inside tf.function, against references every rank
computes itself from every rank's inputs.

The reference combines whole vectors pairwise in the runtime's order (ranks 2i and 2i+1 first;
the lower group's vector is `a`), rounding to the dtype after each level as the runtime does
(collectives/adasum.h). The DistributedOptimizer is checked against Horovod's documented
semantics: each rank steps on its own gradients, the variables' deltas are Adasum-combined.
On a rank count that is not a power of two (the 3-rank run) only the refusals run.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

# The regression task test_tf_training trains (data, its gradients, the starting variables).
from test_tf_training import data, local_grads, make_variables


def power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def require_power_of_two(hvd):
    if not power_of_two(hvd.size()):
        pytest.skip("Adasum runs on a power-of-two number of ranks; this run checks the refusal")


def adasum_pair(a, b):
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 if aa == 0 else 1.0 - dot / (2 * aa)
    cb = 1.0 if bb == 0 else 1.0 - dot / (2 * bb)
    return ca * a + cb * b


def adasum_reference(vectors, np_dtype):
    level = [np.asarray(v, np.float64).reshape(-1) for v in vectors]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]).astype(np_dtype).astype(np.float64)
                 for i in range(0, len(level), 2)]
    return level[0]


TOLERANCE = {np.float16: 4 * 2.0 ** -10, np.float32: 16 * 2.0 ** -23, np.float64: 1e-12}


def assert_matches(got, want, np_dtype, what):
    got = np.asarray(got, np.float64).reshape(-1)
    scale = max(np.abs(want).max() if want.size else 0.0, 1e-30)
    error = np.abs(got - want).max() if want.size else 0.0
    assert error <= TOLERANCE[np_dtype] * scale, f"{what}: off by {error} (scale {scale})"


def rank_input(rank, n, seed, np_dtype):
    rng = np.random.default_rng(1000 * seed + rank)
    return rng.uniform(-1, 1, n).astype(np_dtype)


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
def test_allreduce_and_grouped_match_the_reference(hvd, run, mode, dtype):
    require_power_of_two(hvd)
    n, r = hvd.size(), hvd.rank()
    np_dtype = dtype.as_numpy_dtype
    for i, count in enumerate([1, 5, 1001]):
        every = [rank_input(k, count, 10 + i, np_dtype) for k in range(n)]
        want = adasum_reference(every, np_dtype)
        got = run(lambda t: hvd.allreduce(t, op=hvd.Adasum, name="adasum.%s.%s.%d"
                                          % (mode, dtype.name, count)),
                  tf.constant(every[r]))
        assert got.dtype == dtype
        assert_matches(got, want, np_dtype, "allreduce of %d" % count)
    sizes = [3, 40, 1]
    members = [[rank_input(k, s, 30 + j, np_dtype) for k in range(n)]
               for j, s in enumerate(sizes)]
    got = run(lambda *ts: hvd.grouped_allreduce(list(ts), op=hvd.Adasum,
                                                name="adasum.group.%s.%s" % (mode, dtype.name)),
              *[tf.constant(m[r]) for m in members])
    for j, (g, m) in enumerate(zip(got, members)):
        assert_matches(g, adasum_reference(m, np_dtype), np_dtype, "grouped member %d" % j)


def test_gradient_tape_reduces_the_gradients_with_adasum(hvd, mode):
    require_power_of_two(hvd)
    n, r = hvd.size(), hvd.rank()
    variables = make_variables()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ variables[0] + variables[1] - y) ** 2)
        return hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(loss, variables)

    fn = step if mode == "eager" else tf.function(step)
    for repeat in range(2):
        grads = fn(*data(r, rows=8, seed=repeat))
        everyone = [local_grads(variables, *data(k, rows=8, seed=repeat)) for k in range(n)]
        for i, g in enumerate(grads):
            want = adasum_reference([e[i].numpy() for e in everyone], np.float32)
            assert_matches(g, want, np.float32, "gradient %d" % i)


def build_model(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="tanh"),
                             keras.layers.Dense(1)])


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["function", "eager"])
def test_keras_optimizer_combines_each_ranks_update(khvd, run_eagerly):
    """One model.fit step per batch: each rank's Adam steps on its own batch; the weights' deltas
    are Adasum-combined. The reference runs every rank's Adam here, one model each."""
    require_power_of_two(khvd)
    n, r = khvd.size(), khvd.rank()
    steps, batch = 3, 8
    model = build_model(seed=7)
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.Adam(0.01),
                                                      op=khvd.Adasum),
                  loss="mse", run_eagerly=run_eagerly)
    x, y = data(r, rows=steps * batch, seed=5)
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    copies = [build_model(seed=7) for _ in range(n)]
    optimizers = [keras.optimizers.Adam(0.01) for _ in range(n)]
    everyone = [data(k, rows=steps * batch, seed=5) for k in range(n)]
    for s in range(steps):
        starts = [w.numpy() for w in copies[0].trainable_weights]
        deltas = []
        for k in range(n):
            xk = everyone[k][0][s * batch:(s + 1) * batch]
            yk = everyone[k][1][s * batch:(s + 1) * batch]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((copies[k](xk) - yk) ** 2)
            grads = tape.gradient(loss, copies[k].trainable_weights)
            optimizers[k].apply(grads, copies[k].trainable_weights)
            deltas.append([w.numpy() - s0 for w, s0 in zip(copies[k].trainable_weights, starts)])
        for i, s0 in enumerate(starts):
            combined = s0 + adasum_reference([d[i] for d in deltas], np.float32).reshape(s0.shape)
            for c in copies:
                c.trainable_weights[i].assign(combined)
    for i, (w, ref) in enumerate(zip(model.trainable_weights, copies[0].trainable_weights)):
        got, want = w.numpy(), ref.numpy()
        assert np.allclose(got, want, rtol=1e-4, atol=1e-5), (
            "weight %d: max diff %g" % (i, np.abs(got - want).max()))
    w = model.trainable_weights[0].numpy()
    gathered = khvd.allgather(tf.constant(w[None]), name="adasum.fit.%s" % run_eagerly)
    for k in range(n):
        assert np.array_equal(gathered[k].numpy(), w), "rank %d's weights differ" % k


def test_refusals(hvd):
    me = "rank %d: " % hvd.rank()
    n = hvd.size()
    if not power_of_two(n):
        with pytest.raises(Exception) as info:
            hvd.allreduce(tf.ones([4]), op=hvd.Adasum, name="adasum.odd")
        assert "Adasum needs a power-of-two number of ranks, and this job has %d" % n in str(
            info.value), str(info.value)
        with pytest.raises(ValueError) as info:
            hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Adasum)
        assert str(info.value) == (
            me + "Adasum needs a power-of-two number of ranks, and this job has %d" % n)
    with pytest.raises(Exception) as info:
        hvd.allreduce(tf.ones([4], tf.int32), op=hvd.Adasum, name="adasum.int")
    assert "Adasum" in str(info.value) and "adasum.int" in str(info.value), str(info.value)
    assert np.array_equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="adasum.after").numpy(),
                          np.full([2], float(n)))

