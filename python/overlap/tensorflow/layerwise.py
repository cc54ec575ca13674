"""Keras updates at forward: the Keras DistributedOptimizer's apply() submits the gradients'
allreduces and returns, and each variable's update is applied just before the forward of the
layer that owns it, so the averaging of one step overlaps the next step's forward (as
overlap.torch's, overlap/torch/layerwise.py; DESIGN.md section 9).

The contract (docs/tensorflow.md, "Updates at forward"):
- Values are the synchronous optimizer's: the same averaged gradient, the Keras optimizer's own
  apply() on each variable (clipping per tensor, weight decay, constraints, loss scale), with the
  learning rate the optimizer had when apply() was called, and its iteration count, which
  counts applied steps: it moves when the next apply() starts or the pending updates are applied.
- A variable's pending update is applied before the first of: a forward of the layer that owns
  it (its own variables, `layer._trainable_variables`; eagerly, in a tf.function, in model.fit,
  evaluate and predict), the next apply(), `optimizer.apply_pending_updates()`, model.save(),
  save_weights(), get_weights(), tf.train.Checkpoint's save() and write(), the end of
  model.fit(), or hvd.shutdown(). Code that reads a variable in another way right after a step
  (`v.numpy()`, a layer reading another layer's variable without calling it) calls
  apply_pending_updates() first.

How: apply() emits one OverlapAllreduceStart per gradient (native/pending.h), which parks the
handle under the allreduce's name; before a layer's forward, one OverlapAllreduceFinish per own
variable collects it (waiting), and the optimizer applies it under tf.cond(has_update). Inside a
tf.function the graph is static, so every forward has a finish for each of its variables; a
finish that finds nothing parked (the first step, or collected by an earlier forward) gives
has_update false and the update is skipped. The finish depends on the layer's inputs, so the
runtime sees each gradient's real first use. Eagerly, the table says what is parked and only
those are collected.
"""

import weakref

import tensorflow as tf

from overlap import _core
from overlap.tensorflow import step_markers

# Keras DistributedOptimizers whose updates are deferred; the forward hook asks each of them. Held
# weakly, as overlap.torch's: one that is collected has nothing left to apply, although its
# DeferredUpdates may live on in a traced function.
_deferring = weakref.WeakSet()
_installed = False


def apply_all_pending_updates():
    """Applies every deferring optimizer's pending updates (saving, the end of fit, shutdown)."""
    for optimizer in list(_deferring):
        optimizer._overlap_deferred.apply_pending()


def _graph_key():
    """The graph ops are being emitted into, or None eagerly."""
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


