"""Keras 3 callbacks of horovod.tensorflow.keras.callbacks."""

import keras
import numpy as np
import tensorflow as tf

from overlap import _core
from overlap.tensorflow import mpi_ops
from overlap.tensorflow.functions import broadcast_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes every rank start from root_rank's model and optimizer state.

    Runs at the start of training, when Keras 3 has already built the model and the optimizer's
    variables (fit builds them before calling callbacks), so the first step already uses the
    root's weights. A later fit() on the same model broadcasts again only if the optimizer
    gained variables since."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        self._optimizer_variables = 0
        # As in Horovod: variables each rank keeps its own of, left out of the broadcast.
        self._local_variables = list(local_variables or [])

    def _variables(self):
        variables = list(self.model.variables)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and getattr(optimizer, "built", False):
            variables += [v for v in optimizer.variables if not _in(v, variables)]
        return [v for v in variables if not _in(v, self._local_variables)]

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        count = len(optimizer.variables) if optimizer is not None else 0
        if self.broadcast_done and count == self._optimizer_variables:
            return
        broadcast_variables(self._variables(), self.root_rank)
        self.broadcast_done = True
        self._optimizer_variables = count


def _in(variable, variables):
    return any(variable is v for v in variables)


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each epoch's metrics in `logs` with their average over every rank, before the
    callbacks that follow it (put it ahead of loggers and checkpoints)."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if _is_number(v))
        if not names:
            return
        values = tf.constant([float(logs[k]) for k in names], tf.float64)
        averaged = mpi_ops.allreduce(values, op=mpi_ops.Average,
                                     name="metric_average.%d" % epoch).numpy()
        for k, v in zip(names, averaged):
            logs[k] = float(v)


def _is_number(value):
    return isinstance(value, (int, float, np.number)) or (
        hasattr(value, "shape") and np.ndim(value) == 0)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr x multiplier(epoch) from start_epoch up to (not
    including) end_epoch, as Horovod's: with staircase (the default) once at the first batch of
    each epoch, otherwise at every batch with a fractional epoch (epoch + batch /
    steps_per_epoch). A number as multiplier means multiplier ** epoch. Outside the epochs the
    rate is left alone, so several schedules can cover consecutive ranges. steps_per_epoch
    defaults to what fit() reports. momentum_correction is accepted for Horovod compatibility and
    not applied: Keras 3 optimizers keep momentum as a constant of the compiled train step."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("rank %d: LearningRateScheduleCallback needs initial_lr"
                             % _core.rank())
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (
            lambda epoch, base=float(multiplier): base ** epoch)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0

    def on_train_begin(self, logs=None):
        if self.staircase or self.steps_per_epoch:
            return
        self.steps_per_epoch = self.params.get("steps") if self.params else None
        if not self.steps_per_epoch:
            raise ValueError("rank %d: %s needs steps_per_epoch (fit() did not report it)"
                             % (_core.rank(), type(self).__name__))

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def _in_range(self):
        return self.current_epoch >= self.start_epoch and (
            self.end_epoch is None or self.current_epoch < self.end_epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if not self._in_range():
            return
        if self.staircase:
            if batch == 0:
                self.model.optimizer.learning_rate = (
                    self.initial_lr * self.multiplier(self.current_epoch))
            return
        epoch = self.current_epoch + float(batch) / self.steps_per_epoch
        self.model.optimizer.learning_rate = self.initial_lr * self.multiplier(epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size() to initial_lr over warmup_epochs, per
    batch (Goyal et al.'s gradual warmup, as Horovod). initial_lr is the learning rate already
    scaled by the number of ranks. steps_per_epoch defaults to what fit() reports."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        # One epoch past the warmup, so that the rate lands exactly on initial_lr (Horovod
        # shifts its ramp by one batch for the same end).
        super().__init__(initial_lr, self._warmup, start_epoch=0, end_epoch=warmup_epochs + 1,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def _warmup(self, epoch):
        """The fraction of initial_lr at fractional `epoch`."""
        if epoch >= self.warmup_epochs:
            return 1.0
        size = _core.size()
        return 1.0 / size * (1.0 - epoch / self.warmup_epochs) + epoch / self.warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        if self.verbose and epoch < self.warmup_epochs and _core.rank() == 0:
            print("\nEpoch %d: LearningRateWarmupCallback sets learning rate to %g." %
                  (epoch + 1, _learning_rate(self.model.optimizer)))
        super().on_epoch_end(epoch, logs)


def _learning_rate(optimizer):
    """The optimizer's current learning rate as a float. Through numpy: Keras variables take
    float() only from Keras 3.5 on, and TensorFlow 2.16 and 2.17 came with Keras 3.0-3.4."""
    return float(np.asarray(optimizer.learning_rate))


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """keras.callbacks.ModelCheckpoint with save_best_only=True that saves on rank 0 only (put
    MetricAverageCallback ahead of it, so that every rank judges the same metrics). Horovod's
    takes no filepath (its estimators set `filepath` afterwards); Keras 3 needs one, so
    `filepath` is an extra keyword, and a checkpoint made without it raises when it would save
    until `filepath` is set."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        # Keras 3 checks the suffix at construction; a later filepath is the user's to choose.
        placeholder = "best.weights.h5" if save_weights_only else "best.keras"
        super().__init__(filepath=filepath or placeholder, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)
        if filepath is None:
            self.filepath = None

    def _save_model(self, epoch, batch, logs):
        if _core.rank() != 0:
            return
        if self.filepath is None:
            raise ValueError("rank 0: BestModelCheckpoint has no filepath; pass filepath= or "
                             "set its filepath attribute before fit()")
        super()._save_model(epoch, batch, logs)
