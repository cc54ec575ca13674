"""overlap.tensorflow's errors, on every rank and without hanging, eagerly and in tf.function.

- Before hvd.init(), ranks and collectives raise ValueError naming init.
- Tensors that disagree across ranks (shape, rank of the shape, dtype, broadcast root, allgather
  trailing dimensions) raise tf.errors.OpError on every rank, with a message naming the rank and
  the tensor; afterwards the ranks go on working.
- Adasum of integers, unsupported dtypes and bad optimizer arguments are refused with ValueError
  (Adasum's by the runtime, as tf.errors.OpError where the op library raises it).
Every test is under the conftest watchdog: a hang ends the rank with a traceback.
"""

import re
import time

import keras
import pytest
import tensorflow as tf

# The first test runs before init: it must stay first, and must not use the `hvd` fixture.


def test_calls_before_init_raise():
    import overlap.tensorflow as hvd
    assert not hvd.is_initialized()
    for query in [hvd.rank, hvd.size, hvd.local_rank, hvd.local_size]:
        with pytest.raises(ValueError, match="init"):
            query()
    with pytest.raises(ValueError, match="init"):
        hvd.allreduce(tf.ones([3]), name="before.init")
    with pytest.raises(ValueError, match="init"):
        hvd.DistributedGradientTape(tf.GradientTape())


def check_still_working(hvd, name):
    out = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="after." + name)
    assert out.numpy().tolist() == [float(hvd.size())] * 2, "allreduce after " + name


def expect_error_on_every_rank(hvd, mode, name, fn, *args):
    """fn(*args) (eagerly or traced) must raise an OpError naming this rank and the tensor."""
    call = fn if mode == "eager" else tf.function(fn)
    with pytest.raises(tf.errors.OpError) as info:
        out = call(*args)
        if isinstance(out, tf.Tensor):
            out.numpy()
    message = str(info.value.message)
    assert name in message, f"the error does not name '{name}': {message}"
    assert re.search(r"\brank \d+", message), f"the error does not name a rank: {message}"
    check_still_working(hvd, "%s.%s" % (name, mode))
    return message


def odd(hvd):
    return hvd.rank() % 2 == 1


def test_allreduce_shape_mismatch(hvd, mode):
    shape = [4, 6] if odd(hvd) else [4, 5]
    name = "mismatch.allreduce.shape." + mode
    expect_error_on_every_rank(hvd, mode, name, lambda x: hvd.allreduce(x, name=name),
                               tf.ones(shape))


def test_allreduce_ndim_mismatch(hvd, mode):
    shape = [2, 3, 4] if odd(hvd) else [6, 4]
    name = "mismatch.allreduce.ndim." + mode
    expect_error_on_every_rank(hvd, mode, name, lambda x: hvd.allreduce(x, name=name),
                               tf.ones(shape))


def test_allreduce_dtype_mismatch(hvd, mode):
    dtype = tf.float32 if odd(hvd) else tf.int32
    name = "mismatch.allreduce.dtype." + mode
    expect_error_on_every_rank(hvd, mode, name,
                               lambda x: hvd.allreduce(x, op=hvd.Sum, name=name),
                               tf.ones([5], dtype))


def test_allgather_trailing_mismatch(hvd, mode):
    shape = [2, 3] if odd(hvd) else [2, 4]
    name = "mismatch.allgather." + mode
    expect_error_on_every_rank(hvd, mode, name, lambda x: hvd.allgather(x, name=name),
                               tf.ones(shape))


def test_broadcast_root_mismatch(hvd, mode):
    root = 1 if odd(hvd) else 0
    name = "mismatch.broadcast.root." + mode
    expect_error_on_every_rank(hvd, mode, name, lambda x: hvd.broadcast(x, root, name=name),
                               tf.ones([3]))