class DeferredUpdates:
    """One Keras DistributedOptimizer's deferred updates.

    optimizer: the (re-classed) Keras optimizer; reducer: its GradientReducer (names, factors,
    compression); apply_now(optimizer, grads, variables): the Keras optimizer's own apply() on
    a subset."""

    def __init__(self, optimizer, reducer, apply_now):
        self._optimizer = weakref.ref(optimizer)
        self._reducer = reducer
        self._apply_now = apply_now
        self._by_key = {}            # variable key -> (name, variable, wire dtype)
        # graph -> {variable key: its finish op} for what was collected since the graph's start
        # (or since the key's last submission in it).
        self._collected = weakref.WeakKeyDictionary()
        self._started = weakref.WeakKeyDictionary()  # graph -> {variable key: its start op}
        self._pending_step = None    # bool variable: a step's updates are (maybe) pending
        self._learning_rate = None   # variable: the pending step's learning rate
        self._applying = False
        self._names = set()          # every name registered, for _abandon_parked
        _deferring.add(optimizer)
        # An optimizer collected with updates parked can never apply them; they would hold their
        # names, and the next optimizer whose gradients have the same names (layers named alike,
        # or after keras.utils.clear_session()) would fail to submit ("submitted again").
        finalizer = weakref.finalize(optimizer, _abandon_parked, self._names)
        finalizer.atexit = False  # at exit nothing is submitted again
        install()

    # -- apply() -------------------------------------------------------------------------------
    def step(self, grads, variables, deferrable):
        """apply() of one step: applies what an earlier step left pending, counts it, then
        submits the gradients at the indices `deferrable` and applies the others now (their
        reduced gradients already in `grads`)."""
        optimizer = self._optimizer()
        self._create_state()
        self.register(variables)
        self.apply_pending(count=False)
        optimizer._iterations.assign_add(tf.cast(self._pending_step, optimizer._iterations.dtype))
        self._pending_step.assign(True)
        self._learning_rate.assign(tf.cast(optimizer._get_current_learning_rate(),
                                           self._learning_rate.dtype))
        now = [(g, v) for i, (g, v) in enumerate(zip(grads, variables))
               if g is not None and i not in deferrable]
        if now:
            self._apply([g for g, _ in now], [v for _, v in now])
        for i in sorted(deferrable):
            self._start(grads[i], variables[i])

    def _create_state(self):
        if self._pending_step is None:
            optimizer = self._optimizer()
            with tf.init_scope():
                # In the learning rate's own dtype, so that the update casts it as Keras does.
                dtype = tf.convert_to_tensor(optimizer._get_current_learning_rate()).dtype
                self._pending_step = tf.Variable(False, trainable=False,
                                                 name="overlap_pending_step")
                self._learning_rate = tf.Variable(tf.zeros([], dtype), trainable=False,
                                                  name="overlap_pending_learning_rate")

    def register(self, variables):
        """Names each variable's deferred allreduce by its position in `variables` (the list
        the optimizer is built with), once: a name never changes while something may be
        parked under it. Called at build, so that a tf.function traced afterwards collects
        each variable at its layer's forward."""
        from overlap.tensorflow import gradients
        for index, variable in enumerate(variables):
            key = self._key(variable)
            if key in self._by_key or not tf.as_dtype(variable.dtype).is_floating:
                continue
            name = "%s.%s" % (self._reducer.prefix, gradients.variable_name(variable, index))
            wire, _ = self._reducer.compression.compress(tf.zeros([], variable.dtype))
            self._by_key[key] = (name, variable, wire.dtype)
            self._names.add(name)

    def _start(self, grad, variable):
        from overlap.tensorflow import mpi_ops
        key = self._key(variable)
        name = self._by_key[key][0]
        compression = self._reducer.compression
        wire, _ = compression.compress(tf.convert_to_tensor(grad))
        pre, post = self._reducer._factors()
        graph = _graph_key()
        # After this graph's collection of the same name: a submission while the last one is
        # still parked is an error (native/pending.h).
        finished = self._collected.get(graph, {}).pop(key, None) if graph is not None else None
        with tf.control_dependencies([finished] if finished is not None else []):
            started = mpi_ops.allreduce_start(wire, name, op=self._reducer.op,
                                              compression_spec=compression.runtime_spec,
                                              prescale_factor=pre, postscale_factor=post,
                                              process_set=self._reducer.process_set)
        if graph is not None:
            self._started.setdefault(graph, {})[key] = started

    # -- collection ----------------------------------------------------------------------------
    def before_forward(self, layer, inputs):
        """Applies the pending updates of `layer`'s own variables, after `inputs` exist."""
        if self._applying or not self._by_key:
            return
        own = getattr(layer, "_trainable_variables", None) or []
        keys = [k for k in (self._key(v) for v in own) if self._maybe_parked(k)]
        if not keys:
            return
        graph = _graph_key()
        # (An eager tensor a tf.function captured has no graph: getattr's default.)
        after = [t for t in tf.nest.flatten(inputs) if graph is not None and
                 isinstance(t, tf.Tensor) and getattr(t, "graph", None) is graph]
        # The step's forward begins here, before the first wait, as overlap.torch marks it:
        # the marker apply() places would run only after the forward (tf.function runs stateful
        # ops in program order), and the waits would count in the previous step's update.
        marker = step_markers.forward()
        if marker is not None and graph is not None:
            after.append(marker)
        with tf.control_dependencies(after):
            self._collect(keys)

    def apply_pending(self, count=True):
        """Applies every pending update; with `count`, also counts the step in the optimizer's
        iterations (as the next apply() would)."""
        if self._pending_step is None:
            return
        keys = [k for k in self._by_key if self._maybe_parked(k)]
        if keys:
            self._collect(keys)
        if count:
            optimizer = self._optimizer()
            optimizer._iterations.assign_add(tf.cast(self._pending_step,
                                                     optimizer._iterations.dtype))
            self._pending_step.assign(False)

    def _maybe_parked(self, key):
        if key not in self._by_key:
            return False
        graph = _graph_key()
        if graph is None:
            # Eagerly the table itself says (a tf.function may have parked it).
            from overlap.tensorflow import op_library
            return op_library.is_parked(self._by_key[key][0])
        return key not in self._collected.get(graph, {})

    def _collect(self, keys):
        from overlap.tensorflow import mpi_ops
        graph = _graph_key()
        for key in keys:
            name, variable, wire_dtype = self._by_key[key]
            # After this graph's submission of the same name, if it has one: the two ops are
            # otherwise unordered, and a finish that ran first would find nothing.
            started = self._started.get(graph, {}).pop(key, None) if graph is not None else None
            with tf.control_dependencies([started] if started is not None else []):
                reduced, has_update = mpi_ops.allreduce_finish(name, wire_dtype, variable.shape)
            # Every compressor in overlap.tensorflow.compression decompresses by a cast back.
            grad = tf.cast(reduced, variable.dtype)
            if graph is None:
                if bool(has_update):
                    self._apply([grad], [variable])
            else:
                def update(grad=grad, variable=variable):
                    self._apply([grad], [variable])

                tf.cond(has_update, update, lambda: None)
                self._collected.setdefault(graph, {})[key] = has_update.op

    def _apply(self, grads, variables):
        """The Keras optimizer's own apply() of the pending step (its learning rate), leaving the
        iteration count where it was (apply() adds one; the step is counted once, above)."""
        optimizer = self._optimizer()
        object.__setattr__(optimizer, "_overlap_learning_rate", self._learning_rate)
        self._applying = True
        try:
            self._apply_now(optimizer, grads, variables)
            optimizer._iterations.assign_sub(1)
        finally:
            self._applying = False
            object.__setattr__(optimizer, "_overlap_learning_rate", None)

    def _key(self, variable):
        return self._optimizer()._var_key(variable)


