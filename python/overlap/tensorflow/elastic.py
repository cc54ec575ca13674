"""horovod.tensorflow.elastic's API on overlap, on a fixed set of ranks (overlap/elastic.py says
what "elastic" means here): TensorFlowKerasState, TensorFlowState and run, with init, shutdown,
HorovodInternalError and broadcast_object_fn, as Horovod's module carries them.

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()
"""

import copy

from overlap.basics import init, local_rank, rank, shutdown  # noqa: F401 (as Horovod's module)
from overlap.common import HorovodInternalError  # noqa: F401
from overlap.elastic import ObjectState, run_fn
from overlap.tensorflow.functions import (allgather_object, broadcast_object,
                                          broadcast_object_fn, broadcast_variables)  # noqa: F401


def run(func):
    """Decorator: `func(state, ...)` runs after `state` is synchronised from rank 0; a failed
    collective inside it rolls `state` back to its last commit and is raised again."""
    return run_fn(func)


def _values(variables):
    return [copy.deepcopy(v.numpy()) for v in variables]


def _assign(variables, values):
    for variable, value in zip(variables, values):
        variable.assign(value)


class TensorFlowState(ObjectState):
    """State of TensorFlow variables plus plain attributes (keyword arguments). save() copies the
    variables' values, restore() assigns them back, sync() takes rank 0's."""

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError("rank %d: TensorFlowState(session=...) is TensorFlow 1's; overlap "
                             "runs on TensorFlow 2, eagerly" % rank())
        self._state_variables = list(variables or [])
        self._saved_values = _values(self._state_variables)
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         allgather_object=allgather_object, get_local_rank=local_rank, **kwargs)

    def save(self):
        self._saved_values = _values(self._state_variables)
        super().save()

    def restore(self):
        _assign(self._state_variables, self._saved_values)
        super().restore()

    def sync(self, root_rank=0):
        # Rank 0's values become every rank's last commit too, as in Horovod: a restore() right
        # after sync() must not bring back this rank's own values from before it.
        if self._state_variables:
            broadcast_variables(self._state_variables, root_rank=root_rank)
        self._saved_values = _values(self._state_variables)
        super().sync(root_rank)

    def _committed(self):
        committed = super()._committed()
        committed["variables"] = self._saved_values
        return committed

    def _load_committed(self, committed):
        self._saved_values = committed["variables"]
        _assign(self._state_variables, self._saved_values)
        super()._load_committed(committed)


class TensorFlowKerasState(ObjectState):
    """State of a Keras model and its optimizer (the model's own when none is given) plus plain
    attributes. The optimizer's variables are built first if it has not stepped yet, so every
    rank saves and synchronises the same set."""

    def __init__(self, model, optimizer=None, backward_passes_per_step=1, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backward_passes_per_step = backward_passes_per_step
        self._build_optimizer()
        self._saved_model = _values(self.model.variables)
        self._saved_optimizer = _values(self._optimizer_variables())
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         allgather_object=allgather_object, get_local_rank=local_rank, **kwargs)

    def _build_optimizer(self):
        if self.optimizer is None or getattr(self.optimizer, "built", True):
            return
        build = getattr(self.optimizer, "build", None)
        if build is not None:
            build(self.model.trainable_variables)

    def _optimizer_variables(self):
        return list(self.optimizer.variables) if self.optimizer is not None else []

    def save(self):
        self._saved_model = _values(self.model.variables)
        self._saved_optimizer = _values(self._optimizer_variables())
        super().save()

    def restore(self):
        _assign(self.model.variables, self._saved_model)
        _assign(self._optimizer_variables(), self._saved_optimizer)
        super().restore()

    def sync(self, root_rank=0):
        broadcast_variables(list(self.model.variables) + self._optimizer_variables(),
                            root_rank=root_rank)
        self._saved_model = _values(self.model.variables)  # as TensorFlowState.sync
        self._saved_optimizer = _values(self._optimizer_variables())
        super().sync(root_rank)

    def _committed(self):
        committed = super()._committed()
        committed["model"], committed["optimizer"] = self._saved_model, self._saved_optimizer
        return committed

    def _load_committed(self, committed):
        self._saved_model, self._saved_optimizer = committed["model"], committed["optimizer"]
        _assign(self.model.variables, self._saved_model)
        _assign(self._optimizer_variables(), self._saved_optimizer)
        super()._load_committed(committed)