def test_tf1_graph_broadcast_root_mismatch_fails_every_rank_within_seconds(hvd):
    """Ranks that name different roots for one broadcast in a TensorFlow 1 graph: every rank's
    session.run raises FailedPreconditionError naming the roots within seconds, not the stall
    timeout (Horovod's test_horovod_broadcast_rank_error in graph mode), and the ranks go on."""
    root = 1 if odd(hvd) else 0
    name = "mismatch.broadcast.root.tf1"
    graph = tf.Graph()
    with graph.as_default():
        out = hvd.broadcast(tf.ones([3]), root, name=name)
        with tf.compat.v1.Session(graph=graph) as session:
            start = time.monotonic()
            with pytest.raises(tf.errors.FailedPreconditionError) as info:
                session.run(out)
            elapsed = time.monotonic() - start
    message = str(info.value.message)
    assert name in message and "root rank mismatch" in message, message
    assert elapsed < 10, "the mismatch took %.1f s to fail on rank %d" % (elapsed, hvd.rank())
    check_still_working(hvd, name)


def test_gradient_tape_mismatch(hvd, mode):
    """A variable whose shape differs between ranks fails DistributedGradientTape everywhere."""
    v = tf.Variable(tf.ones([3 if odd(hvd) else 2]))

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        return hvd.DistributedGradientTape(tape).gradient(loss, [v])[0]

    expect_error_on_every_rank(hvd, mode, "gradient", step)


def test_mismatch_message_in_full(hvd, mode):
    """The whole text after TensorFlow's op prefix, as docs/bad-inputs.md quotes it."""
    shape = [4, 6] if odd(hvd) else [4, 5]
    name = "catalogue.dense.kernel." + mode
    message = expect_error_on_every_rank(hvd, mode, name, lambda x: hvd.allreduce(x, name=name),
                                         tf.ones(shape))
    assert ("rank %d: allreduce '%s': shape mismatch: rank 0 submitted [4,5], rank 1 submitted "
            "[4,6]" % (hvd.rank(), name)) in message, message


def test_python_refusal_messages_in_full(hvd):
    me = "rank %d: " % hvd.rank()

    def raised(exception_type, call):
        with pytest.raises(exception_type) as info:
            call()
        return str(info.value)

    assert raised(ValueError, lambda: hvd.allreduce(tf.constant(["a"]), name="catalogue.str")) == (
        me + "allreduce 'catalogue.str': tensor type string is not supported")
    assert raised(ValueError, lambda: hvd.allgather(tf.constant(1.0), name="catalogue.scalar")) == (
        me + "allgather 'catalogue.scalar': needs at least one dimension (got a scalar)")
    assert raised(ValueError, lambda: hvd.DistributedGradientTape(tf.GradientTape(),
                                                                  op=hvd.Max)) == (
        me + "gradients reduce with hvd.Average, hvd.Sum or hvd.Adasum, got hvd.Max")
    assert raised(ValueError, lambda: hvd.DistributedOptimizer(object())) == (
        me + "DistributedOptimizer wraps Keras 3 optimizers (keras.optimizers.*), got object")
    assert raised(ValueError, lambda: hvd.DistributedOptimizer(
        keras.optimizers.SGD(0.1), backward_passes_per_step=0)) == (
        me + "backward_passes_per_step must be >= 1, got 0")
    check_still_working(hvd, "catalogue.refusals")


def test_python_refusals(hvd):
    with pytest.raises((ValueError, tf.errors.OpError), match="Adasum"):
        hvd.allreduce(tf.ones([2], tf.int32), op=hvd.Adasum, name="adasum")
    with pytest.raises(ValueError, match="rank %d.*not supported" % hvd.rank()):
        hvd.allreduce(tf.constant(["a"]), name="strings")
    with pytest.raises(ValueError, match="scalar"):
        hvd.allgather(tf.constant(1.0), name="scalar")
    with pytest.raises(ValueError, match="Keras 3 optimizers"):
        hvd.DistributedOptimizer(object())
    with pytest.raises(ValueError, match="Average"):
        hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Max)
    with pytest.raises(RuntimeError, match="broadcast_variables"):
        hvd.broadcast_global_variables(0)
    opt = keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(opt, backward_passes_per_step=0)
    check_still_working(hvd, "refusals")