def _abandon_parked(names):
    """A deferring optimizer was collected: gives up its parked allreduces (native/pending.h),
    whose updates nothing can apply any more, and says so."""
    import warnings

    from overlap.tensorflow import op_library
    dropped = sorted(n for n in names if op_library.abandon_parked(n))
    if dropped:
        rank = _core.rank() if _core.is_initialized() else "?"
        warnings.warn(
            "overlap: rank %s: a Keras DistributedOptimizer was collected with %d update(s) it "
            "had not applied yet (%s); they are dropped. Call optimizer.apply_pending_updates() "
            "(or run a forward) before letting an optimizer go."
            % (rank, len(dropped), ", ".join(dropped[:3]) + (", ..." if len(dropped) > 3
                                                                    else "")),
            RuntimeWarning, stacklevel=2)


def install():
    """Wraps, once, keras.layers.Layer.__call__ (each deferring optimizer applies the layer's
    pending updates first) and the calls that must see every update applied: Model.fit (at its
    end), save, save_weights, get_weights, and tf.train.Checkpoint's save and write."""
    global _installed
    if _installed:
        return
    import keras

    layer_call = keras.layers.Layer.__call__

    def __call__(self, *args, **kwargs):
        if _deferring and not _symbolic(args, kwargs):
            for optimizer in list(_deferring):
                optimizer._overlap_deferred.before_forward(self, (args, kwargs))
        return layer_call(self, *args, **kwargs)

    keras.layers.Layer.__call__ = __call__

    def applies_first(cls, method):
        original = getattr(cls, method)

        def wrapper(self, *args, **kwargs):
            if tf.executing_eagerly():
                apply_all_pending_updates()
            return original(self, *args, **kwargs)

        wrapper.__name__ = original.__name__
        wrapper.__doc__ = original.__doc__
        setattr(cls, method, wrapper)

    for method in ("save", "save_weights"):
        applies_first(keras.Model, method)
    applies_first(keras.layers.Layer, "get_weights")
    for method in ("save", "write"):
        applies_first(tf.train.Checkpoint, method)

    fit = keras.Model.fit

    def fit_then_apply(self, *args, **kwargs):
        try:
            return fit(self, *args, **kwargs)
        finally:
            if _core.is_initialized():
                apply_all_pending_updates()

    fit_then_apply.__name__ = fit.__name__
    fit_then_apply.__doc__ = fit.__doc__
    keras.Model.fit = fit_then_apply
    _installed = True


def _symbolic(args, kwargs):
    """Whether a layer is being called on Keras' symbolic tensors (building a functional model),
    where nothing runs."""
    import keras
    return any(isinstance(t, keras.KerasTensor) for t in tf.nest.flatten((args, kwargs)))
